/* CU_LIBRARY_BINARY_IS_PRESERVED in the fake driver: a library loaded with it keeps a pointer
 * to its image, as the real driver may read it any time until the unload; the unload checks
 * that the image's first bytes are still there and unchanged (an unmapped image crashes the
 * worker; a changed one fails the unload with CUDA_ERROR_INVALID_IMAGE and a line on stderr). */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>

#include "fakecuda.h"

#define CHECKED  4096
#define MAX_KEPT 256

static struct {
    void *lib;
    const uint8_t *image;
    uint64_t sum;
} kept[MAX_KEPT];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t checksum(const uint8_t *p)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < CHECKED; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

void fk_preserve_note(void *lib, const void *code, unsigned n, CUlibraryOption *opts, void **vals)
{
    bool preserved = false;

    for (unsigned i = 0; opts != NULL && vals != NULL && i < n; i++)
        if (opts[i] == CU_LIBRARY_BINARY_IS_PRESERVED && vals[i] != NULL)
            preserved = true;
    if (!preserved)
        return;
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < MAX_KEPT; i++) {
        if (kept[i].lib == NULL) {
            kept[i].lib = lib;
            kept[i].image = code;
            kept[i].sum = checksum(code);
            break;
        }
    }
    pthread_mutex_unlock(&kept_lock);
}

CUresult fk_preserve_check(void *lib)
{
    CUresult res = CUDA_SUCCESS;

    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < MAX_KEPT; i++) {
        if (kept[i].lib != lib)
            continue;
        if (checksum(kept[i].image) != kept[i].sum) {
            fprintf(stderr, "fakecuda: the preserved image of a library changed before its "
                            "unload\n");
            res = CUDA_ERROR_INVALID_IMAGE;
        }
        kept[i].lib = NULL;
        break;
    }
    pthread_mutex_unlock(&kept_lock);
    return res;
}
