// Driver API: a PTX module JIT-compiled with cuModuleLoadDataEx and its options: log buffers
// with their sizes, the optimization level, line info, verbose logs and the wall time. Checks
// that the info log came back (verbose ptxas always says something), that the size slots were
// updated to what the logs hold, and that a PTX with an error is refused with an error log.
// JIT_PRINT_LOG=1 also prints the info log (run_programs.sh checks the fake driver's words).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include <cuda.h>

#include "driver_common.h"

// An unknown instruction: ptxas refuses it with a line in the error log.
static const char broken_ptx[] =
    ".version 9.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry jit_broken()\n"
    "{\n"
    " no_such_instruction.u32 %r1;\n"
    " ret;\n"
    "}\n";

static int bad;
static void expect(const char *what, bool ok)
{
    printf("%s: %s\n", what, ok ? "yes" : "no");
    bad += !ok;
}

// A load with logs; the PTX gets a unique global so the driver's JIT cache cannot answer it,
// and with pad, 80 KiB of comments (images of 64 KiB or more go to rgpu's module cache by hash).
static CUresult load(CUmodule *mod, const char *ptx_text, char *info, char *error, size_t cap,
                     size_t *info_size, size_t *error_size, float *wall, bool pad = false)
{
    static std::string nonce;
    std::string text(ptx_text);
    if (nonce.empty()) {
        char line[64];
        snprintf(line, sizeof(line), ".global .u32 jit_nonce_%u_%ld;\n", (unsigned)getpid(),
                 (long)time(NULL));
        nonce = line;
    }
    text.insert(text.find(".visible"), nonce);
    for (int i = 0; pad && i < 1024; i++)
        text += "// padding padding padding padding padding padding padding padding pad\n";
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_GENERATE_LINE_INFO,
                           CU_JIT_LOG_VERBOSE, CU_JIT_WALL_TIME};
    void *vals[] = {info, (void *)cap, error, (void *)cap, (void *)3, (void *)1, (void *)1, NULL};
    memset(info, 0x55, cap); // what the logs leave untouched is not NUL
    memset(error, 0x55, cap);
    CUresult res = cuModuleLoadDataEx(mod, text.c_str(), 8, opts, vals);
    *info_size = (size_t)vals[1];
    *error_size = (size_t)vals[3];
    memcpy(wall, &vals[7], sizeof(float));
    return res;
}

int main()
{
    const size_t cap = 8192;
    static char info[cap], error[cap];
    size_t info_size, error_size;
    float wall;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(load(&mod, ptx, info, error, cap, &info_size, &error_size, &wall));
    if (getenv("JIT_PRINT_LOG") != NULL)
        printf("info log: %s\n", info);
    expect("info log non-empty", memchr(info, 0, cap) != NULL && strlen(info) > 0);
    expect("info size within the buffer", info_size > 0 && info_size <= cap);
    expect("info size covers the text", info_size >= strlen(info));
    expect("error log empty", memchr(error, 0, cap) != NULL && error[0] == 0);
    expect("wall time positive", wall > 0.0f);
    CHECK(cuModuleGetFunction(&f, mod, "saxpy_ptx"));

    // The loaded kernel runs: y = 2 * x + y over 1000 floats.
    const int n = 1000;
    float x[n], y[n], a = 2.0f;
    int count = n, wrong = 0;
    CUdeviceptr dx, dy;
    for (int i = 0; i < n; i++)
        x[i] = (float)i, y[i] = 1.0f;
    CHECK(cuMemAlloc(&dx, sizeof(x)));
    CHECK(cuMemAlloc(&dy, sizeof(y)));
    CHECK(cuMemcpyHtoD(dx, x, sizeof(x)));
    CHECK(cuMemcpyHtoD(dy, y, sizeof(y)));
    void *params[] = {&a, &dx, &dy, &count};
    CHECK(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    CHECK(cuMemcpyDtoH(y, dy, sizeof(y)));
    for (int i = 0; i < n; i++)
        wrong += y[i] != 2.0f * (float)i + 1.0f;
    expect("kernel results right", wrong == 0);

    // A large image twice: the first goes by hash and then as bytes, the second (same bytes)
    // by hash alone where rgpu's cache has it; options and logs travel either way.
    CUmodule large[2];
    for (int i = 0; i < 2; i++) {
        CHECK(load(&large[i], ptx, info, error, cap, &info_size, &error_size, &wall, true));
        if (getenv("JIT_PRINT_LOG") != NULL)
            printf("large image info log: %s\n", info);
        if (i == 0)
            expect("large image info log non-empty", strlen(info) > 0);
        CHECK(cuModuleGetFunction(&f, large[i], "saxpy_ptx"));
        CHECK(cuModuleUnload(large[i]));
    }

    CUmodule broken;
    CUresult res = load(&broken, broken_ptx, info, error, cap, &info_size, &error_size, &wall);
    expect("broken PTX refused", res != CUDA_SUCCESS);
    expect("error log non-empty", memchr(error, 0, cap) != NULL && strlen(error) > 0);
    expect("error size covers the text", error_size >= strlen(error) && error_size <= cap);

    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxDestroy(ctx));
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
