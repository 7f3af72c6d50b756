/* NVRTC (the toolkit's real library) through the client: two kernels compiled to PTX and to
 * SASS, each twice. NVRTC keeps its results in the compute cache it reaches through
 * cuGetExportTable (client/api/compute_cache.c); run_programs.sh runs this twice with one
 * CUDA_CACHE_PATH and checks that the second run hits and that both print the same outputs. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

static const char *const sources[2] = {
    "extern \"C\" __global__ void scale(float *x, int n)"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 2.0f + 1.0f; }",
    "extern \"C\" __global__ void expo(float *x, int n)"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = __expf(x[i]) * 3.0f; }",
};

static unsigned long fnv(const char *p, size_t n)
{
    unsigned long h = 1469598103934665603ul;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ul;
    return h;
}

/* Compile one source for arch; prints the output's size and hash. */
static int compile(int k, const char *arch, int sass)
{
    const char *opts[] = {arch};
    nvrtcProgram p;
    size_t n = 0;
    char *out;
    nvrtcResult r;

    if (nvrtcCreateProgram(&p, sources[k], "k.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return 1;
    if ((r = nvrtcCompileProgram(p, 1, opts)) != NVRTC_SUCCESS) {
        fprintf(stderr, "compile %d %s: %s\n", k, arch, nvrtcGetErrorString(r));
        return 1;
    }
    if ((sass ? nvrtcGetCUBINSize(p, &n) : nvrtcGetPTXSize(p, &n)) != NVRTC_SUCCESS || n == 0 ||
        (out = malloc(n)) == NULL)
        return 1;
    if ((sass ? nvrtcGetCUBIN(p, out) : nvrtcGetPTX(p, out)) != NVRTC_SUCCESS)
        return 1;
    printf("kernel %d %s: %zu bytes, hash %016lx\n", k, arch, n, fnv(out, n));
    free(out);
    nvrtcDestroyProgram(&p);
    return 0;
}

int main(void)
{
    int bad = 0;

    /* NVRTC reaches the cache only once the driver is initialized, as a CUDA program's is. */
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "cuInit failed\n");
        return 1;
    }
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 2; k++) {
            bad |= compile(k, "--gpu-architecture=sm_90", 1);
            bad |= compile(k, "--gpu-architecture=compute_90", 0);
        }
    if (!bad)
        printf("PASS\n");
    return bad;
}
