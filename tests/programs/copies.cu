// Copies from 1 byte to 1 GiB (max MiB in argv[1]): HtoD, DtoD, DtoH with checksums, and async
// copies through pinned memory.
#include <cstdint>
#include <cstring>
#include "common.h"

static uint64_t checksum(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv)
{
    size_t max = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
    // 40 MiB + 4097: over rgpu's data lanes (32 MiB and up), a last stripe cut short.
    const size_t sizes[] = {1, 3, 4097, 1 << 20, (40 << 20) + 4097, 64 << 20, 256 << 20,
                            1024ull << 20};
    int bad = 0;

    for (size_t size : sizes) {
        if (size > max)
            break;
        unsigned char *src = (unsigned char *)malloc(size), *dst = (unsigned char *)malloc(size);
        unsigned char *d1, *d2;
        for (size_t i = 0; i < size; i++)
            src[i] = (unsigned char)(i * 131 + (i >> 12) + size);
        memset(dst, 0, size);
        CHECK(cudaMalloc(&d1, size));
        CHECK(cudaMalloc(&d2, size));
        CHECK(cudaMemcpy(d1, src, size, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d2, d1, size, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(dst, d2, size, cudaMemcpyDeviceToHost));
        bool ok = checksum(src, size) == checksum(dst, size) && memcmp(src, dst, size) == 0;
        if (size <= (64u << 20)) {
            unsigned char *pin;
            cudaStream_t s;
            CHECK(cudaMallocHost(&pin, size));
            CHECK(cudaStreamCreate(&s));
            CHECK(cudaMemsetAsync(d1, 0, size, s));
            CHECK(cudaMemcpyAsync(d1, src, size, cudaMemcpyHostToDevice, s));
            CHECK(cudaMemcpyAsync(pin, d1, size, cudaMemcpyDeviceToHost, s));
            CHECK(cudaStreamSynchronize(s));
            ok = ok && memcmp(src, pin, size) == 0;
            CHECK(cudaStreamDestroy(s));
            CHECK(cudaFreeHost(pin));
        }
        printf("size %zu %s (checksum %016llx)\n", size, ok ? "ok" : "MISMATCH",
               (unsigned long long)checksum(dst, size));
        bad += !ok;
        CHECK(cudaFree(d1));
        CHECK(cudaFree(d2));
        free(src);
        free(dst);
    }
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
