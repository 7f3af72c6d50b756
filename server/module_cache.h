/* The module cache: images that MODULE_LOAD / LIBRARY_LOAD brought, kept on disk by content
 * hash (SHA-256) so that a later load, by this or another process of the same tenant, names the
 * hash instead of sending the bytes again (proto/ops.h: PROTO_IMAGE_BY_HASH).
 *
 * Layout: <dir>/<tenant>/<64 hex digits>, directories mode 0700 and owned by the server's user,
 * files 0600 written to a temporary name and renamed into place, so every worker of the server
 * shares the cache and never sees a partial file. A tenant looks only in its own subdirectory,
 * so it can never load another tenant's image by guessing a hash. A file's hash is checked each
 * time it is used; a file that does not match is removed. The total size of the cache is bounded
 * (module_cache_max); the least recently used images go first. */
#ifndef RGPU_SERVER_MODULE_CACHE_H
#define RGPU_SERVER_MODULE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"
#include "server/session.h"

#define SRV_MODULE_CACHE_DEFAULT_MAX (4ull << 30)

/* Set the cache up from cfg->module_cache ("" = the default directory under $XDG_RUNTIME_DIR,
 * or /tmp/rgpu-cache-<uid>; "off" = no cache) and cfg->module_cache_max. Logs and disables the
 * cache when the directory cannot be made private. */
void srv_module_cache_configure(const struct srv_config *cfg);

/* Zero bytes after a heap copy of an image: the driver takes an image without its length and
 * reads a header to tell its kind (an ELF64 header is 64 bytes, a fatbin's 16), so an image
 * shorter than that must not send it past the copy. */
#define SRV_IMAGE_PAD 64

/* The image of a MODULE_LOAD / LIBRARY_LOAD call as a heap copy with SRV_IMAGE_PAD zero bytes
 * (a NUL for PTX among them) after it: the bytes
 * the call carries, or the tenant's cached image with the hash it names (PROTO_RESULT_NOT_CACHED
 * when there is none). */
CUresult srv_image_take(struct srv_session *s, struct srv_call *call, void **image_p,
                        size_t *len_p);
/* Whether the call names its image by hash. srv_image_map: a by-hash call's cached image as a
 * read-only mapping of its cache file, checked against the hash over the mapped bytes (*map_p,
 * *len_p; munmap it when done), PROTO_RESULT_NOT_CACHED when there is none; no heap copy. */
bool srv_image_by_hash(const struct srv_call *call);
CUresult srv_image_map(struct srv_session *s, struct srv_call *call, void **map_p, size_t *len_p);
/* After the driver took (loaded) or refused the image: keep it in the cache when the call asked
 * for that and it loaded, then free it. */
void srv_image_release(struct srv_session *s, struct srv_call *call, void *image, size_t len,
                       bool loaded);
/* The image a call sent with PROTO_IMAGE_CACHE, stored in the cache now and its file opened
 * read-only; -1 when it is not (cache off, not asked, not stored). The caller then frees the
 * image with srv_image_release(..., false): it is already stored. */
int srv_image_file(struct srv_session *s, struct srv_call *call, const void *image, size_t len);
/* Library loads (server/library_image.c): the driver reads the image in place from a read-only
 * mapping of its cache file (CU_LIBRARY_BINARY_IS_PRESERVED), as it reads cudart's fatbins in
 * place natively, instead of keeping a copy in the worker's memory; the mapping goes with the
 * library. srv_library_load answers like cuLibraryLoadData; srv_library_unload unloads. */
CUresult srv_library_load(struct srv_session *s, struct srv_call *call, CUlibrary *lib);
CUresult srv_library_unload(struct srv_session *s, CUlibrary lib);

/* What this process's cache did (for logs and tests). */
struct srv_module_cache_stats {
    uint64_t hits, misses, stored, evicted, corrupt;
};
void srv_module_cache_stats(struct srv_module_cache_stats *stats_p);

#endif
