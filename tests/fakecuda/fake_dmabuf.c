/* The fake driver's dmabuf export of device memory (cuMemGetHandleForAddressRange with
 * CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD), for GPUDirect RDMA through tests/fakeverbs.
 *
 * Fake device memory is host memory, so the "dmabuf" is a memfd that aliases the allocation:
 * at the first export of a range its current bytes are copied into a new memfd, which is then
 * mapped MAP_SHARED | MAP_FIXED over the range, so writes through the allocation and through
 * any other mapping of the fd (the fake NIC's) are seen by both. Each export returns a new fd
 * of that memfd (the caller closes it). When the allocation is freed (fk_dmabuf_forget) the
 * range gets private anonymous pages back, so a mapping made from an old fd no longer reaches
 * whatever is allocated there next: a stale registration shows as lost data.
 *
 * Limits of the fake: a range must start at the start of an allocation (which the fake makes
 * page aligned) and lie inside it; a second export of an aliased allocation must start at the
 * same address. FAKECUDA_DMABUF=0: the device reports no dmabuf support
 * (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0) and exports fail with CUDA_ERROR_NOT_SUPPORTED. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"

#define MAX_ALIASES 1024

struct alias {
    uintptr_t base;
    size_t len; /* page multiple */
    int memfd;  /* -1: free slot */
};

static pthread_mutex_t dlock = PTHREAD_MUTEX_INITIALIZER;
static struct alias aliases[MAX_ALIASES];
static int naliases;

static int fk_dmabuf_supported(void)
{
    const char *e = getenv("FAKECUDA_DMABUF");
    return e == NULL || strcmp(e, "0") != 0;
}

/* Like a GPU that does not order remote writes itself but can flush them, so the server's
 * flush after a direct HtoD runs here (FAKECUDA_TRACE=1 shows it). */
int fk_dmabuf_attribute(CUdevice_attribute a)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
        return fk_dmabuf_supported();
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
        return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
        return CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
        return CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE;
    default:
        return 0;
    }
}

/* A new memfd holding [base, base + len)'s bytes, mapped over it; -1 on failure. */
static int alias_make(uintptr_t base, size_t len)
{
    int fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
    void *tmp;

    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)len) != 0 ||
        (tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        close(fd);
        return -1;
    }
    memcpy(tmp, (void *)base, len);
    munmap(tmp, len);
    if (mmap((void *)base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED) {
        close(fd); /* MAP_FIXED failed before unmapping anything: the range is as it was */
        return -1;
    }
    return fd;
}

/* The alias of the allocation at base, made now if there is none (dlock held). */
static CUresult alias_of(uintptr_t base, size_t alloc_len, int *memfd_p)
{
    for (int i = 0; i < naliases; i++)
        if (aliases[i].memfd >= 0 && aliases[i].base == base) {
            *memfd_p = aliases[i].memfd;
            return CUDA_SUCCESS;
        }
    if (naliases == MAX_ALIASES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = alias_make(base, alloc_len);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    aliases[naliases++] = (struct alias){.base = base, .len = alloc_len, .memfd = fd};
    *memfd_p = fd;
    return CUDA_SUCCESS;
}

CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                       CUmemRangeHandleType type, unsigned long long flags)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), alloc_len;
    void *base;
    int memfd = -1, fd;
    CUresult res;

    if (handle == NULL || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags != 0 || size == 0 ||
        dptr % page != 0 || size % page != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dmabuf_supported())
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!fk_alloc_find((const void *)(uintptr_t)dptr, &base, &alloc_len) ||
        (uintptr_t)base != dptr || size > alloc_len)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&dlock);
    res = alias_of(dptr, alloc_len, &memfd);
    fd = res == CUDA_SUCCESS ? fcntl(memfd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&dlock);
    if (res == CUDA_SUCCESS && fd < 0)
        res = CUDA_ERROR_OPERATING_SYSTEM;
    if (res == CUDA_SUCCESS)
        *(int *)handle = fd;
    return res;
}

int fk_alias_memfd(void *base, size_t len)
{
    int memfd = -1;

    pthread_mutex_lock(&dlock);
    if (alias_of((uintptr_t)base, len, &memfd) != CUDA_SUCCESS)
        memfd = -1;
    pthread_mutex_unlock(&dlock);
    return memfd;
}

void fk_dmabuf_forget(const void *p)
{
    pthread_mutex_lock(&dlock);
    for (int i = 0; i < naliases; i++) {
        if (aliases[i].base != (uintptr_t)p)
            continue;
        /* Private pages again before the memory goes back to the heap. */
        if (mmap((void *)aliases[i].base, aliases[i].len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            abort(); /* the heap would keep a shared page: a test double must not hide that */
        close(aliases[i].memfd);
        aliases[i] = aliases[--naliases];
        break;
    }
    pthread_mutex_unlock(&dlock);
}

/* The fake's "NIC" writes land in host memory that the fake's kernels read directly: there is
 * nothing to flush. Arguments are checked as the driver does; FAKECUDA_TRACE=1 shows calls. */
CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                    CUflushGPUDirectRDMAWritesScope scope)
{
    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
        (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
         scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    if (getenv("FAKECUDA_TRACE") != NULL)
        fprintf(stderr, "fakecuda: cuFlushGPUDirectRDMAWrites\n");
    return CUDA_SUCCESS;
}

/* ---- address reuse --------------------------------------------------------------------- */

static void *parked;
static size_t parked_len;

void fk_pages_free(void *p, size_t len)
{
    void *old = p;

    if (len >= (1u << 20)) {
        pthread_mutex_lock(&dlock);
        old = parked;
        parked = p;
        parked_len = len;
        pthread_mutex_unlock(&dlock);
    }
    free(old);
}

void *fk_pages_reuse(size_t len)
{
    void *p = NULL;

    pthread_mutex_lock(&dlock);
    if (parked != NULL && parked_len == len) {
        p = parked;
        parked = NULL;
    }
    pthread_mutex_unlock(&dlock);
    return p;
}
