/* The module cache (server/module_cache.h): images by content hash, per tenant, on disk. */
#include "server/module_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/config.h"
#include "common/array_grow.h"
#include "common/log.h"
#include "common/sha256.h"

#define IMAGE_MAX ((size_t)1 << 30)

static struct {
    bool on;
    char dir[256];
    uint64_t max_bytes;
    struct srv_module_cache_stats stats;
    bool checked; /* the last hit hashed its bytes (false: its mark vouched for them) */
} cache;

/* Make path a directory only we can use: create it 0700, or accept an existing one we own
 * (tightening its mode). False, with a log line, otherwise. */
static bool private_dir(const char *path)
{
    struct stat st;

    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        rg_error("module cache: cannot create %s: %m; cache off", path);
        return false;
    }
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        rg_error("module cache: %s is not a directory owned by uid %d; cache off", path,
                 (int)geteuid());
        return false;
    }
    if ((st.st_mode & 077) != 0 && chmod(path, 0700) != 0) {
        rg_error("module cache: cannot make %s private (chmod 0700): %m; cache off", path);
        return false;
    }
    return true;
}

void srv_module_cache_configure(const struct srv_config *cfg)
{
    const char *runtime = getenv("XDG_RUNTIME_DIR");

    memset(&cache, 0, sizeof(cache));
    if (strcmp(cfg->module_cache, "off") == 0)
        return;
    if (cfg->module_cache[0] != '\0')
        snprintf(cache.dir, sizeof(cache.dir), "%s", cfg->module_cache);
    else if (runtime != NULL && runtime[0] == '/')
        snprintf(cache.dir, sizeof(cache.dir), "%s/rgpu-module-cache", runtime);
    else
        snprintf(cache.dir, sizeof(cache.dir), "/tmp/rgpu-cache-%d", (int)geteuid());
    cache.max_bytes =
        cfg->module_cache_max != 0 ? cfg->module_cache_max : SRV_MODULE_CACHE_DEFAULT_MAX;
    cache.on = private_dir(cache.dir);
}

void srv_module_cache_stats(struct srv_module_cache_stats *stats_p)
{
    *stats_p = cache.stats;
}

/* <dir>/<tenant>: the tenant's name when it is plain, else "h-" and part of its hash; "-" for a
 * server without tenants. Created private on first use. */
static bool tenant_dir(const char *tenant, char *out, size_t cap)
{
    bool plain = tenant[0] != '\0' && tenant[0] != '.';
    char name[80];

    for (const char *c = tenant; *c != '\0' && plain; c++)
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                *c == '_' || *c == '-' || *c == '.';
    if (tenant[0] == '\0') {
        snprintf(name, sizeof(name), "-");
    } else if (plain) {
        snprintf(name, sizeof(name), "t-%s", tenant);
    } else {
        uint8_t h[RG_SHA256_LEN];
        char hex[2 * RG_SHA256_LEN + 1];
        rg_sha256(tenant, strlen(tenant), h);
        rg_sha256_hex(h, hex);
        snprintf(name, sizeof(name), "h-%.32s", hex);
    }
    if ((size_t)snprintf(out, cap, "%s/%s", cache.dir, name) >= cap)
        return false;
    return private_dir(out);
}

static bool image_path(const char *tenant, const uint8_t hash[RG_SHA256_LEN], char *out, size_t cap)
{
    char dir[512], hex[2 * RG_SHA256_LEN + 1];

    if (!tenant_dir(tenant, dir, sizeof(dir)))
        return false;
    rg_sha256_hex(hash, hex);
    return (size_t)snprintf(out, cap, "%s/%s", dir, hex) < cap;
}

static bool read_all(int fd, void *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = read(fd, (uint8_t *)buf + off, len - off);
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* The tenant's cache file with that hash, open read-only, when it is a regular file of len
 * bytes (its path into path); -1 otherwise. */
static int cache_open(const char *tenant, const uint8_t hash[RG_SHA256_LEN], size_t len, char *path,
                      size_t cap)
{
    struct stat st;
    int fd;

    if (!cache.on || !image_path(tenant, hash, path, cap) ||
        (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != len) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A file's mark (extended attribute): its hash and its modification time when it was last
 * checked. A file changed since (any write moves the time) is checked again; where the file
 * system keeps no user attributes, every read is checked. */
#define VERIFIED_XATTR "user.rgpu.verified"
struct verified_mark {
    uint8_t hash[RG_SHA256_LEN];
    int64_t sec, nsec;
};

static bool marked_verified(int fd, const uint8_t hash[RG_SHA256_LEN])
{
    struct verified_mark m;
    struct stat st;

    return fgetxattr(fd, VERIFIED_XATTR, &m, sizeof(m)) == (ssize_t)sizeof(m) &&
           fstat(fd, &st) == 0 && memcmp(m.hash, hash, RG_SHA256_LEN) == 0 &&
           m.sec == st.st_mtim.tv_sec && m.nsec == st.st_mtim.tv_nsec;
}

/* Most recently used (the eviction order), and marked checked as of that time. */
static void mark_used(int fd, const uint8_t hash[RG_SHA256_LEN])
{
    struct verified_mark m;
    struct stat st;

    futimens(fd, NULL);
    if (fstat(fd, &st) != 0)
        return;
    memcpy(m.hash, hash, RG_SHA256_LEN);
    m.sec = st.st_mtim.tv_sec;
    m.nsec = st.st_mtim.tv_nsec;
    (void)fsetxattr(fd, VERIFIED_XATTR, &m, sizeof(m), 0);
}

/* The bytes read or mapped from a cache file against the hash they are filed under, unless the
 * file is marked checked and unchanged since: a file that does not match is removed. A
 * PyTorch start loads hundreds of MiB of images by hash; hashing each again on every hit cost
 * about a fifth of a second. */
static bool cache_verify(int fd, const char *path, const void *image, size_t len,
                         const uint8_t hash[RG_SHA256_LEN])
{
    uint8_t got[RG_SHA256_LEN];

    cache.checked = !marked_verified(fd, hash);
    if (!cache.checked)
        return true;
    rg_sha256(image, len, got);
    if (memcmp(got, hash, RG_SHA256_LEN) == 0)
        return true;
    rg_warn("module cache: %s does not match its hash; removed", path);
    cache.stats.corrupt++;
    unlink(path);
    return false;
}

/* The cached image with that hash and length, checked against the hash; NULL if none. */
static void *cache_read(const char *tenant, const uint8_t hash[RG_SHA256_LEN], size_t len)
{
    char path[768];
    void *image = NULL;
    int fd = cache_open(tenant, hash, len, path, sizeof(path));

    if (fd < 0)
        return NULL;
    if ((image = calloc(1, len + SRV_IMAGE_PAD)) == NULL || !read_all(fd, image, len) ||
        !cache_verify(fd, path, image, len, hash)) {
        free(image);
        image = NULL;
    } else {
        mark_used(fd, hash);
    }
    close(fd);
    return image;
}

/* A by-hash call's image length (args[2]); false when the call is malformed. */
static bool by_hash_len(const struct srv_call *call, size_t *len_p)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    if (call->msg->n_args < 3 || call->hdr->bulk_len != 0 || call->msg->data.len != RG_SHA256_LEN ||
        a->image_len == 0 || a->image_len > IMAGE_MAX)
        return false;
    *len_p = (size_t)a->image_len;
    return true;
}

static CUresult count_lookup(const struct srv_session *s, size_t len, bool hit)
{
    if (!hit) {
        cache.stats.misses++;
        return PROTO_RESULT_NOT_CACHED;
    }
    cache.stats.hits++;
    rg_info("module cache: hit, %zu image bytes not sent (tenant '%s'; %s)", len, s->tenant,
            cache.checked ? "hash checked" : "checked before, unchanged since");
    return CUDA_SUCCESS;
}

CUresult srv_image_take(struct srv_session *s, struct srv_call *call, void **image_p, size_t *len_p)
{
    size_t len = call->hdr->bulk_len > 0 ? call->hdr->bulk_len : call->msg->data.len;
    void *image;

    if (srv_image_by_hash(call)) {
        if (!by_hash_len(call, &len))
            return CUDA_ERROR_INVALID_VALUE;
        image = cache_read(s->tenant, call->msg->data.data, len);
        *image_p = image;
        *len_p = len;
        return count_lookup(s, len, image != NULL);
    }
    if (len == 0)
        return CUDA_ERROR_INVALID_IMAGE;
    if (len > IMAGE_MAX) /* the dispatcher drains the bulk */
        return CUDA_ERROR_INVALID_VALUE;
    if ((image = calloc(1, len + SRV_IMAGE_PAD)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (srv_recv_input(s, call, image, len) != RG_OK) {
        free(image);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    *image_p = image;
    *len_p = len;
    return CUDA_SUCCESS;
}

bool srv_image_by_hash(const struct srv_call *call)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    return call->msg->n_args > 1 && (a->image_flags & PROTO_IMAGE_BY_HASH);
}

CUresult srv_image_map(struct srv_session *s, struct srv_call *call, void **map_p, size_t *len_p)
{
    char path[768];
    void *map = MAP_FAILED;
    size_t len;
    int fd;

    if (!by_hash_len(call, &len))
        return CUDA_ERROR_INVALID_VALUE;
    if ((fd = cache_open(s->tenant, call->msg->data.data, len, path, sizeof(path))) >= 0) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED && !cache_verify(fd, path, map, len, call->msg->data.data)) {
            munmap(map, len);
            map = MAP_FAILED;
        }
        if (map != MAP_FAILED)
            mark_used(fd, call->msg->data.data);
        close(fd);
    }
    *map_p = map == MAP_FAILED ? NULL : map;
    *len_p = len;
    return count_lookup(s, len, map != MAP_FAILED);
}

struct cache_entry {
    struct timespec used;
    uint64_t size;
    char path[400];
};

static int older_first(const void *a, const void *b)
{
    const struct cache_entry *x = a, *y = b;

    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

struct cache_list {
    struct cache_entry *e;
    size_t n, cap;
};

/* Add the images of one tenant directory to the list (every one of them: eviction that saw only
 * some undercounted the total and never reached the rest); returns their total size. */
static uint64_t list_dir(const char *dir, struct cache_list *l)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t total = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        struct stat st;
        if (strlen(e->d_name) != 2 * RG_SHA256_LEN ||
            !rg_array_grow((void **)&l->e, &l->cap, l->n, sizeof(*l->e), 256))
            continue;
        struct cache_entry *c = &l->e[l->n];
        if ((size_t)snprintf(c->path, sizeof(c->path), "%s/%s", dir, e->d_name) >=
                sizeof(c->path) ||
            lstat(c->path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        c->used = st.st_mtim;
        c->size = (uint64_t)st.st_size;
        total += c->size;
        l->n++;
    }
    if (d != NULL)
        closedir(d);
    return total;
}

/* Keep the whole cache (every tenant) within max_bytes: least recently used images go. */
static void evict(void)
{
    struct cache_list l = {NULL, 0, 0};
    DIR *d = opendir(cache.dir);
    struct dirent *e;
    uint64_t total = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char sub[400];
        if (e->d_name[0] == '.' ||
            (size_t)snprintf(sub, sizeof(sub), "%s/%s", cache.dir, e->d_name) >= sizeof(sub))
            continue;
        total += list_dir(sub, &l);
    }
    if (d != NULL)
        closedir(d);
    if (total > cache.max_bytes) {
        qsort(l.e, l.n, sizeof(*l.e), older_first);
        for (size_t i = 0; i < l.n && total > cache.max_bytes; i++) {
            if (unlink(l.e[i].path) == 0) {
                total -= l.e[i].size;
                cache.stats.evicted++;
                rg_info("module cache: evicted %s (%llu bytes)", l.e[i].path,
                        (unsigned long long)l.e[i].size);
            }
        }
    }
    free(l.e);
}

static bool write_all(int fd, const void *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, (const uint8_t *)buf + off, len - off);
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* Write the image under its hash (into hash) in the tenant's directory (temporary name, then
 * rename); false if it could not be. */
static bool cache_store(const char *tenant, const void *image, size_t len,
                        uint8_t hash[RG_SHA256_LEN])
{
    char path[768], tmp[800];
    bool ok;
    int fd;

    if (len > cache.max_bytes)
        return false;
    rg_sha256(image, len, hash);
    if (!image_path(tenant, hash, path, sizeof(path)))
        return false;
    snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) {
        rg_warn("module cache: cannot create %s: %m", tmp);
        return false;
    }
    ok = write_all(fd, image, len);
    if (close(fd) != 0)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        rg_warn("module cache: cannot write %s: %m", path);
        unlink(tmp);
        return false;
    }
    cache.stats.stored++;
    rg_info("module cache: stored %.16s... (%zu bytes, tenant '%s')", strrchr(path, '/') + 1, len,
            tenant);
    evict();
    return true;
}

void srv_image_release(struct srv_session *s, struct srv_call *call, void *image, size_t len,
                       bool loaded)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    uint64_t flags = call->msg->n_args > 1 ? a->image_flags : 0;
    uint8_t hash[RG_SHA256_LEN];

    if (loaded && cache.on && (flags & PROTO_IMAGE_CACHE))
        cache_store(s->tenant, image, len, hash);
    free(image);
}

int srv_image_file(struct srv_session *s, struct srv_call *call, const void *image, size_t len)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    uint64_t flags = call->msg->n_args > 1 ? a->image_flags : 0;
    uint8_t hash[RG_SHA256_LEN];
    char path[768];

    if (!cache.on || srv_image_by_hash(call) || !(flags & PROTO_IMAGE_CACHE) ||
        !cache_store(s->tenant, image, len, hash) ||
        !image_path(s->tenant, hash, path, sizeof(path)))
        return -1;
    return open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
}
