/* The fake driver's JIT linker: the "cubin" it produces is its inputs concatenated (the fake's
 * module loader finds kernels by name, whatever the image holds); logs and keys are checked. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_LINK_MAGIC 0x4c494e4bu

struct fk_link {
    unsigned magic;
    char *out;
    size_t len;
    char *info, *error;
    size_t info_cap, error_cap;
};

CUresult cuLinkCreate(unsigned n, CUjit_option *opts, void **vals, CUlinkState *state)
{
    struct fk_link *l;

    if (!state || (n && (!opts || !vals))) return CUDA_ERROR_INVALID_VALUE;
    if (!(l = calloc(1, sizeof(*l)))) return CUDA_ERROR_OUT_OF_MEMORY;
    l->magic = FK_LINK_MAGIC;
    for (unsigned i = 0; i < n; i++) {
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER) l->info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) l->error = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) l->info_cap = (size_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) l->error_cap = (size_t)vals[i];
    }
    if (l->info && l->info_cap) l->info[0] = 0;
    if (l->error && l->error_cap) l->error[0] = 0;
    *state = (CUlinkState)l;
    return CUDA_SUCCESS;
}

static struct fk_link *link_check(CUlinkState s)
{
    struct fk_link *l = (struct fk_link *)s;
    return l && l->magic == FK_LINK_MAGIC ? l : NULL;
}

CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name, unsigned n, CUjit_option *o, void **v)
{
    struct fk_link *l = link_check(s);
    char *p;

    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_JIT_INPUT_PTX && type != CU_JIT_INPUT_CUBIN && type != CU_JIT_INPUT_FATBINARY) {
        if (l->error && l->error_cap) strncpy(l->error, "fakecuda: unsupported input type", l->error_cap - 1);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (!(p = realloc(l->out, l->len + size + 1))) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(p + l->len, data, size);
    l->out = p;
    l->len += size;
    p[l->len] = 0;
    if (l->info && l->info_cap) strncpy(l->info, name ? name : "", l->info_cap - 1);
    return CUDA_SUCCESS;
}

CUresult cuLinkComplete(CUlinkState s, void **cubin, size_t *size)
{
    struct fk_link *l = link_check(s);

    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    if (!cubin || !size || !l->len) return CUDA_ERROR_INVALID_VALUE;
    *cubin = l->out;
    *size = l->len;
    return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState s)
{
    struct fk_link *l = link_check(s);

    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    l->magic = 0;
    free(l->out);
    free(l);
    return CUDA_SUCCESS;
}
