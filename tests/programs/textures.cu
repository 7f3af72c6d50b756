// CUDA arrays, texture and surface objects the way NVIDIA's samples use them: a 2D float array
// filled with cudaMemcpyToArray and cudaMemcpy2DToArray, read through a texture object with
// point sampling and written through a surface object into a second array; copies between
// arrays and device memory; a layered array filled and read back with cudaMemcpy3D and read
// through tex2DLayered; a texture over linear memory (tex1Dfetch). Every result is compared
// with what the host computes; prints PASS when all match.
#include <cstdint>
#include <cstring>
#include "common.h"

// cudaMemcpyToArray is deprecated, but simpleTexture and others still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define W 64
#define H 32
#define LAYERS 3

__global__ void tex_to_surf(cudaTextureObject_t tex, cudaSurfaceObject_t surf, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        surf2Dwrite(tex2D<float>(tex, x + 0.5f, y + 0.5f) * 2.0f + 1.0f, surf, x * 4, y);
}

__global__ void layered_read(cudaTextureObject_t tex, float *out, int w, int h, int layers)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        for (int l = 0; l < layers; l++)
            out[(l * h + y) * w + x] = tex2DLayered<float>(tex, x + 0.5f, y + 0.5f, l) + l;
}

__global__ void linear_fetch(cudaTextureObject_t tex, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1Dfetch<float>(tex, i) * 3.0f;
}

static int bad;

static void expect(const char *what, const float *got, const float *want, size_t n)
{
    size_t i = 0;
    double sum = 0;
    while (i < n && got[i] == want[i])
        sum += got[i++];
    if (i < n) {
        printf("%s: MISMATCH at %zu: %g, expected %g\n", what, i, got[i], want[i]);
        bad++;
    } else {
        printf("%s: ok (%zu values, sum %.1f)\n", what, n, sum);
    }
}

static cudaTextureObject_t point_texture(const cudaResourceDesc &res)
{
    cudaTextureDesc td;
    cudaTextureObject_t tex;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 0;
    CHECK(cudaCreateTextureObject(&tex, &res, &td, NULL));
    return tex;
}

static void two_d(void)
{
    static float src[H][W], patch[8][16], want[H][W], got[H][W];
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t a, b;
    cudaResourceDesc res;
    cudaTextureObject_t tex;
    cudaSurfaceObject_t surf;
    float *d;

    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            src[y][x] = (float)(y * 1000 + x);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++)
            patch[y][x] = -(float)(y * 16 + x);
    CHECK(cudaMallocArray(&a, &fd, W, H));
    CHECK(cudaMallocArray(&b, &fd, W, H, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpyToArray(a, 0, 0, src, sizeof(src), cudaMemcpyHostToDevice));
    // a 16x8 patch at column 5, row 3
    CHECK(cudaMemcpy2DToArray(a, 5 * 4, 3, patch, sizeof(patch[0]), sizeof(patch[0]), 8,
                              cudaMemcpyHostToDevice));
    memcpy(want, src, sizeof(src));
    for (int y = 0; y < 8; y++)
        memcpy(&want[3 + y][5], patch[y], sizeof(patch[0]));
    CHECK(cudaMemcpy2DFromArray(got, sizeof(got[0]), a, 0, 0, sizeof(got[0]), H,
                                cudaMemcpyDeviceToHost));
    expect("host -> array -> host", &got[0][0], &want[0][0], W * H);

    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    tex = point_texture(res);
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, tex));
    if (back.resType != cudaResourceTypeArray || back.res.array.array != a) {
        printf("texture resource descriptor: MISMATCH\n");
        bad++;
    }
    res.res.array.array = b;
    CHECK(cudaCreateSurfaceObject(&surf, &res));
    tex_to_surf<<<dim3(W / 16, H / 16), dim3(16, 16)>>>(tex, surf, W, H);
    CHECK(cudaGetLastError());
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            want[y][x] = want[y][x] * 2.0f + 1.0f;
    memset(got, 0, sizeof(got));
    CHECK(cudaMemcpy2DFromArray(got, sizeof(got[0]), b, 0, 0, sizeof(got[0]), H,
                                cudaMemcpyDeviceToHost));
    expect("texture -> kernel -> surface", &got[0][0], &want[0][0], W * H);

    // array -> device -> array -> array -> host
    CHECK(cudaMalloc(&d, sizeof(src)));
    CHECK(cudaMemcpy2DFromArray(d, W * 4, b, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, d, W * 4, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemset(d, 0, sizeof(src)));
    CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2DFromArray(d, W * 4, b, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    memset(got, 0, sizeof(got));
    CHECK(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    expect("array <-> device, array -> array", &got[0][0], &want[0][0], W * H);

    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
    CHECK(cudaFree(d));
}

static void layered(void)
{
    static float src[LAYERS][H][W], want[LAYERS][H][W], got[LAYERS][H][W];
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    cudaResourceDesc res;
    cudaTextureObject_t tex;
    float *d;

    for (int l = 0; l < LAYERS; l++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                src[l][y][x] = (float)(l * 100000 + y * 100 + x);
                want[l][y][x] = src[l][y][x] + l;
            }
    CHECK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(W, H, LAYERS), cudaArrayLayered));
    cudaMemcpy3DParms up = {0};
    up.srcPos = make_cudaPos(0, 0, 0);
    up.dstPos = make_cudaPos(0, 0, 0);
    up.srcPtr = make_cudaPitchedPtr(src, W * sizeof(float), W, H);
    up.dstArray = a;
    up.extent = make_cudaExtent(W, H, LAYERS);
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    cudaMemcpy3DParms down = {0};
    down.srcArray = a;
    down.dstPtr = make_cudaPitchedPtr(got, W * sizeof(float), W, H);
    down.extent = make_cudaExtent(W, H, LAYERS);
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    expect("host -> layered array -> host (3D)", &got[0][0][0], &src[0][0][0], W * H * LAYERS);

    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    tex = point_texture(res);
    CHECK(cudaMalloc(&d, sizeof(got)));
    layered_read<<<dim3(W / 16, H / 16), dim3(16, 16)>>>(tex, d, W, H, LAYERS);
    CHECK(cudaGetLastError());
    memset(got, 0, sizeof(got));
    CHECK(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    expect("layered texture -> kernel", &got[0][0][0], &want[0][0][0], W * H * LAYERS);
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFree(d));
}

static void linear(void)
{
    const int n = 1000;
    static float src[1000], want[1000], got[1000];
    cudaResourceDesc res;
    cudaTextureObject_t tex;
    float *d, *out;

    for (int i = 0; i < n; i++) {
        src[i] = (float)(i * 7 % 101);
        want[i] = src[i] * 3.0f;
    }
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemcpy(d, src, n * sizeof(float), cudaMemcpyHostToDevice));
    memset(&res, 0, sizeof(res));
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = d;
    res.res.linear.desc = cudaCreateChannelDesc<float>();
    res.res.linear.sizeInBytes = n * sizeof(float);
    tex = point_texture(res);
    linear_fetch<<<(n + 255) / 256, 256>>>(tex, out, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, out, n * sizeof(float), cudaMemcpyDeviceToHost));
    expect("linear texture -> kernel", got, want, n);
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFree(d));
    CHECK(cudaFree(out));
}

int main(void)
{
    two_d();
    layered();
    linear();
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
