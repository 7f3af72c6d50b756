/* rgpu-dmabuf-probe: on a GPU host, what gpu-server's GPUDirect RDMA check
 * (server/handlers_rdma_copy.c) would find, without a NIC: the GPU's dmabuf and GPUDirect
 * attributes, whether cuMemGetHandleForAddressRange gives a dmabuf fd for cuMemAlloc'd ranges
 * (whole allocations of several sizes, rounded to host pages as the worker asks), and whether
 * this host's libibverbs has ibv_reg_dmabuf_mr and any RDMA device.
 *   rgpu-dmabuf-probe [DEVICE]
 * Opens the real driver with dlopen (run it natively, not through rgpu). Exit status 0 when the
 * device exports dmabufs; prints one "verdict:" line. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

static struct {
    CUresult (*init)(unsigned);
    CUresult (*version)(int *);
    CUresult (*get)(CUdevice *, int);
    CUresult (*name)(char *, int, CUdevice);
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*handle)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
    CUresult (*error_name)(CUresult, const char **);
} cu;

static const char *err(CUresult r)
{
    const char *s = "?";
    cu.error_name(r, &s);
    return s;
}

static int load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    struct {
        void **slot;
        const char *sym;
    } syms[] = {{(void **)&cu.init, "cuInit"},
                {(void **)&cu.version, "cuDriverGetVersion"},
                {(void **)&cu.get, "cuDeviceGet"},
                {(void **)&cu.name, "cuDeviceGetName"},
                {(void **)&cu.attr, "cuDeviceGetAttribute"},
                {(void **)&cu.retain, "cuDevicePrimaryCtxRetain"},
                {(void **)&cu.set_current, "cuCtxSetCurrent"},
                {(void **)&cu.alloc, "cuMemAlloc_v2"},
                {(void **)&cu.free, "cuMemFree_v2"},
                {(void **)&cu.handle, "cuMemGetHandleForAddressRange"},
                {(void **)&cu.error_name, "cuGetErrorName"}};

    if (h == NULL) {
        printf("libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if ((*syms[i].slot = dlsym(h, syms[i].sym)) == NULL) {
            printf("libcuda.so.1 has no %s\n", syms[i].sym);
            return -1;
        }
    return 0;
}

static int attribute(CUdevice dev, CUdevice_attribute a, const char *name)
{
    int v = -1;
    CUresult r = cu.attr(&v, a, dev);

    if (r != CUDA_SUCCESS)
        printf("  %-54s error %s\n", name, err(r));
    else
        printf("  %-54s %d\n", name, v);
    return r == CUDA_SUCCESS ? v : 0;
}

/* Export an allocation of n bytes as the worker does; 1 if a dmabuf fd came back. */
static int try_export(size_t n, unsigned long long flags)
{
    CUdeviceptr d, page = (CUdeviceptr)sysconf(_SC_PAGESIZE);
    char path[64], target[128] = "";
    struct stat st = {0};
    int fd = -1, ok;
    CUresult r = cu.alloc(&d, n);

    if (r != CUDA_SUCCESS) {
        printf("  cuMemAlloc(%zu): %s\n", n, err(r));
        return 0;
    }
    CUdeviceptr lo = d & ~(page - 1), hi = (d + n + page - 1) & ~(page - 1);
    r = cu.handle(&fd, lo, hi - lo, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, flags);
    ok = r == CUDA_SUCCESS && fd >= 0;
    if (ok) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        target[len > 0 ? len : 0] = '\0';
        fstat(fd, &st);
        close(fd);
    }
    printf("  alloc %10zu B at %#llx (offset in 2 MiB %#llx): export [%#llx, +%llu) flags %llu: "
           "%s%s%s size %lld\n",
           n, (unsigned long long)d, (unsigned long long)(d & ((2u << 20) - 1)),
           (unsigned long long)lo, (unsigned long long)(hi - lo), flags, ok ? "fd -> " : err(r),
           target, ok ? "," : "", (long long)st.st_size);
    cu.free(d);
    return ok;
}

static void verbs(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW);
    struct ibv_device **(*list)(int *);
    int n = 0;

    if (h == NULL) {
        printf("libibverbs.so.1: not installed (%s)\n", dlerror());
        return;
    }
    printf("libibverbs.so.1: ibv_reg_dmabuf_mr %s\n",
           dlsym(h, "ibv_reg_dmabuf_mr") != NULL ? "present" : "ABSENT (rdma-core < 34)");
    *(void **)&list = dlsym(h, "ibv_get_device_list");
    if (list != NULL && list(&n) != NULL)
        printf("libibverbs.so.1: %d RDMA device(s)\n", n);
}

int main(int argc, char **argv)
{
    int ordinal = argc > 1 ? atoi(argv[1]) : 0, version = 0, dmabuf, exported = 0;
    struct utsname u;
    CUcontext ctx;
    CUdevice dev;
    char name[128] = "";

    uname(&u);
    printf("kernel %s %s (dmabuf import by RDMA drivers needs 5.12 or later)\n", u.sysname,
           u.release);
    if (load() != 0 || cu.init(0) != CUDA_SUCCESS || cu.get(&dev, ordinal) != CUDA_SUCCESS ||
        cu.retain(&ctx, dev) != CUDA_SUCCESS || cu.set_current(ctx) != CUDA_SUCCESS) {
        printf("verdict: no CUDA device %d here\n", ordinal);
        return 2;
    }
    cu.version(&version);
    cu.name(name, sizeof(name), dev);
    printf("driver %d, device %d: %s\n", version, ordinal, name);
    dmabuf = attribute(dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, "DMA_BUF_SUPPORTED");
    attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, "GPU_DIRECT_RDMA_SUPPORTED");
    attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
              "GPU_DIRECT_RDMA_WRITES_ORDERING (100 owner, 200 all)");
    attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
              "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS (1 host)");
    attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED,
              "HOST_ALLOC_DMA_BUF_SUPPORTED");
    printf("cuMemGetHandleForAddressRange(DMA_BUF_FD) of cuMemAlloc'd ranges:\n");
    static const size_t sizes[] = {64u << 20, (3u << 20) + 100, 100u << 10, 4096};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        exported += try_export(sizes[i], 0);
    try_export(64u << 20, CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE);
    verbs();
    printf("verdict: %s\n",
           dmabuf && exported == 4 ? "device memory exports as dmabuf: gpu-server goes direct "
                                     "wherever the NIC's ibv_reg_dmabuf_mr accepts it"
           : dmabuf ? "DMA_BUF_SUPPORTED, but some exports failed (see above): those "
                      "allocations go through staging"
                    : "no dmabuf export: gpu-server uses host staging");
    return dmabuf && exported > 0 ? 0 : 1;
}
