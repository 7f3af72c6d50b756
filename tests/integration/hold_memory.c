/* Driver-API client that holds device memory: allocates MiB (argv[1]), writes a pattern,
 * prints "ready", sleeps argv[2] seconds (default 60) or until SIGUSR1, then reads it back and
 * prints PASS. */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static volatile sig_atomic_t woken;

static void on_usr1(int sig)
{
    (void)sig;
    woken = 1;
}

/* secs seconds, or less once SIGUSR1 came (to whichever thread: the client library has its
 * own), so that a test ends a hold early rather than sizing it for a loaded host. */
static void hold(int secs)
{
    const struct timespec tick = {0, 10 * 1000 * 1000};

    for (long t = 0; t < secs * 100L && !woken; t++)
        nanosleep(&tick, NULL);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256, len = mib << 20;
    int secs = argc > 2 ? atoi(argv[2]) : 60;
    unsigned char *buf = malloc(len), *back = malloc(len);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;

    if (buf == NULL || back == NULL || signal(SIGUSR1, on_usr1) == SIG_ERR)
        return 1;
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&d, len));
    CHECK(cuMemcpyHtoD(d, buf, len));
    printf("ready\n");
    fflush(stdout);
    hold(secs);
    CHECK(cuMemcpyDtoH(back, d, len));
    CHECK(cuMemFree(d));
    printf(memcmp(buf, back, len) == 0 ? "PASS\n" : "FAIL: data changed\n");
    return memcmp(buf, back, len) != 0;
}
