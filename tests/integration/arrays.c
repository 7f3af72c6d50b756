/* CUDA arrays, texture and surface objects through the driver API: 2D, 3D and layered arrays
 * and their descriptors; copies host <-> array (pitched host rows, offsets, synchronous and
 * asynchronous), device <-> array, array <-> array, several slices with padded host slices;
 * texture objects over an array, linear and pitched memory, and surface objects, with their
 * descriptor queries. Every copy is checked byte for byte against a host model.
 *   arrays           what a real GPU does the same (the GPU suite compares the output)
 *   arrays --rgpu    also refusals of bad handles, as rgpu gives them
 *   arrays --leak    create an array with a texture and a surface object and exit without
 *                    destroying them (the server must free them at session end) */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

#define SAME(what, a, b, n)                                                                        \
    do {                                                                                           \
        if (memcmp((a), (b), (n)) != 0) {                                                          \
            printf("FAIL: %s differs\n", what);                                                    \
            failures++;                                                                            \
        } else {                                                                                   \
            printf("ok   %s\n", what);                                                             \
        }                                                                                          \
    } while (0)

/* 2D: 40 x 20 elements of 2 x uint16 (160 bytes per row). */
#define W2   40
#define H2   20
#define ROW2 (W2 * 4)
/* 3D: 16 x 8 x 5 floats (64 bytes per row); host slices padded to 10 rows of 80 bytes. */
#define W3   16
#define H3   8
#define D3   5
#define ROW3 (W3 * 4)
#define HP3  80
#define HH3  10

static unsigned char model2[H2][ROW2], model3[D3][H3][ROW3];

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131 + (i >> 7) + seed * 29);
}

static CUarray array_2d(void)
{
    CUDA_ARRAY_DESCRIPTOR d = {W2, H2, CU_AD_FORMAT_UNSIGNED_INT16, 2}, back;
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CUarray a = NULL;

    OK(cuArrayCreate(&a, &d));
    OK(cuArrayGetDescriptor(&back, a));
    OK(cuArray3DGetDescriptor(&d3, a));
    if (back.Width != W2 || back.Height != H2 || back.Format != d.Format || back.NumChannels != 2 ||
        d3.Width != W2 || d3.Height != H2 || d3.Depth != 0 || d3.NumChannels != 2) {
        printf("FAIL: 2D array descriptors\n");
        failures++;
    }
    return a;
}

static void copies_2d(CUstream st)
{
    static unsigned char host[H2 + 3][ROW2 + 24], out[H2][ROW2];
    CUarray a = array_2d(), b = array_2d();
    CUdeviceptr dev;
    size_t pitch;

    /* whole array from pitched host rows */
    fill(&host[0][0], sizeof(host), 1);
    CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                        .srcHost = host,
                        .srcPitch = ROW2 + 24,
                        .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                        .dstArray = a,
                        .WidthInBytes = ROW2,
                        .Height = H2};
    OK(cuMemcpy2D(&up));
    for (int r = 0; r < H2; r++)
        memcpy(model2[r], host[r], ROW2);
    /* a 24-byte x 6-row patch at (x 16 bytes, y 9), from host offset (8, 2), asynchronously */
    fill(&host[0][0], sizeof(host), 2);
    CUDA_MEMCPY2D patch = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                           .srcHost = host,
                           .srcXInBytes = 8,
                           .srcY = 2,
                           .srcPitch = ROW2 + 24,
                           .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                           .dstArray = a,
                           .dstXInBytes = 16,
                           .dstY = 9,
                           .WidthInBytes = 24,
                           .Height = 6};
    OK(cuMemcpy2DAsync(&patch, st));
    OK(cuStreamSynchronize(st));
    for (int r = 0; r < 6; r++)
        memcpy(&model2[9 + r][16], &host[2 + r][8], 24);
    CUDA_MEMCPY2D down = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                          .srcArray = a,
                          .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = out,
                          .dstPitch = ROW2,
                          .WidthInBytes = ROW2,
                          .Height = H2};
    OK(cuMemcpy2D(&down));
    SAME("2D host -> array (pitched, offsets, async) -> host", out, model2, sizeof(out));

    /* a sub-rectangle of the array out to pitched host rows at an offset */
    memset(host, 0, sizeof(host));
    CUDA_MEMCPY2D part = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                          .srcArray = a,
                          .srcXInBytes = 12,
                          .srcY = 5,
                          .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = host,
                          .dstXInBytes = 4,
                          .dstY = 1,
                          .dstPitch = ROW2 + 24,
                          .WidthInBytes = 100,
                          .Height = 11};
    OK(cuMemcpy2DAsync(&part, st));
    OK(cuStreamSynchronize(st));
    int bad = 0;
    for (int r = 0; r < 11; r++)
        bad |= memcmp(&host[1 + r][4], &model2[5 + r][12], 100) != 0 || host[1 + r][3] != 0 ||
               host[1 + r][104] != 0;
    SAME("2D array sub-rectangle -> pitched host rows", &bad, &(int){0}, sizeof(bad));

    /* array -> pitched device -> array at an offset -> array -> host */
    OK(cuMemAllocPitch(&dev, &pitch, ROW2, H2, 4));
    CUDA_MEMCPY2D a2d = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                         .srcArray = a,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                         .dstDevice = dev,
                         .dstPitch = pitch,
                         .WidthInBytes = ROW2,
                         .Height = H2};
    OK(cuMemcpy2DAsync(&a2d, st));
    CUDA_MEMCPY2D d2a = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                         .srcDevice = dev,
                         .srcPitch = pitch,
                         .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                         .dstArray = b,
                         .WidthInBytes = ROW2,
                         .Height = H2};
    OK(cuMemcpy2DAsync(&d2a, st));
    CUDA_MEMCPY2D a2a = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                         .srcArray = b,
                         .srcY = 2,
                         .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                         .dstArray = a,
                         .dstXInBytes = 8,
                         .WidthInBytes = ROW2 - 8,
                         .Height = H2 - 2};
    OK(cuMemcpy2D(&a2a));
    for (int r = 0; r < H2 - 2; r++) /* b holds model2; rows 2.. land at row 0, column 8 */
        memmove(&model2[r][8], &model2[r + 2][0], ROW2 - 8);
    OK(cuStreamSynchronize(st));
    memset(out, 0, sizeof(out));
    OK(cuMemcpy2D(&down));
    SAME("2D array -> device -> array -> array -> host", out, model2, sizeof(out));
    OK(cuMemFree(dev));
    OK(cuArrayDestroy(a));
    OK(cuArrayDestroy(b));
}

static CUarray array_3d(unsigned flags, unsigned depth)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {W3, H3, depth, CU_AD_FORMAT_FLOAT, 1, flags}, back;
    CUarray a = NULL;

    OK(cuArray3DCreate(&a, &d));
    OK(cuArray3DGetDescriptor(&back, a));
    /* Field by field: the driver leaves the struct's tail padding as it found it. */
    if (back.Width != d.Width || back.Height != d.Height || back.Depth != d.Depth ||
        back.Format != d.Format || back.NumChannels != d.NumChannels || back.Flags != d.Flags) {
        printf("FAIL: 3D array descriptor %zux%zux%zu format %d channels %u flags %#x\n",
               back.Width, back.Height, back.Depth, (int)back.Format, back.NumChannels, back.Flags);
        failures++;
    }
    return a;
}

static void copies_3d(CUstream st)
{
    static unsigned char host[D3][HH3][HP3], out[D3][H3][ROW3];
    CUarray a = array_3d(0, D3), layered = array_3d(CUDA_ARRAY3D_LAYERED, D3);
    CUdeviceptr dev;

    /* padded host slices -> slices 1..3 of the 3D array (slice 0 and 4 from a first copy) */
    fill(&host[0][0][0], sizeof(host), 3);
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                        .srcHost = host,
                        .srcPitch = HP3,
                        .srcHeight = HH3,
                        .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                        .dstArray = a,
                        .WidthInBytes = ROW3,
                        .Height = H3,
                        .Depth = D3};
    OK(cuMemcpy3D(&up));
    for (int z = 0; z < D3; z++)
        for (int r = 0; r < H3; r++)
            memcpy(model3[z][r], host[z][r], ROW3);
    fill(&host[0][0][0], sizeof(host), 4);
    up.srcXInBytes = 4, up.srcY = 1, up.srcZ = 1, up.dstZ = 1, up.dstY = 2, up.Height = 5;
    up.WidthInBytes = 40, up.dstXInBytes = 12, up.Depth = 3;
    OK(cuMemcpy3DAsync(&up, st));
    OK(cuStreamSynchronize(st));
    for (int z = 0; z < 3; z++)
        for (int r = 0; r < 5; r++)
            memcpy(&model3[1 + z][2 + r][12], &host[1 + z][1 + r][4], 40);
    CUDA_MEMCPY3D down = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                          .srcArray = a,
                          .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = out,
                          .WidthInBytes = ROW3,
                          .Height = H3,
                          .Depth = D3};
    OK(cuMemcpy3D(&down));
    SAME("3D host (padded slices, offsets) -> array -> host", out, model3, sizeof(out));

    /* 3D array -> linear device memory (several slices) -> layered array -> host */
    OK(cuMemAlloc(&dev, sizeof(out)));
    CUDA_MEMCPY3D a2d = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                         .srcArray = a,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                         .dstDevice = dev,
                         .dstPitch = ROW3,
                         .dstHeight = H3,
                         .WidthInBytes = ROW3,
                         .Height = H3,
                         .Depth = D3};
    OK(cuMemcpy3DAsync(&a2d, st));
    CUDA_MEMCPY3D d2l = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                         .srcDevice = dev,
                         .srcPitch = ROW3,
                         .srcHeight = H3,
                         .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                         .dstArray = layered,
                         .WidthInBytes = ROW3,
                         .Height = H3,
                         .Depth = D3};
    OK(cuMemcpy3DAsync(&d2l, st));
    OK(cuStreamSynchronize(st));
    memset(out, 0, sizeof(out));
    down.srcArray = layered;
    OK(cuMemcpy3D(&down));
    SAME("3D array -> device (5 slices) -> layered array -> host", out, model3, sizeof(out));

    /* several slices between device memory and padded host slices, no array */
    memset(host, 0, sizeof(host));
    CUDA_MEMCPY3D d2h = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                         .srcDevice = dev,
                         .srcPitch = ROW3,
                         .srcHeight = H3,
                         .srcZ = 1,
                         .dstMemoryType = CU_MEMORYTYPE_HOST,
                         .dstHost = host,
                         .dstPitch = HP3,
                         .dstHeight = HH3,
                         .WidthInBytes = ROW3,
                         .Height = H3,
                         .Depth = D3 - 1};
    OK(cuMemcpy3D(&d2h));
    int bad = 0;
    for (int z = 0; z < D3 - 1; z++)
        for (int r = 0; r < H3; r++)
            bad |= memcmp(host[z][r], model3[z + 1][r], ROW3) != 0;
    SAME("3D device (4 slices from Z 1) -> padded host slices", &bad, &(int){0}, sizeof(bad));
    OK(cuMemFree(dev));
    OK(cuArrayDestroy(a));
    OK(cuArrayDestroy(layered));
}

static void objects(void)
{
    CUarray a = array_3d(CUDA_ARRAY3D_SURFACE_LDST, 0);
    CUdeviceptr lin, pitched;
    size_t pitch;
    CUtexObject t_arr, t_lin, t_pitch;
    CUsurfObject s;
    CUDA_RESOURCE_DESC r = {.resType = CU_RESOURCE_TYPE_ARRAY, .res.array.hArray = a}, rb;
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT},
                      tb;

    OK(cuMemAlloc(&lin, 4096));
    OK(cuMemAllocPitch(&pitched, &pitch, ROW3, H3, 4));
    OK(cuTexObjectCreate(&t_arr, &r, &td, NULL));
    OK(cuTexObjectGetResourceDesc(&rb, t_arr));
    OK(cuTexObjectGetTextureDesc(&tb, t_arr));
    if (rb.resType != CU_RESOURCE_TYPE_ARRAY || rb.res.array.hArray != a ||
        tb.filterMode != CU_TR_FILTER_MODE_POINT || tb.addressMode[1] != CU_TR_ADDRESS_MODE_CLAMP) {
        printf("FAIL: texture object descriptors\n");
        failures++;
    }
    OK(cuSurfObjectCreate(&s, &r));
    OK(cuSurfObjectGetResourceDesc(&rb, s));
    if (rb.res.array.hArray != a) {
        printf("FAIL: surface object descriptor\n");
        failures++;
    }
    CUDA_RESOURCE_DESC rl = {.resType = CU_RESOURCE_TYPE_LINEAR,
                             .res.linear = {lin, CU_AD_FORMAT_FLOAT, 1, 4096}};
    OK(cuTexObjectCreate(&t_lin, &rl, &td, NULL));
    OK(cuTexObjectGetResourceDesc(&rb, t_lin));
    if (rb.resType != CU_RESOURCE_TYPE_LINEAR || rb.res.linear.devPtr != lin) {
        printf("FAIL: linear texture object descriptor\n");
        failures++;
    }
    CUDA_RESOURCE_DESC rp = {.resType = CU_RESOURCE_TYPE_PITCH2D,
                             .res.pitch2D = {pitched, CU_AD_FORMAT_FLOAT, 1, W3, H3, pitch}};
    OK(cuTexObjectCreate(&t_pitch, &rp, &td, NULL));
    printf("%s texture and surface objects over an array, linear and pitched memory\n",
           t_arr != t_lin && t_lin != t_pitch ? "ok  " : "FAIL");
    OK(cuTexObjectDestroy(t_pitch));
    OK(cuTexObjectDestroy(t_lin));
    OK(cuSurfObjectDestroy(s));
    OK(cuTexObjectDestroy(t_arr));
    OK(cuArrayDestroy(a));
    OK(cuMemFree(lin));
    OK(cuMemFree(pitched));
}

/* rgpu's answers to bad handles (a native driver's are undefined for freed handles). */
static void refusals(void)
{
    CUarray a = array_2d(), d3 = array_3d(CUDA_ARRAY3D_LAYERED, 2), gone = array_2d();
    CUDA_RESOURCE_DESC r = {.resType = CU_RESOURCE_TYPE_ARRAY, .res.array.hArray = gone};
    CUDA_TEXTURE_DESC td = {.filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_ARRAY_DESCRIPTOR d;
    CUtexObject t;
    CUsurfObject s;
    static unsigned char host[H2 + 1][ROW2];

    OK(cuArrayDestroy(gone));
    EXPECT_RESULT(cuArrayDestroy(gone), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RESULT(cuTexObjectCreate(&t, &r, &td, NULL), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RESULT(cuArrayGetDescriptor(&d, d3), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = host,
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                       .dstArray = gone,
                       .WidthInBytes = ROW2,
                       .Height = H2};
    EXPECT_RESULT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
    c.dstArray = a, c.Height = H2 + 1; /* one row past the end: refused by the driver */
    EXPECT_RESULT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
    r.res.array.hArray = a;
    OK(cuTexObjectCreate(&t, &r, &td, NULL));
    OK(cuTexObjectDestroy(t));
    EXPECT_RESULT(cuTexObjectDestroy(t), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuTexObjectDestroy(0x5eed), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuSurfObjectDestroy(0x5eed), CUDA_ERROR_INVALID_VALUE);
    CUDA_RESOURCE_DESC rl = {.resType = CU_RESOURCE_TYPE_LINEAR};
    EXPECT_RESULT(cuSurfObjectCreate(&s, &rl), CUDA_ERROR_INVALID_VALUE);
    CUDA_RESOURCE_DESC rm = {.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY};
    EXPECT_RESULT(cuTexObjectCreate(&t, &rm, &td, NULL), CUDA_ERROR_NOT_SUPPORTED);
    OK(cuArrayDestroy(a));
    OK(cuArrayDestroy(d3));
    printf("%s bad handles refused\n", failures == 0 ? "ok  " : "FAIL");
}

static void leak(void)
{
    CUarray a = array_3d(CUDA_ARRAY3D_SURFACE_LDST, 0);
    CUDA_RESOURCE_DESC r = {.resType = CU_RESOURCE_TYPE_ARRAY, .res.array.hArray = a};
    CUDA_TEXTURE_DESC td = {.filterMode = CU_TR_FILTER_MODE_POINT};
    CUtexObject t;
    CUsurfObject s;

    OK(cuTexObjectCreate(&t, &r, &td, NULL));
    OK(cuSurfObjectCreate(&s, &r));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    CUcontext ctx;
    CUdevice dev;
    CUstream st;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    if (strcmp(mode, "--leak") == 0) {
        leak();
        printf(failures == 0 ? "PASS (left for the server to free)\n" : "FAIL\n");
        return failures != 0;
    }
    copies_2d(st);
    copies_3d(st);
    objects();
    if (strcmp(mode, "--rgpu") == 0)
        refusals();
    OK(cuStreamDestroy(st));
    if (failures == 0)
        printf("PASS\n");
    return failures != 0;
}
