/* The fake driver's registered host memory (cuMemHostRegister): the ranges a process registered
 * become valid "device" addresses, as under unified addressing a registered buffer's device
 * pointer is its host address, so memsets, copies and the test kernels reach them. Registering
 * [p, p + n) needs the pages to exist (the driver pins them: unmapped memory fails with
 * INVALID_VALUE, overlap with a registered range with HOST_MEMORY_ALREADY_REGISTERED). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "fakecuda.h"

#define MAX_REGISTERED 1024

static struct {
    uintptr_t p;
    size_t n;
} regs[MAX_REGISTERED];
static size_t nregs;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static bool mapped(uintptr_t p, size_t n)
{
    uintptr_t a = p & ~(uintptr_t)(FK_PAGE - 1);
    unsigned char vec[64];

    for (; a < p + n; a += FK_PAGE)
        if (mincore((void *)a, FK_PAGE, vec) != 0)
            return false;
    return true;
}

CUresult cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    uintptr_t a = (uintptr_t)p;
    CUresult res = CUDA_SUCCESS;

    if (p == NULL || n == 0 || a + n < a || !mapped(a, n))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nregs && res == CUDA_SUCCESS; i++)
        if (a < regs[i].p + regs[i].n && regs[i].p < a + n)
            res = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (res == CUDA_SUCCESS && nregs == MAX_REGISTERED)
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS)
        regs[nregs].p = a, regs[nregs++].n = n;
    pthread_mutex_unlock(&reg_lock);
    return res;
}

CUresult cuMemHostUnregister(void *p)
{
    CUresult res = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;

    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nregs; i++)
        if (regs[i].p == (uintptr_t)p) {
            regs[i] = regs[--nregs];
            res = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return res;
}

/* Unified addressing: registered memory's device pointer is its address. */
CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags)
{
    if (d == NULL || flags != 0 || !fk_hostreg_valid(p, 1))
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

bool fk_hostreg_valid(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;

    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nregs && !ok; i++)
        ok = a >= regs[i].p && a - regs[i].p < regs[i].n && len <= regs[i].n - (a - regs[i].p);
    pthread_mutex_unlock(&reg_lock);
    return ok;
}
