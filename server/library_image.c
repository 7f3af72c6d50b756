/* Library images the driver reads in place. Natively cudart registers each fatbin with
 * cuLibraryLoadData and CU_LIBRARY_BINARY_IS_PRESERVED: the driver reads it where the program's
 * mapping of its library file holds it, and only the pieces it needs become resident. A worker
 * that loaded a received copy without that option made the driver keep its own copy of every
 * image. (That was not what made the PyTorch worker large: on the H100 host its 53 library
 * images totalled 113 MiB, and its peak RSS did not move.) An image the module
 * cache holds (64 KiB and up) is loaded from a read-only mapping of its cache file with
 * CU_LIBRARY_BINARY_IS_PRESERVED, and the mapping is kept until the library is unloaded; cache
 * files are never rewritten in place (renamed over, or unlinked), so the mapping stays as it was
 * loaded. Without a cache file the driver gets the received copy, as before. */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array_grow.h"
#include "common/log.h"
#include "server/module_cache.h"

#define PRESERVE_MIN (64u << 10)

static struct kept_image {
    CUlibrary lib;
    void *map;
    size_t len;
} *kept;
static size_t nkept, kept_cap;

/* A read-only mapping of len bytes of the open file fd (closed here); NULL if it cannot be. */
static void *map_file(int fd, size_t len)
{
    struct stat st;
    void *p = MAP_FAILED;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == len)
        p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static bool keep(CUlibrary lib, void *map, size_t len)
{
    if (!rg_array_grow((void **)&kept, &kept_cap, nkept, sizeof(*kept), 64))
        return false;
    kept[nkept++] = (struct kept_image){lib, map, len};
    return true;
}

CUresult srv_library_load(struct srv_session *s, struct srv_call *call, CUlibrary *lib,
                          void *image, size_t len)
{
    CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
    void *preserved = (void *)(uintptr_t)1;
    void *map = len >= PRESERVE_MIN ? map_file(srv_image_file(s, call, image, len), len) : NULL;
    CUresult res;

    if (map == NULL) {
        res = s->drv.cuLibraryLoadData(lib, image, NULL, NULL, 0, NULL, NULL, 0);
        srv_image_release(s, call, image, len, res == CUDA_SUCCESS);
        return res;
    }
    srv_image_release(s, call, image, len, false); /* the cache holds it */
    res = s->drv.cuLibraryLoadData(lib, map, NULL, NULL, 0, &opt, &preserved, 1);
    rg_info("library image of %zu bytes read in place from its cache file", len);
    if (res == CUDA_SUCCESS && !keep(*lib, map, len)) {
        s->drv.cuLibraryUnload(*lib);
        res = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (res != CUDA_SUCCESS)
        munmap(map, len);
    return res;
}

CUresult srv_library_unload(struct srv_session *s, CUlibrary lib)
{
    CUresult res = s->drv.cuLibraryUnload(lib);

    for (size_t i = 0; i < nkept; i++) {
        if (kept[i].lib == lib) {
            munmap(kept[i].map, kept[i].len);
            kept[i] = kept[--nkept];
            break;
        }
    }
    return res;
}
