/* Library images the driver reads in place. Natively cudart registers each fatbin with
 * cuLibraryLoadData and CU_LIBRARY_BINARY_IS_PRESERVED: the driver reads it where the program's
 * mapping of its library file holds it. Here an image the module cache holds (64 KiB and up)
 * is loaded from a read-only mapping of its cache file with that option, and the mapping is
 * kept until the library is unloaded; cache files are never rewritten in place (renamed over,
 * or unlinked), so the mapping stays as it was loaded. An image named by hash is checked
 * against the hash over the very bytes mapped, with no heap copy. The driver gets a heap copy
 * without a cache file, or when it could read past the mapping (PTX without a NUL, ending on a
 * page boundary). (What makes a PyTorch worker large is the driver's state for the libraries
 * loaded, 4.5 to 7 times their images on the H100, as in a native process:
 * bench/results/2026-11-23-s6-h100-tcp.md.) */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array_grow.h"
#include "common/log.h"
#include "server/module_cache.h"

#define PRESERVE_MIN (64u << 10)

/* The component's state: the mappings the session's libraries are read from. */
struct library_images_state {
    struct kept_image {
        CUlibrary lib;
        void *map;
        size_t len;
    } * kept;
    size_t n, cap;
};

static struct library_images_state *images_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_LIBRARY_IMAGES);
}

/* After the modules component unloaded the libraries (which unmapped theirs): what is left. */
static void library_images_teardown(struct srv_session *s, void *state)
{
    struct library_images_state *k = state;

    for (size_t i = 0; i < k->n; i++)
        munmap(k->kept[i].map, k->kept[i].len);
    free(k->kept);
    k->kept = NULL;
    k->n = k->cap = 0;
}

const struct srv_component srv_library_images_component = {.name = "library_images",
                                                           .state_size =
                                                               sizeof(struct library_images_state),
                                                           .teardown = library_images_teardown};

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

static bool keep(struct srv_session *s, CUlibrary lib, void *map, size_t len)
{
    struct library_images_state *k = images_of(s);

    if (!rg_array_grow((void **)&k->kept, &k->cap, k->n, sizeof(*k->kept), 64))
        return false;
    k->kept[k->n++] = (struct kept_image){lib, map, len};
    return true;
}

/* Whether the driver may read the image where it is mapped: one it reads up to a NUL (PTX)
 * must hold one, or end inside its last page, whose tail the mapping fills with zeros. */
static bool mappable(const void *map, size_t len)
{
    return len % (size_t)sysconf(_SC_PAGESIZE) != 0 || ((const char *)map)[len - 1] == '\0';
}

/* Load from a read-only mapping of the image's cache file, read in place; the mapping stays
 * with the library (and goes now if the load fails). */
static CUresult load_mapped(struct srv_session *s, CUlibrary *lib, void *map, size_t len)
{
    CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
    void *preserved = (void *)(uintptr_t)1;
    CUresult res = s->drv.cuLibraryLoadData(lib, map, NULL, NULL, 0, &opt, &preserved, 1);

    if (res == CUDA_SUCCESS && !keep(s, *lib, map, len)) {
        s->drv.cuLibraryUnload(*lib);
        res = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (res == CUDA_SUCCESS)
        rg_info("library image of %zu bytes read in place from its cache file", len);
    else
        munmap(map, len);
    return res;
}

/* A heap copy of the image (received, or copied from a mapping the driver may not read in
 * place): from the cache file it is stored in when the call asks for that, else the copy. */
static CUresult load_copy(struct srv_session *s, struct srv_call *call, CUlibrary *lib, void *image,
                          size_t len)
{
    int fd = len >= PRESERVE_MIN ? srv_image_file(s, call, image, len) : -1;
    void *map = map_file(fd, len);
    CUresult res;

    if (map != NULL && !mappable(map, len)) {
        munmap(map, len);
        map = NULL;
    }
    if (map == NULL) {
        res = s->drv.cuLibraryLoadData(lib, image, NULL, NULL, 0, NULL, NULL, 0);
        srv_image_release(s, call, image, len, fd < 0 && res == CUDA_SUCCESS);
        return res;
    }
    srv_image_release(s, call, image, len, false); /* the cache holds it */
    return load_mapped(s, lib, map, len);
}

CUresult srv_library_load(struct srv_session *s, struct srv_call *call, CUlibrary *lib)
{
    void *image, *map;
    size_t len;
    CUresult res;

    if (!srv_image_by_hash(call)) {
        if ((res = srv_image_take(s, call, &image, &len)) != CUDA_SUCCESS)
            return res;
        return load_copy(s, call, lib, image, len);
    }
    /* By hash: the cache file is mapped and checked over the mapped bytes, which the driver
     * then reads; no heap copy, unless the driver could read past the mapping. */
    if ((res = srv_image_map(s, call, &map, &len)) != CUDA_SUCCESS)
        return res;
    if (mappable(map, len))
        return load_mapped(s, lib, map, len);
    image = calloc(1, len + SRV_IMAGE_PAD);
    if (image != NULL)
        memcpy(image, map, len);
    munmap(map, len);
    return image != NULL ? load_copy(s, call, lib, image, len) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult srv_library_unload(struct srv_session *s, CUlibrary lib)
{
    struct library_images_state *k = images_of(s);
    CUresult res = s->drv.cuLibraryUnload(lib);

    for (size_t i = 0; i < k->n; i++) {
        if (k->kept[i].lib == lib) {
            munmap(k->kept[i].map, k->kept[i].len);
            k->kept[i] = k->kept[--k->n];
            break;
        }
    }
    return res;
}
