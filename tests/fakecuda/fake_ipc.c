/* The fake driver's CUDA IPC. Workers of one gpu-server are separate processes, so exported
 * memory must really be shared between processes: an export aliases the whole allocation with
 * a memfd (fake_dmabuf.c's alias, mapped MAP_SHARED | MAP_FIXED over it) and the handle names
 * {magic, exporting pid, that fd, its inode, length}; the opener opens /proc/<pid>/fd/<fd>
 * (same user; a test double's shortcut, not how the driver does it), checks that it is still
 * that inode, and maps it. An open in the exporting process, a handle with a bad magic, a
 * process or fd that is gone, or an fd that is now another file fail with INVALID_VALUE (same
 * process: INVALID_CONTEXT), as a bad handle does on the driver. Events: the handle names the
 * exporter's event, and an open makes a new interprocess event (the fake runs work at once, so
 * there is nothing to wait for). cuMemGetAddressRange answers for allocations and for opened
 * memory. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"

#define MEM_MAGIC   0x4d43504bu /* "KPCM" */
#define EVENT_MAGIC 0x4543504bu /* "KPCE" */
#define MAX_OPEN    1024

struct mem_handle {
    uint32_t magic;
    int32_t pid, fd;
    uint32_t zero;
    uint64_t ino, len;
};

struct event_handle {
    uint32_t magic;
    int32_t pid;
    uint64_t event; /* the exporter's CUevent, for the record */
};

_Static_assert(sizeof(struct mem_handle) <= CU_IPC_HANDLE_SIZE, "handle size");

static pthread_mutex_t ilock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t len;
} opened[MAX_OPEN];
static int nopened;

bool fk_ipc_valid(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;

    pthread_mutex_lock(&ilock);
    for (int i = 0; i < nopened && !ok; i++)
        ok = a >= (uintptr_t)opened[i].p && a + len <= (uintptr_t)opened[i].p + opened[i].len;
    pthread_mutex_unlock(&ilock);
    return ok;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    struct mem_handle h = {.magic = MEM_MAGIC, .pid = (int32_t)getpid()};
    struct stat st;
    void *base;
    size_t len;

    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_alloc_find((const void *)(uintptr_t)dptr, &base, &len))
        return CUDA_ERROR_INVALID_VALUE;
    if ((h.fd = fk_alias_memfd(base, len)) < 0 || fstat(h.fd, &st) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    h.ino = (uint64_t)st.st_ino;
    h.len = len;
    memset(handle, 0, sizeof(*handle));
    memcpy(handle, &h, sizeof(h));
    return CUDA_SUCCESS;
}

/* The exporter's memfd, reopened: -1 unless it is still the file the handle names. */
static int reopen(const struct mem_handle *h)
{
    char path[64];
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
        return -1;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != h->ino || (uint64_t)st.st_size < h->len) {
        close(fd);
        return -1;
    }
    return fd;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    struct mem_handle h;
    void *p = MAP_FAILED;
    int fd;

    memcpy(&h, &handle, sizeof(h));
    if (dptr == NULL || h.magic != MEM_MAGIC || h.len == 0 ||
        (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the driver opens only other processes' handles */
    if ((fd = reopen(&h)) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p = fk_va_map(h.len, PROT_READ | PROT_WRITE, fd)) == NULL) /* FAKECUDA_VA_BASE unset */
        p = mmap(NULL, h.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ilock);
    if (nopened == MAX_OPEN) {
        pthread_mutex_unlock(&ilock);
        munmap(p, h.len);
        return CUDA_ERROR_TOO_MANY_PEERS;
    }
    opened[nopened].p = p;
    opened[nopened++].len = h.len;
    pthread_mutex_unlock(&ilock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    pthread_mutex_lock(&ilock);
    for (int i = 0; i < nopened; i++) {
        if ((uintptr_t)opened[i].p != (uintptr_t)dptr)
            continue;
        munmap(opened[i].p, opened[i].len);
        opened[i] = opened[--nopened];
        res = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&ilock);
    return res;
}

CUresult cuMemGetAddressRange(CUdeviceptr *base_p, size_t *size_p, CUdeviceptr dptr)
{
    uintptr_t a = (uintptr_t)dptr, base = 0;
    size_t len = 0;
    void *b;

    pthread_mutex_lock(&ilock);
    for (int i = 0; i < nopened && base == 0; i++)
        if (a >= (uintptr_t)opened[i].p && a < (uintptr_t)opened[i].p + opened[i].len)
            base = (uintptr_t)opened[i].p, len = opened[i].len;
    pthread_mutex_unlock(&ilock);
    if (base == 0 && fk_alloc_find((const void *)a, &b, &len))
        base = (uintptr_t)b;
    if (base == 0)
        return CUDA_ERROR_NOT_FOUND;
    if (base_p != NULL)
        *base_p = (CUdeviceptr)base;
    if (size_p != NULL)
        *size_p = len;
    return CUDA_SUCCESS;
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
    struct event_handle h = {
        .magic = EVENT_MAGIC, .pid = (int32_t)getpid(), .event = (uint64_t)(uintptr_t)event};
    unsigned flags = fk_event_flags(event);

    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags == ~0u)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!(flags & CU_EVENT_INTERPROCESS) || !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    memset(handle, 0, sizeof(*handle));
    memcpy(handle, &h, sizeof(h));
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
    struct event_handle h;

    memcpy(&h, &handle, sizeof(h));
    if (event == NULL || h.magic != EVENT_MAGIC || h.pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    return cuEventCreate(event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}
