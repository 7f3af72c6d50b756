// Loads for the tenant scripts of the GPU suite (tests/gpu/tenant_*.sh):
//   tenant_load saturate SECONDS [KERNEL_US]  keeps the whole GPU busy with kernels of about
//       KERNEL_US (default 1000) us that spin on every SM; prints how many ran and their rate.
//   tenant_load latency ITERATIONS [KERNEL_US] a latency-bound loop: one small kernel (one block,
//       default 20 us) and a synchronize per iteration; prints p50 and p99 of the iteration time.
//   tenant_load compute LAUNCHES               a long deterministic computation (integer hash
//       rounds over 64 Mi elements, LAUNCHES kernels); prints its checksum.
//   tenant_load hang SECONDS                   one kernel that spins SECONDS on every SM (a hung
//       kernel, as far as its neighbours can tell); prints how long it took.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(x)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorName(e_));                     \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

using clk = std::chrono::steady_clock;

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

__global__ void hash_rounds(unsigned *x, size_t n, int rounds)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned v = x[i];
        for (int r = 0; r < rounds; r++)
            v = v * 1664525u + 1013904223u ^ (v >> 13);
        x[i] = v;
    }
}

static long long cycles_for(int us)
{
    int khz = 0;
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    return (long long)khz * us / 1000;
}

static double seconds_since(clk::time_point t0)
{
    return std::chrono::duration<double>(clk::now() - t0).count();
}

// Batches of 4 kernels, one batch queued behind the running one, so the GPU never idles.
static int saturate(double secs, int us)
{
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    long long cyc = cycles_for(us);
    cudaEvent_t ev[2];
    CHECK(cudaEventCreate(&ev[0]));
    CHECK(cudaEventCreate(&ev[1]));
    long long done = 0;
    auto t0 = clk::now();
    for (long k = 0;; k++) {
        for (int i = 0; i < 4; i++)
            spin<<<sms * 4, 256>>>(cyc);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(ev[k & 1]));
        if (k > 0) {
            CHECK(cudaEventSynchronize(ev[(k + 1) & 1]));
            done += 4;
        }
        if (seconds_since(t0) >= secs)
            break;
    }
    double t = seconds_since(t0);
    CHECK(cudaDeviceSynchronize());
    printf("saturate kernels=%lld seconds=%.3f rate=%.3f per_s kernel_us=%d\n", done, t,
           done / t, us);
    return 0;
}

static int latency(int iters, int us)
{
    long long cyc = cycles_for(us);
    std::vector<double> lat, at;
    auto start = clk::now();
    for (int i = 0; i < iters + 50; i++) {
        auto t0 = clk::now();
        spin<<<1, 32>>>(cyc);
        CHECK(cudaStreamSynchronize(0));
        if (i >= 50) { // the first iterations warm up
            lat.push_back(seconds_since(t0) * 1e6);
            at.push_back(std::chrono::duration<double>(t0 - start).count() * 1e3);
        }
    }
    std::vector<double> sorted = lat;
    std::sort(sorted.begin(), sorted.end());
    double p50 = sorted[sorted.size() / 2];
    printf("latency iterations=%d p50_us=%.1f p99_us=%.1f max_us=%.1f\n", iters, p50,
           sorted[sorted.size() * 99 / 100], sorted.back());
    // Where the slow iterations are (over 2x p50): when in the loop, and how slow, so that a
    // tail at the start (queues draining) tells from one spread over the run.
    int slow = 0;
    for (size_t i = 0; i < lat.size(); i++)
        if (lat[i] > 2 * p50 && ++slow <= 40)
            fprintf(stderr, "slow iteration %zu at %.2f ms: %.1f us\n", i, at[i], lat[i]);
    fprintf(stderr, "%d iteration(s) over 2x p50 of %zu, the loop %.1f ms\n", slow, lat.size(),
            at.empty() ? 0.0 : at.back());
    return 0;
}

static int compute(int launches)
{
    const size_t n = 64u << 20;
    std::vector<unsigned> h(n);
    unsigned *d;
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned)(i * 2654435761u);
    CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    auto t0 = clk::now();
    for (int k = 0; k < launches; k++) {
        hash_rounds<<<1024, 256>>>(d, n, 64);
        if (k % 64 == 63)
            CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    unsigned long long sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + h[i];
    printf("compute launches=%d checksum=%016llx\n", launches, sum);
    fprintf(stderr, "compute took %.2f s\n", seconds_since(t0));
    CHECK(cudaFree(d));
    return 0;
}

static int hang(int secs)
{
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    auto t0 = clk::now();
    spin<<<sms * 4, 256>>>(cycles_for(secs * 1000000));
    CHECK(cudaGetLastError());
    fprintf(stderr, "hang kernel launched\n");
    CHECK(cudaDeviceSynchronize());
    printf("hang seconds=%.3f\n", seconds_since(t0));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "saturate") == 0)
        return saturate(atof(argv[2]), argc > 3 ? atoi(argv[3]) : 1000);
    if (argc >= 3 && strcmp(argv[1], "latency") == 0)
        return latency(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 20);
    if (argc >= 3 && strcmp(argv[1], "compute") == 0)
        return compute(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "hang") == 0)
        return hang(atoi(argv[2]));
    fprintf(stderr, "usage: tenant_load saturate SECONDS [KERNEL_US] | latency ITERATIONS "
                    "[KERNEL_US] | compute LAUNCHES | hang SECONDS\n");
    return 2;
}
