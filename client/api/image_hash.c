/* The SHA-256 of a module image (the module cache's name for it, module.c), remembered on disk
 * for images that lie in a library file: cudart registers the fatbins of every CUDA library a
 * program links (PyTorch: hundreds of MiB) and loads them by hash at each start, so hashing them
 * again in every process cost about 0.2 s per start even at 1.4 GB/s.
 *
 * The memo is keyed by the file's path, device, inode, size and modification time and the
 * image's offset and length in the mapping: a rebuilt or replaced library is another key. It
 * lives in $XDG_CACHE_HOME/rgpu/image-hashes (else ~/.cache/rgpu/image-hashes), one 32-byte
 * file per image; RGPU_IMAGE_HASH_MEMO=0 turns it off. An image in anonymous memory (NVRTC's
 * output, a JIT link) is hashed every time. */
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

#define MEMO_MIN (1u << 20) /* smaller images are hashed: the memo would not pay */

static struct {
    pthread_once_t once;
    char dir[4096];
    bool on;
} memo = {PTHREAD_ONCE_INIT, "", false};

static void memo_setup(void)
{
    const char *off = getenv("RGPU_IMAGE_HASH_MEMO"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;

    if (off != NULL && strcmp(off, "0") == 0)
        return;
    if (xdg != NULL && *xdg != '\0')
        n = snprintf(memo.dir, sizeof(memo.dir), "%s/rgpu/image-hashes", xdg);
    else if (home != NULL && *home != '\0')
        n = snprintf(memo.dir, sizeof(memo.dir), "%s/.cache/rgpu/image-hashes", home);
    else
        return;
    if (n <= 0 || (size_t)n >= sizeof(memo.dir) - 80)
        return;
    for (char *p = memo.dir + 1; *p != '\0'; p++) /* mkdir -p, owner only */
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(memo.dir, 0700);
            *p = '/';
        }
    memo.on = mkdir(memo.dir, 0700) == 0 || errno == EEXIST;
}

/* The inode mapped at addr (from /proc/self/maps); false if none. */
static bool mapped_inode(const void *addr, unsigned long *ino_p)
{
    FILE *f = fopen("/proc/self/maps", "re");
    unsigned long lo, hi, off, ino;
    unsigned maj, min;
    char line[512], perms[8];
    bool found = false;

    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &maj, &min, &ino) ==
                7 &&
            (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            *ino_p = ino;
            found = ino != 0;
        }
    if (f != NULL)
        fclose(f);
    return found;
}

/* The memo's file name for an image inside a mapped library file; false if it is not in one,
 * or if the file at that path is no longer the one mapped (a library replaced while the
 * process runs: the bytes are the old file's). */
static bool memo_path(const void *image, size_t len, char *out, size_t cap)
{
    Dl_info di;
    struct stat st;
    struct rg_sha256 h;
    uint8_t key[RG_SHA256_LEN];
    char hex[2 * RG_SHA256_LEN + 1];
    uint64_t id[6];
    unsigned long ino;

    if (dladdr(image, &di) == 0 || di.dli_fname == NULL || di.dli_fname[0] != '/' ||
        stat(di.dli_fname, &st) != 0 || !mapped_inode(image, &ino) || ino != st.st_ino)
        return false;
    id[0] = (uint64_t)st.st_dev, id[1] = (uint64_t)st.st_ino, id[2] = (uint64_t)st.st_size;
    id[3] = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    id[4] = (uint64_t)((const char *)image - (const char *)di.dli_fbase), id[5] = len;
    rg_sha256_init(&h);
    rg_sha256_update(&h, di.dli_fname, strlen(di.dli_fname));
    rg_sha256_update(&h, id, sizeof(id));
    rg_sha256_final(&h, key);
    rg_sha256_hex(key, hex);
    return (size_t)snprintf(out, cap, "%s/%s", memo.dir, hex) < cap;
}

static bool memo_read(const char *path, uint8_t out[RG_SHA256_LEN])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && read(fd, out, RG_SHA256_LEN) == RG_SHA256_LEN;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* Written under a temporary name and renamed: a reader sees all 32 bytes or no file. */
static void memo_write(const char *path, const uint8_t hash[RG_SHA256_LEN])
{
    char tmp[4300];
    int fd;
    bool ok;

    snprintf(tmp, sizeof(tmp), "%s.%d.%lx", path, (int)getpid(), (unsigned long)pthread_self());
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        return;
    ok = write(fd, hash, RG_SHA256_LEN) == RG_SHA256_LEN;
    close(fd);
    if (!ok || rename(tmp, path) != 0)
        unlink(tmp);
}

void cli_image_hash(const void *image, size_t len, uint8_t out[RG_SHA256_LEN])
{
    char path[4200];
    bool memoable;

    pthread_once(&memo.once, memo_setup);
    memoable = memo.on && len >= MEMO_MIN && memo_path(image, len, path, sizeof(path));
    if (memoable && memo_read(path, out))
        return;
    rg_sha256(image, len, out);
    if (memoable)
        memo_write(path, out);
}
