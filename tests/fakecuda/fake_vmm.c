/* The fake driver's virtual memory management and memory pools. A reservation is an
 * inaccessible mmap; physical memory (cuMemCreate) is a memfd; cuMemMap maps the memfd over the
 * reservation still inaccessible, and cuMemSetAccess opens it, so a kernel or copy that touches
 * memory before cuMemSetAccess fails as on a GPU. Pools hand out ordinary fake allocations. */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"

#define GRAN    (2u << 20)
#define MAX_VMM 1024

struct vmm_phys {
    int fd;
    size_t size;
    bool live;
};
struct vmm_map {
    uintptr_t va;
    size_t size;
    int phys;
    bool access;
};
struct vmm_resv {
    uintptr_t va;
    size_t size;
};

static pthread_mutex_t vlock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_phys phys[MAX_VMM];
static struct vmm_map maps[MAX_VMM];
static struct vmm_resv resv[MAX_VMM];

bool fk_vmm_valid(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;

    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM && !ok; i++)
        ok = maps[i].size && maps[i].access && a >= maps[i].va &&
             a + len <= maps[i].va + maps[i].size;
    pthread_mutex_unlock(&vlock);
    return ok;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags o)
{
    if (!g || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *g = GRAN;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags)
{
    void *p;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

    if (!ptr || size == 0 || size % GRAN)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p = fk_va_map(size, PROT_NONE, -1)) == NULL) /* FAKECUDA_VA_BASE unset: anywhere */
        p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (resv[i].size == 0) {
            resv[i] = (struct vmm_resv){(uintptr_t)p, size};
            *ptr = (CUdeviceptr)p;
            res = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&vlock);
    if (res != CUDA_SUCCESS)
        munmap(p, size);
    return res;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (resv[i].size && resv[i].va == ptr && resv[i].size == size) {
            munmap((void *)resv[i].va, size);
            resv[i].size = 0;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vlock);
    return res;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    size_t g;
    CUresult res = cuMemGetAllocationGranularity(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    int fd;

    if (res != CUDA_SUCCESS)
        return res;
    if (!h || size == 0 || size % g)
        return CUDA_ERROR_INVALID_VALUE;
    if ((fd = memfd_create("fakecuda-vmm", 0)) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (!phys[i].live) {
            phys[i] = (struct vmm_phys){fd, size, true};
            *h = (CUmemGenericAllocationHandle)(i + 1) << 8;
            res = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&vlock);
    if (res != CUDA_SUCCESS)
        close(fd);
    return res;
}

static int phys_index(CUmemGenericAllocationHandle h)
{
    unsigned long long i = (h >> 8) - 1;
    return (h & 0xff) == 0 && i < MAX_VMM && phys[i].live ? (int)i : -1;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    int i;

    pthread_mutex_lock(&vlock);
    i = phys_index(h);
    if (i >= 0) {
        close(phys[i].fd);
        phys[i].live = false;
    }
    pthread_mutex_unlock(&vlock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static bool reserved(uintptr_t va, size_t size)
{
    for (int i = 0; i < MAX_VMM; i++)
        if (resv[i].size && va >= resv[i].va && va + size <= resv[i].va + resv[i].size)
            return true;
    return false;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    int p;

    pthread_mutex_lock(&vlock);
    p = phys_index(h);
    if (p >= 0 && reserved(ptr, size) && offset + size <= phys[p].size && size % GRAN == 0 &&
        mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, phys[p].fd, (off_t)offset) !=
            MAP_FAILED)
        for (int i = 0; i < MAX_VMM; i++)
            if (maps[i].size == 0) {
                maps[i] = (struct vmm_map){ptr, size, p, false};
                res = CUDA_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&vlock);
    return res;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (maps[i].size && maps[i].va == ptr && maps[i].size == size) {
            mmap((void *)ptr, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            maps[i].size = 0;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vlock);
    return res;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *d, size_t n)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (!d || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < n; k++)
        if (d[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d[k].location.id != 0)
            return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (maps[i].size && maps[i].va >= ptr && maps[i].va + maps[i].size <= ptr + size) {
            bool rw = d[n - 1].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            mprotect((void *)maps[i].va, maps[i].size, rw ? PROT_READ | PROT_WRITE : PROT_READ);
            maps[i].access = d[n - 1].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vlock);
    return res;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (!flags || !loc)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vlock);
    for (int i = 0; i < MAX_VMM; i++)
        if (maps[i].size && ptr >= maps[i].va && ptr < maps[i].va + maps[i].size) {
            *flags =
                maps[i].access ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vlock);
    return res;
}

/* ---- pools: attributes are remembered; allocations are ordinary fake allocations ---- */

#define FK_POOL_MAGIC 0x504f4f4cu
struct fk_pool {
    uint32_t magic;
    cuuint64_t attrs[16];
};
static struct fk_pool default_pool = {FK_POOL_MAGIC, {0}};
static struct fk_pool *current_pool = &default_pool;

static struct fk_pool *pool_check(CUmemoryPool p)
{
    struct fk_pool *fp = (struct fk_pool *)p;
    return fp && fp->magic == FK_POOL_MAGIC ? fp : NULL;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice dev)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *p = (CUmemoryPool)&default_pool;
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool p)
{
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_check(p))
        return CUDA_ERROR_INVALID_VALUE;
    current_pool = (struct fk_pool *)p;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props)
{
    struct fk_pool *fp;

    if (!p || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!(fp = calloc(1, sizeof(*fp))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    fp->magic = FK_POOL_MAGIC;
    *p = (CUmemoryPool)fp;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool p)
{
    struct fk_pool *fp = pool_check(p);

    if (!fp || fp == &default_pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (current_pool == fp)
        current_pool = &default_pool;
    fp->magic = 0;
    free(fp);
    return CUDA_SUCCESS;
}

static bool int_attr(CUmemPool_attribute a)
{
    return a >= 1 && a <= 3;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    struct fk_pool *fp = pool_check(p);

    if (!fp || !v || a < 1 || a > 8 || (a >= 5 && a != 6 && a != 8))
        return CUDA_ERROR_INVALID_VALUE;
    fp->attrs[a] = int_attr(a) ? (cuuint64_t) * (int *)v : *(cuuint64_t *)v;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    struct fk_pool *fp = pool_check(p);

    if (!fp || !v || a < 1 || a > 8)
        return CUDA_ERROR_INVALID_VALUE;
    if (int_attr(a))
        *(int *)v = (int)fp->attrs[a];
    else
        *(cuuint64_t *)v = fp->attrs[a];
    return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep)
{
    return pool_check(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolSetAccess(CUmemoryPool p, const CUmemAccessDesc *d, size_t n)
{
    if (!pool_check(p) || !d || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return d[0].location.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    struct fk_pool *fp = pool_check(p);
    CUresult res;

    if (!fp)
        return CUDA_ERROR_INVALID_VALUE;
    res = cuMemAlloc(d, n);
    if (res == CUDA_SUCCESS)
        fp->attrs[CU_MEMPOOL_ATTR_USED_MEM_CURRENT] += n;
    return res;
}
