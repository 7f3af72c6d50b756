/* A client process that loads one large PTX image (the same bytes every run) through the real
 * client library, finds its kernel, and prints PASS. module_cache_e2e.sh runs it twice. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_LEN (200u << 10)

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    static const char head[] = ".version 8.0\n.target sm_90\n.entry _Z5scalePffi()\n//";
    char *ptx = malloc(IMAGE_LEN);
    CUcontext ctx;
    CUmodule mod;
    CUlibrary lib;
    CUfunction f;
    CUdevice dev;

    if (ptx == NULL)
        return 1;
    memset(ptx, 'x', IMAGE_LEN - 1);
    memcpy(ptx, head, sizeof(head) - 1);
    ptx[IMAGE_LEN - 1] = '\0';
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&f, mod, "_Z5scalePffi"));
    CHECK(cuModuleUnload(mod));
    CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0)); /* same image again */
    CHECK(cuLibraryUnload(lib));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(ptx);
    printf("PASS\n");
    return 0;
}
