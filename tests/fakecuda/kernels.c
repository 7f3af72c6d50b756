/* The test programs' kernels, implemented in C with the same results. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

#define P(l, i, type) (*(type *)(l)->params[i])

static size_t threads(const struct fk_launch *l)
{
    return (size_t)l->grid[0] * l->grid[1] * l->grid[2] * l->block[0] * l->block[1] * l->block[2];
}

static CUresult k_vadd(const struct fk_launch *l)
{
    const float *a = P(l, 0, const float *), *b = P(l, 1, const float *);
    float *c = P(l, 2, float *);
    int n = P(l, 3, int);
    size_t m = threads(l) < (size_t)n ? threads(l) : (size_t)n;

    if (!fk_valid(a, m * 4) || !fk_valid(b, m * 4) || !fk_valid(c, m * 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (size_t i = 0; i < m; i++)
        c[i] = a[i] + b[i];
    return CUDA_SUCCESS;
}

/* Same summation order as the tiled kernel: k ascending, in float. */
static CUresult k_matmul(const struct fk_launch *l)
{
    const float *A = P(l, 0, const float *), *B = P(l, 1, const float *);
    float *C = P(l, 2, float *);
    int n = P(l, 3, int);
    size_t bytes = (size_t)n * n * 4;

    if (!fk_valid(A, bytes) || !fk_valid(B, bytes) || !fk_valid(C, bytes))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            float sum = 0;
            for (int k = 0; k < n; k++)
                sum += A[r * n + k] * B[k * n + c];
            C[r * n + c] = sum;
        }
    return CUDA_SUCCESS;
}

static CUresult k_scale(const struct fk_launch *l)
{
    float *x = P(l, 0, float *), s = P(l, 1, float);
    int n = P(l, 2, int);
    size_t m = threads(l) < (size_t)n ? threads(l) : (size_t)n;

    if (!fk_valid(x, m * 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (size_t i = 0; i < m; i++)
        x[i] *= s;
    return CUDA_SUCCESS;
}

static CUresult k_saxpy(const struct fk_launch *l)
{
    float a = P(l, 0, float);
    const float *x = P(l, 1, const float *);
    float *y = P(l, 2, float *);
    int n = P(l, 3, int);
    size_t m = threads(l) < (size_t)n ? threads(l) : (size_t)n;

    if (!fk_valid(x, m * 4) || !fk_valid(y, m * 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (size_t i = 0; i < m; i++)
        y[i] = a * x[i] + y[i];
    return CUDA_SUCCESS;
}

static CUresult k_oob_write(const struct fk_launch *l)
{
    int *p = P(l, 0, int *) + ((size_t)1 << 40);

    return fk_valid(p, sizeof(int)) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* printf.cu: the driver prints device printf output on the process's stdout. */
static CUresult k_hello(const struct fk_launch *l)
{
    printf("device says %d\n", P(l, 0, int));
    fflush(stdout);
    return CUDA_SUCCESS;
}

/* assert(x > 0) in every thread: the driver prints each failing thread to stderr. */
static CUresult k_check_positive(const struct fk_launch *l)
{
    if (P(l, 0, int) > 0)
        return CUDA_SUCCESS;
    for (size_t t = 0; t < threads(l); t++)
        fprintf(stderr,
                "device_assert.cu:9: void check_positive(int): block: [0,0,0], thread: "
                "[%zu,0,0] Assertion `x > 0` failed.\n",
                t);
    fflush(stderr);
    return CUDA_ERROR_ASSERT;
}

static CUresult k_empty(const struct fk_launch *l)
{
    return CUDA_SUCCESS;
}

/* textures.cu: point sampling at texel centres reads element (x, y[, layer]) of the image. */
static bool image_fits(const struct fk_image *im, size_t row_bytes, size_t rows, size_t slices)
{
    return im->pitch >= row_bytes && im->rows >= rows && im->slices >= slices;
}

static CUresult k_tex_to_surf(const struct fk_launch *l)
{
    struct fk_image t, s;
    int w = P(l, 2, int), h = P(l, 3, int);

    if (w < 0 || h < 0 || !fk_image_of(P(l, 0, unsigned long long), false, &t) ||
        !fk_image_of(P(l, 1, unsigned long long), true, &s) ||
        !image_fits(&t, (size_t)w * 4, h, 1) || !image_fits(&s, (size_t)w * 4, h, 1))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float v;
            memcpy(&v, t.data + y * t.pitch + x * 4, 4);
            v = v * 2.0f + 1.0f;
            memcpy(s.data + y * s.pitch + x * 4, &v, 4);
        }
    return CUDA_SUCCESS;
}

static CUresult k_layered_read(const struct fk_launch *l)
{
    struct fk_image t;
    float *out = P(l, 1, float *);
    int w = P(l, 2, int), h = P(l, 3, int), layers = P(l, 4, int);

    if (w < 0 || h < 0 || layers < 0 || !fk_image_of(P(l, 0, unsigned long long), false, &t) ||
        !image_fits(&t, (size_t)w * 4, h, layers) || !fk_valid(out, (size_t)w * h * layers * 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int z = 0; z < layers; z++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                float v;
                memcpy(&v, t.data + (z * t.rows + y) * t.pitch + x * 4, 4);
                out[(z * h + y) * w + x] = v + z;
            }
    return CUDA_SUCCESS;
}

static CUresult k_linear_fetch(const struct fk_launch *l)
{
    struct fk_image t;
    float *out = P(l, 1, float *);
    int n = P(l, 2, int);

    if (n < 0 || !fk_image_of(P(l, 0, unsigned long long), false, &t) || t.pitch < (size_t)n * 4 ||
        !fk_valid(out, (size_t)n * 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int i = 0; i < n; i++) {
        float v;
        memcpy(&v, t.data + i * 4, 4);
        out[i] = v * 3.0f;
    }
    return CUDA_SUCCESS;
}

/* Mapped pinned host memory (tests/integration/host_mirror.c). redzone_check is XLA's redzone
 * checker in small: counts the bytes of buf[0, n) that are not 0xab and, if any, adds the count
 * to *out (a host buffer, mapped). delay is p2pBandwidthLatencyTest's: it waits on a host flag
 * (the fake runs it at once: it reads the flag and returns). read_flag copies the flag it reads
 * into device memory, so a test sees what the GPU saw. */
static CUresult k_redzone_check(const struct fk_launch *l)
{
    const unsigned char *buf = P(l, 0, const unsigned char *);
    unsigned long long n = P(l, 1, unsigned long long);
    unsigned *out = P(l, 2, unsigned *);
    unsigned bad = 0;

    if (!fk_valid(buf, n) || !fk_valid(out, sizeof(*out)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (unsigned long long i = 0; i < n; i++)
        bad += buf[i] != 0xab;
    if (bad > 0)
        *out += bad;
    return CUDA_SUCCESS;
}

static CUresult k_delay(const struct fk_launch *l)
{
    const volatile int *flag = P(l, 0, const volatile int *);

    if (!fk_valid((const void *)flag, sizeof(*flag)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    (void)*flag;
    return CUDA_SUCCESS;
}

static CUresult k_read_flag(const struct fk_launch *l)
{
    const int *flag = P(l, 0, const int *);
    int *out = P(l, 1, int *);

    if (!fk_valid(flag, sizeof(*flag)) || !fk_valid(out, sizeof(*out)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    *out = *flag;
    return CUDA_SUCCESS;
}

/* A kernel of fixed duration (the compute gate's tests, tests/worker/share_sessions.sh): it
 * "runs" for its parameter's microseconds, sleeping, so the measured time is the same however
 * loaded the host's CPUs are. With FAKECUDA_GPU_TIMELINE it does not sleep: it is put on the
 * shared GPU's timeline (fakecuda.c, fk_timeline_run) and the launch returns at once. */
static CUresult k_sleep_us(const struct fk_launch *l)
{
    unsigned us = P(l, 0, unsigned);
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};

    if (fk_timeline_run(l->stream, (uint64_t)us * 1000))
        return CUDA_SUCCESS;
    while (nanosleep(&ts, &ts) != 0)
        ;
    return CUDA_SUCCESS;
}

static const struct fk_kernel kernels[] = {
    {"empty", 0, {0}, {0}, k_empty}, /* bench/micro.c */
    {"_Z5helloi", 1, {0}, {4}, k_hello},
    {"_Z14check_positivei", 1, {0}, {4}, k_check_positive},
    {"_Z4vaddPKfS0_Pfi", 4, {0, 8, 16, 24}, {8, 8, 8, 4}, k_vadd},
    {"_Z6matmulPKfS0_Pfi", 4, {0, 8, 16, 24}, {8, 8, 8, 4}, k_matmul},
    {"_Z5scalePffi", 3, {0, 8, 12}, {8, 4, 4}, k_scale},
    {"_Z13redzone_checkPKhyPj", 3, {0, 8, 16}, {8, 8, 8}, k_redzone_check},
    {"_Z5delayPViy", 2, {0, 8}, {8, 8}, k_delay},
    {"_Z9read_flagPKiPi", 2, {0, 8}, {8, 8}, k_read_flag},
    {"saxpy_ptx", 4, {0, 8, 16, 24}, {4, 8, 8, 4}, k_saxpy},
    {"_Z9oob_writePi", 1, {0}, {8}, k_oob_write},
    {"_Z11tex_to_surfyyii", 4, {0, 8, 16, 20}, {8, 8, 4, 4}, k_tex_to_surf},
    {"_Z12layered_readyPfiii", 5, {0, 8, 16, 20, 24}, {8, 8, 4, 4, 4}, k_layered_read},
    {"_Z12linear_fetchyPfi", 3, {0, 8, 16}, {8, 8, 4}, k_linear_fetch},
    /* graph_cond.cu (fake_graph_cond.c) */
    {"_Z11cond_if_oddPKiy", 2, {0, 8}, {8, 8}, fk_k_cond_if_odd},
    {"_Z14cond_set_valuePKiy", 2, {0, 8}, {8, 8}, fk_k_cond_set_value},
    {"_Z8cond_addPii", 2, {0, 8}, {8, 4}, fk_k_cond_add},
    {"_Z14cond_countdownPiS_y", 3, {0, 8, 16}, {8, 8, 8}, fk_k_cond_countdown},
    {"_Z8sleep_usj", 1, {0}, {4}, k_sleep_us}, /* tests/worker/share_sessions.sh */
};

const struct fk_kernel *fk_kernel_find(const char *name)
{
    for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++)
        if (strcmp(kernels[i].name, name) == 0)
            return &kernels[i];
    return NULL;
}

const struct fk_kernel *fk_kernel_at(unsigned i)
{
    return i < sizeof(kernels) / sizeof(kernels[0]) ? &kernels[i] : NULL;
}

static int dev_counter; /* vadd.cu: __device__ int dev_counter */

static const struct fk_global globals[] = {
    {"dev_counter", &dev_counter, sizeof(dev_counter)},
};

const struct fk_global *fk_global_find(const char *name)
{
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (strcmp(globals[i].name, name) == 0)
            return &globals[i];
    return NULL;
}

bool fk_global_valid(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;

    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (a >= (uintptr_t)globals[i].storage &&
            a + len <= (uintptr_t)globals[i].storage + globals[i].size)
            return true;
    return false;
}
