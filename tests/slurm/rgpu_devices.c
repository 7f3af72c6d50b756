/* A CUDA driver-API job for the Slurm test: on every device it sees, allocates MiB (argv[1]),
 * writes a pattern and prints "ready DEVICES"; then waits until the file argv[2] exists (none:
 * no wait), reads every pattern back and prints "PASS devices=N" (or what failed). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEV 16

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            printf("%s failed: %s\n", #x, n_);                                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    size_t len = (argc > 1 ? strtoul(argv[1], NULL, 10) : 16) << 20;
    const char *release = argc > 2 ? argv[2] : NULL;
    unsigned char *buf = malloc(len), *back = malloc(len);
    CUcontext ctx[MAX_DEV];
    CUdeviceptr d[MAX_DEV];
    int n = 0;

    if (buf == NULL || back == NULL)
        return 1;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    if (n < 1 || n > MAX_DEV) {
        printf("devices=%d\n", n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, i));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[i], dev));
        CHECK(cuCtxSetCurrent(ctx[i]));
        CHECK(cuMemAlloc(&d[i], len));
        memset(buf, 0x40 + i, len);
        CHECK(cuMemcpyHtoD(d[i], buf, len));
    }
    printf("ready devices=%d\n", n);
    fflush(stdout);
    while (release != NULL && access(release, F_OK) != 0)
        usleep(50 * 1000);
    for (int i = 0; i < n; i++) {
        CHECK(cuCtxSetCurrent(ctx[i]));
        CHECK(cuMemcpyDtoH(back, d[i], len));
        memset(buf, 0x40 + i, len);
        if (memcmp(buf, back, len) != 0) {
            printf("device %d: the pattern came back different\n", i);
            return 1;
        }
        CHECK(cuMemFree(d[i]));
    }
    printf("PASS devices=%d\n", n);
    return 0;
}
