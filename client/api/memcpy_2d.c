/* Pitched copies (cuMemcpy2D*, cuMemcpy3D*). Host rows are packed here (no pitch on the wire)
 * and unpacked from the reply; when the host pitch equals the width (and, for several slices,
 * the slice height equals the height) the caller's memory is sent or filled as it is. Copies of
 * one slice between host and device memory go as MEMCPY_2D; copies with a CUDA array at either
 * end, of several slices, or at a Z offset go as MEMCPY_3D. Mipmap levels are not supported. */
#include <stdlib.h>
#include <string.h>

#include "client/api/api.h"

struct end2d {
    CUmemorytype type;
    CUdeviceptr dev; /* device: address of the first byte */
    uint8_t *host;   /* host: address of the first byte */
    uint64_t array;  /* array: its id; x (bytes), y, z: the first element */
    size_t x, y, z;
    size_t pitch, height; /* bytes per row, rows per slice (host and device) */
};

static CUresult end_of(CUmemorytype type, CUdeviceptr dev, const void *host, CUarray array,
                       size_t x, size_t y, size_t z, size_t pitch, size_t height, struct end2d *e)
{
    if (type == CU_MEMORYTYPE_UNIFIED) {
        type = cli_dev_lookup(dev, NULL, NULL) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        host = (const void *)(uintptr_t)dev;
    }
    e->type = type;
    if (type == CU_MEMORYTYPE_ARRAY) {
        e->x = x, e->y = y, e->z = z;
        return cli_array_id(array, &e->array) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    e->pitch = pitch;
    e->height = height;
    e->dev = dev + x + (y + z * height) * pitch;
    e->host = (uint8_t *)host + x + (y + z * height) * pitch;
    return type == CU_MEMORYTYPE_HOST && host == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult host_to_host(const struct end2d *d, const struct end2d *s, size_t w, size_t h)
{
    for (size_t r = 0; r < h; r++)
        memcpy(d->host + r * d->pitch, s->host + r * s->pitch, w);
    return CUDA_SUCCESS;
}

static CUresult copy_2d(const struct end2d *d, const struct end2d *s, size_t w, size_t h,
                        CUstream stream, bool per_thread, bool async)
{
    struct cli_call call = {CLI_ARGS(MEMCPY_2D, .dir = 0, .dst = d->dev, .dpitch = d->pitch,
                                     .src = s->dev, .spitch = s->pitch, .width = w, .height = h,
                                     .stream = 0, .async = async)};
    uint8_t *packed = NULL;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEMCPY_2D.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (w == 0 || h == 0)
        return CUDA_SUCCESS;
    if (s->type == CU_MEMORYTYPE_HOST && d->type == CU_MEMORYTYPE_HOST)
        return host_to_host(d, s, w, h);
    if (w > s->pitch || w > d->pitch)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.MEMCPY_2D.dir = s->type == CU_MEMORYTYPE_HOST   ? 0
                           : d->type == CU_MEMORYTYPE_HOST ? 1
                                                           : 2;
    if (call.a.MEMCPY_2D.dir == 2)
        return async ? cli_call_async(&call) : cli_call_sync(&call);
    bool direct = (call.a.MEMCPY_2D.dir == 0 ? s->pitch : d->pitch) == w;
    if (!direct && (packed = malloc(w * h)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (call.a.MEMCPY_2D.dir == 0) {
        if (!direct)
            for (size_t r = 0; r < h; r++)
                memcpy(packed + r * w, s->host + r * s->pitch, w);
        call.data = direct ? s->host : packed;
        call.data_len = w * h;
        res = cli_call_sync(&call); /* the rows are sent; the server finished with them */
    } else {
        call.rdata = direct ? d->host : packed;
        call.rdata_cap = w * h;
        res = cli_call_sync(&call);
        if (res == CUDA_SUCCESS && call.rdata_len != w * h)
            res = CUDA_ERROR_UNKNOWN;
        for (size_t r = 0; res == CUDA_SUCCESS && !direct && r < h; r++)
            memcpy(d->host + r * d->pitch, packed + r * w, w);
    }
    free(packed);
    return res;
}

/* The five MEMCPY_3D values of one end (proto/ops.h). */
static void end_args(const struct end2d *e, uint64_t *a)
{
    if (e->type == CU_MEMORYTYPE_HOST)
        a[0] = 0, a[1] = a[2] = a[3] = a[4] = 0;
    else if (e->type == CU_MEMORYTYPE_DEVICE)
        a[0] = 1, a[1] = e->dev, a[2] = e->pitch, a[3] = e->height, a[4] = 0;
    else
        a[0] = 2, a[1] = e->array, a[2] = e->x, a[3] = e->y, a[4] = e->z;
}

/* Byte r of slice z of a host end. */
static uint8_t *host_row(const struct end2d *e, size_t r, size_t z)
{
    return e->host + (z * e->height + r) * e->pitch;
}

/* Copy between the caller's host rows and the packed buffer (to_packed: gather). */
static void pack_rows(const struct end2d *e, uint8_t *packed, size_t w, size_t h, size_t depth,
                      bool to_packed)
{
    for (size_t z = 0; z < depth; z++)
        for (size_t r = 0; r < h; r++) {
            uint8_t *p = packed + (z * h + r) * w;
            if (to_packed)
                memcpy(p, host_row(e, r, z), w);
            else
                memcpy(host_row(e, r, z), p, w);
        }
}

static CUresult copy_3d(const struct end2d *d, const struct end2d *s, size_t w, size_t h,
                        size_t depth, CUstream stream, bool per_thread, bool async)
{
    struct cli_call call = {
        CLI_ARGS(MEMCPY_3D, .width = w, .height = h, .depth = depth, .async = async)};
    const struct end2d *host = s->type == CU_MEMORYTYPE_HOST ? s : d;
    uint8_t *packed = NULL;
    size_t len;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.MEMCPY_3D.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (w == 0 || h == 0 || depth == 0)
        return CUDA_SUCCESS;
    if (__builtin_mul_overflow(w, h, &len) || __builtin_mul_overflow(len, depth, &len))
        return CUDA_ERROR_INVALID_VALUE;
    for (const struct end2d *e = s; e != NULL; e = e == s ? d : NULL)
        if (e->type != CU_MEMORYTYPE_ARRAY && (w > e->pitch || (depth > 1 && h > e->height)))
            return CUDA_ERROR_INVALID_VALUE;
    if (s->type == CU_MEMORYTYPE_HOST && d->type == CU_MEMORYTYPE_HOST) {
        for (size_t z = 0; z < depth; z++)
            for (size_t r = 0; r < h; r++)
                memcpy(host_row(d, r, z), host_row(s, r, z), w);
        return CUDA_SUCCESS;
    }
    end_args(s, call.a.MEMCPY_3D.src);
    end_args(d, call.a.MEMCPY_3D.dst);
    if (host->type != CU_MEMORYTYPE_HOST)
        return async ? cli_call_async(&call) : cli_call_sync(&call);
    bool direct = host->pitch == w && (depth == 1 || host->height == h);
    if (!direct && (packed = malloc(len)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (host == s) {
        if (!direct)
            pack_rows(s, packed, w, h, depth, true);
        call.data = direct ? s->host : packed;
        call.data_len = len;
        res = cli_call_sync(&call); /* the rows are sent; the server finished with them */
    } else {
        call.rdata = direct ? d->host : packed;
        call.rdata_cap = len;
        res = cli_call_sync(&call);
        if (res == CUDA_SUCCESS && call.rdata_len != len)
            res = CUDA_ERROR_UNKNOWN;
        if (res == CUDA_SUCCESS && !direct)
            pack_rows(d, packed, w, h, depth, false);
    }
    free(packed);
    return res;
}

static CUresult memcpy2d(const CUDA_MEMCPY2D *c, CUstream stream, bool per_thread, bool async)
{
    struct end2d s = {0}, d = {0};
    CUresult res;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = end_of(c->srcMemoryType, c->srcDevice, c->srcHost, c->srcArray, c->srcXInBytes, c->srcY,
                 0, c->srcPitch ? c->srcPitch : c->WidthInBytes, c->Height, &s);
    if (res == CUDA_SUCCESS)
        res = end_of(c->dstMemoryType, c->dstDevice, c->dstHost, c->dstArray, c->dstXInBytes,
                     c->dstY, 0, c->dstPitch ? c->dstPitch : c->WidthInBytes, c->Height, &d);
    if (res != CUDA_SUCCESS)
        return res;
    if (s.type == CU_MEMORYTYPE_ARRAY || d.type == CU_MEMORYTYPE_ARRAY)
        return copy_3d(&d, &s, c->WidthInBytes, c->Height, 1, stream, per_thread, async);
    return copy_2d(&d, &s, c->WidthInBytes, c->Height, stream, per_thread, async);
}

CLI_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c)
{
    return memcpy2d(c, NULL, false, false);
}
CLI_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c)
{
    return memcpy2d(c, NULL, true, false);
}
CLI_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c)
{
    return memcpy2d(c, NULL, false, false);
}
CLI_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c)
{
    return memcpy2d(c, NULL, true, false);
}
CLI_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s)
{
    return memcpy2d(c, s, false, true);
}
CLI_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s)
{
    return memcpy2d(c, s, true, true);
}

static CUresult memcpy3d(const CUDA_MEMCPY3D *c, CUstream stream, bool per_thread, bool async)
{
    struct end2d s = {0}, d = {0};
    size_t depth = c && c->Depth ? c->Depth : 1, h = c && c->Height ? c->Height : 1;
    CUresult res;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->srcLOD != 0 || c->dstLOD != 0)
        return cli_unsupported("3D copies of mipmap levels");
    res = end_of(c->srcMemoryType, c->srcDevice, c->srcHost, c->srcArray, c->srcXInBytes, c->srcY,
                 c->srcZ, c->srcPitch ? c->srcPitch : c->WidthInBytes,
                 c->srcHeight ? c->srcHeight : h, &s);
    if (res == CUDA_SUCCESS)
        res = end_of(c->dstMemoryType, c->dstDevice, c->dstHost, c->dstArray, c->dstXInBytes,
                     c->dstY, c->dstZ, c->dstPitch ? c->dstPitch : c->WidthInBytes,
                     c->dstHeight ? c->dstHeight : h, &d);
    if (res != CUDA_SUCCESS)
        return res;
    /* One slice between host and device memory: a 2D copy (Z offsets are in the addresses). */
    if (depth == 1 && s.type != CU_MEMORYTYPE_ARRAY && d.type != CU_MEMORYTYPE_ARRAY)
        return copy_2d(&d, &s, c->WidthInBytes, h, stream, per_thread, async);
    return copy_3d(&d, &s, c->WidthInBytes, h, depth, stream, per_thread, async);
}

CLI_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c)
{
    return memcpy3d(c, NULL, false, false);
}
CLI_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c)
{
    return memcpy3d(c, NULL, true, false);
}
CLI_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s)
{
    return memcpy3d(c, s, false, true);
}
CLI_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s)
{
    return memcpy3d(c, s, true, true);
}
