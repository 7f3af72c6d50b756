/* Pitched copies (cuMemcpy2D*, and cuMemcpy3D* when the copy is one slice). Host rows are
 * packed here (no pitch on the wire) and unpacked from the reply; when the host pitch equals the
 * width the caller's memory is sent or filled as it is. CUDA arrays are not supported. */
#include <stdlib.h>
#include <string.h>

#include "client.h"

struct end2d {
    CUmemorytype type;
    CUdeviceptr dev; /* device: address of the first byte */
    uint8_t *host;   /* host: address of the first byte */
    size_t pitch;
};

static CUresult end_of(CUmemorytype type, CUdeviceptr dev, const void *host, size_t x, size_t y,
                       size_t pitch, struct end2d *e)
{
    if (type == CU_MEMORYTYPE_UNIFIED) {
        type = cli_dev_lookup(dev, NULL, NULL) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        host = (const void *)(uintptr_t)dev;
    }
    if (type == CU_MEMORYTYPE_ARRAY)
        return cli_unsupported("copies to or from CUDA arrays");
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    e->type = type;
    e->pitch = pitch;
    e->dev = dev + x + y * pitch;
    e->host = (uint8_t *)host + x + y * pitch;
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
    struct cli_call call = {.op = PROTO_OP_MEMCPY_2D, .nargs = 9,
                            .args = {0, d->dev, d->pitch, s->dev, s->pitch, w, h, 0, async}};
    uint8_t *packed = NULL;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (!cli_stream_id(stream, per_thread, &call.args[7]))
        return CUDA_ERROR_INVALID_HANDLE;
    if (w == 0 || h == 0)
        return CUDA_SUCCESS;
    if (s->type == CU_MEMORYTYPE_HOST && d->type == CU_MEMORYTYPE_HOST)
        return host_to_host(d, s, w, h);
    if (w > s->pitch || w > d->pitch)
        return CUDA_ERROR_INVALID_VALUE;
    call.args[0] = s->type == CU_MEMORYTYPE_HOST ? 0 : d->type == CU_MEMORYTYPE_HOST ? 1 : 2;
    if (call.args[0] == 2)
        return async ? cli_call_async(&call) : cli_call_sync(&call);
    bool direct = (call.args[0] == 0 ? s->pitch : d->pitch) == w;
    if (!direct && (packed = malloc(w * h)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (call.args[0] == 0) {
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

static CUresult memcpy2d(const CUDA_MEMCPY2D *c, CUstream stream, bool per_thread, bool async)
{
    struct end2d s = {0}, d = {0};
    CUresult res;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = end_of(c->srcMemoryType, c->srcDevice, c->srcHost, c->srcXInBytes, c->srcY,
                 c->srcPitch ? c->srcPitch : c->WidthInBytes, &s);
    if (res == CUDA_SUCCESS)
        res = end_of(c->dstMemoryType, c->dstDevice, c->dstHost, c->dstXInBytes, c->dstY,
                     c->dstPitch ? c->dstPitch : c->WidthInBytes, &d);
    return res == CUDA_SUCCESS
               ? copy_2d(&d, &s, c->WidthInBytes, c->Height, stream, per_thread, async)
               : res;
}

CLI_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return memcpy2d(c, NULL, false, false); }
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

/* A 3D copy of one slice (Depth 1, no Z offsets) is a 2D copy. */
static CUresult memcpy3d(const CUDA_MEMCPY3D *c, CUstream stream, bool per_thread, bool async)
{
    CUDA_MEMCPY2D c2;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->Depth > 1 || c->srcZ != 0 || c->dstZ != 0 || c->srcLOD != 0 || c->dstLOD != 0)
        return cli_unsupported("3D copies of more than one slice");
    c2 = (CUDA_MEMCPY2D){c->srcXInBytes, c->srcY, c->srcMemoryType, c->srcHost, c->srcDevice,
                         c->srcArray, c->srcPitch, c->dstXInBytes, c->dstY, c->dstMemoryType,
                         c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->WidthInBytes,
                         c->Height ? c->Height : 1};
    return memcpy2d(&c2, stream, per_thread, async);
}

CLI_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return memcpy3d(c, NULL, false, false); }
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
