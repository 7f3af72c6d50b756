/* NVRTC's compile cache: export table da9151d3-3ae6-cc41-a5c0-4f26d533e328.
 *
 * NVRTC (CUDA 13) asks the driver for this table and keeps the results of its two compile steps
 * (NVVM bitcode to PTX, PTX to SASS) in the driver's compute cache, on the host that runs
 * NVRTC, across processes. Through rgpu that host is the client's, so the client serves the
 * table from a cache of its own on this host (docs/frameworks.md). Slots, as observed on the
 * driver 580 with NVRTC 13.0 (docs/frameworks.md says how):
 *   [0] open(handle_out, kind, input, input_len, options, host_tag): a handle for one key
 *   [1] close(handle)
 *   [2] lookup(handle, 0, data_out, u32 len_out, ...): 0 and a buffer on a hit, 500 on a miss
 *   [3] store(handle, 0, data, len): after a miss, the compiled result
 *   [4] never seen called
 *   [5] release(data, ...): frees a buffer [2] returned
 * The key is a SHA-256 of everything the caller gave [0], plus the identity of the calling
 * library (path, size, modification time), so another NVRTC build never reads these results.
 * CUDA_CACHE_DISABLE=1 turns the cache off (every lookup misses, nothing is stored) and
 * CUDA_CACHE_MAXSIZE bounds it, as for the driver's. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/api/api.h"
#include "common/sha256.h"

#define CC_MISS        500        /* what the driver's lookup returns on a miss */
#define CC_INPUT_MAX   (1u << 30) /* a larger input is not cached */
#define CC_DEFAULT_MAX (256ull << 20)
#define CC_MAGIC       "RGPUCC1"

struct cc_handle {
    uint8_t key[RG_SHA256_LEN];
    bool ok; /* the key could be made: lookups and stores may use it */
};

/* The cache's one directory and its size budget, found once. */
static struct {
    pthread_once_t once;
    pthread_mutex_t lock; /* bytes and eviction */
    char dir[4096];
    bool enabled;
    uint64_t max_bytes, bytes;
    bool counted;
} cc = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, "", false, CC_DEFAULT_MAX, 0, false};

static bool mkdirs(char *path)
{
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            *p = '/';
            return false;
        }
        *p = '/';
    }
    return mkdir(path, 0700) == 0 || errno == EEXIST;
}

static void cc_setup(void)
{
    const char *off = getenv("CUDA_CACHE_DISABLE"), *max = getenv("CUDA_CACHE_MAXSIZE");
    const char *cuda = getenv("CUDA_CACHE_PATH"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;

    if (off != NULL && atoi(off) != 0)
        return;
    if (max != NULL && strtoull(max, NULL, 10) > 0)
        cc.max_bytes = strtoull(max, NULL, 10);
    if (cuda != NULL && *cuda != '\0')
        n = snprintf(cc.dir, sizeof(cc.dir), "%s/rgpu", cuda);
    else if (xdg != NULL && *xdg != '\0')
        n = snprintf(cc.dir, sizeof(cc.dir), "%s/rgpu/compute-cache", xdg);
    else if (home != NULL && *home != '\0')
        n = snprintf(cc.dir, sizeof(cc.dir), "%s/.cache/rgpu/compute-cache", home);
    else
        return;
    if (n <= 0 || (size_t)n >= sizeof(cc.dir) - 80 || !mkdirs(cc.dir)) {
        rg_info("compute cache: cannot use %s; NVRTC compiles are not cached", cc.dir);
        return;
    }
    cc.enabled = true;
    rg_debug("compute cache: %s (at most %llu bytes)", cc.dir, (unsigned long long)cc.max_bytes);
}

/* The calling library's identity, part of every key. */
static void hash_caller(struct rg_sha256 *h, const void *caller)
{
    Dl_info di;
    struct stat st;

    if (dladdr(caller, &di) == 0 || di.dli_fname == NULL)
        return;
    rg_sha256_update(h, di.dli_fname, strlen(di.dli_fname) + 1);
    if (stat(di.dli_fname, &st) == 0) {
        uint64_t id[2] = {(uint64_t)st.st_size, (uint64_t)st.st_mtime};

        rg_sha256_update(h, id, sizeof(id));
    }
}

static void hash_string(struct rg_sha256 *h, const char *s)
{
    size_t n = s != NULL ? strnlen(s, 1 << 16) : 0;

    rg_sha256_update(h, &n, sizeof(n));
    if (n > 0)
        rg_sha256_update(h, s, n);
}

static void entry_path(const uint8_t key[RG_SHA256_LEN], char *out, size_t cap)
{
    char hex[2 * RG_SHA256_LEN + 1];

    rg_sha256_hex(key, hex);
    snprintf(out, cap, "%s/%s", cc.dir, hex);
}

/* [0] */
static int cc_open(void **handle_p, uint64_t kind, const void *input, uint64_t input_len,
                   const char *options, const char *host_tag)
{
    void *caller = __builtin_return_address(0);
    struct cc_handle *c = calloc(1, sizeof(*c));
    struct rg_sha256 h;
    uint64_t head[2] = {(uint32_t)kind, input_len};

    if (handle_p == NULL || c == NULL) {
        free(c);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_once(&cc.once, cc_setup);
    c->ok = cc.enabled && input != NULL && input_len > 0 && input_len <= CC_INPUT_MAX;
    if (c->ok) {
        rg_sha256_init(&h);
        rg_sha256_update(&h, CC_MAGIC, sizeof(CC_MAGIC));
        rg_sha256_update(&h, head, sizeof(head));
        rg_sha256_update(&h, input, input_len);
        hash_string(&h, options);
        hash_string(&h, host_tag);
        hash_caller(&h, caller);
        rg_sha256_final(&h, c->key);
    }
    *handle_p = c;
    return CUDA_SUCCESS;
}

/* [1] */
static int cc_close(void *handle)
{
    free(handle);
    return CUDA_SUCCESS;
}

/* An entry: the magic, the key, the length, then the bytes. */
struct cc_header {
    char magic[8];
    uint8_t key[RG_SHA256_LEN];
    uint64_t len;
};

static void *read_entry(const struct cc_handle *c, uint32_t *len_p)
{
    char path[4200];
    struct cc_header hd;
    void *buf = NULL;
    int fd;

    entry_path(c->key, path, sizeof(path));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return NULL;
    if (read(fd, &hd, sizeof(hd)) == (ssize_t)sizeof(hd) && memcmp(hd.magic, CC_MAGIC, 8) == 0 &&
        memcmp(hd.key, c->key, sizeof(hd.key)) == 0 && hd.len > 0 && hd.len <= CC_INPUT_MAX &&
        (buf = malloc(hd.len)) != NULL) {
        if (read(fd, buf, hd.len) != (ssize_t)hd.len) {
            free(buf);
            buf = NULL;
        } else {
            *len_p = (uint32_t)hd.len;
            futimens(fd, NULL); /* recently used: evicted last */
        }
    }
    close(fd);
    return buf;
}

/* [2] */
static int cc_lookup(void *handle, uint64_t unused, void **data_p, uint32_t *len_p)
{
    struct cc_handle *c = handle;
    void *buf;
    uint32_t len = 0;

    (void)unused;
    if (c == NULL || data_p == NULL || len_p == NULL || !c->ok)
        return CC_MISS;
    buf = read_entry(c, &len);
    cli_stats_note_compute_cache(buf != NULL);
    if (buf == NULL)
        return CC_MISS;
    *data_p = buf;
    *len_p = len;
    return CUDA_SUCCESS;
}

/* [5] */
static int cc_release(void *data)
{
    free(data);
    return CUDA_SUCCESS;
}

struct cc_file {
    time_t mtime;
    uint64_t size;
    char name[2 * RG_SHA256_LEN + 1];
};

static int by_mtime(const void *a, const void *b)
{
    const struct cc_file *x = a, *y = b;

    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

static void evict(void);

/* [3]: written to a temporary name, then renamed: a reader sees a whole entry or none. */
static int cc_store(void *handle, uint64_t unused, const void *data, uint64_t len)
{
    struct cc_handle *c = handle;
    struct cc_header hd = {CC_MAGIC, {0}, len};
    char path[4200], tmp[4300];
    int fd;
    bool ok;

    (void)unused;
    if (c == NULL || !c->ok || data == NULL || len == 0 || len > CC_INPUT_MAX)
        return CUDA_SUCCESS;
    memcpy(hd.key, c->key, sizeof(hd.key));
    entry_path(c->key, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s/.tmp.%d.%lx", cc.dir, (int)getpid(),
             (unsigned long)pthread_self());
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        return CUDA_SUCCESS;
    ok = write(fd, &hd, sizeof(hd)) == (ssize_t)sizeof(hd) && write(fd, data, len) == (ssize_t)len;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&cc.lock);
    cc.bytes += sizeof(hd) + len;
    if (!cc.counted || cc.bytes > cc.max_bytes)
        evict();
    pthread_mutex_unlock(&cc.lock);
    return CUDA_SUCCESS;
}

/* Under cc.lock: count the directory's entries (once) and, past the budget, remove the least
 * recently used until it holds at most 3/4 of it. */
static void evict(void)
{
    DIR *d = opendir(cc.dir);
    struct dirent *e;
    struct cc_file *f = NULL, *grown;
    size_t n = 0, cap = 0;
    uint64_t total = 0;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        struct stat s;

        if (strlen(e->d_name) != 2 * RG_SHA256_LEN || fstatat(dirfd(d), e->d_name, &s, 0) != 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            if ((grown = realloc(f, cap * sizeof(*f))) == NULL)
                break;
            f = grown;
        }
        f[n].mtime = s.st_mtime;
        f[n].size = (uint64_t)s.st_size;
        memcpy(f[n++].name, e->d_name, sizeof(f[0].name));
        total += (uint64_t)s.st_size;
    }
    if (total > cc.max_bytes) {
        qsort(f, n, sizeof(*f), by_mtime);
        for (size_t i = 0; i < n && total > cc.max_bytes / 4 * 3; i++)
            if (unlinkat(dirfd(d), f[i].name, 0) == 0)
                total -= f[i].size;
    }
    closedir(d);
    free(f);
    cc.bytes = total;
    cc.counted = true;
}

static int cc_unknown(void)
{
    return cli_unsupported("export table da9151d3 (compute cache), slot 4");
}

const void *const cli_compute_cache_table[7] = {
    (void *)(uintptr_t)(7 * sizeof(void *)),
    (void *)cc_open,
    (void *)cc_close,
    (void *)cc_lookup,
    (void *)cc_store,
    (void *)cc_unknown,
    (void *)cc_release,
};
