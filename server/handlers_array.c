/* CUDA arrays, texture and surface objects, and copies with array, layered or multi-slice
 * endpoints (MEMCPY_3D). The three kinds of object share the PROTO_H_IMAGE handle type; each
 * handle's real pointer is a struct srv_image that says which it is. Arrays count against the
 * session's quota (their nominal size) from creation to destruction. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/session.h"

enum image_kind { IMAGE_ARRAY, IMAGE_TEX, IMAGE_SURF };

struct srv_image {
    enum image_kind kind;
    CUarray array;
    uint64_t object; /* CUtexObject or CUsurfObject */
    uint64_t bytes;  /* arrays: charged to the quota */
};

static struct srv_image *image_get(struct srv_session *s, uint64_t id, enum image_kind kind)
{
    struct srv_handle *h = srv_handle_get(s, id, PROTO_H_IMAGE);
    struct srv_image *im = h ? h->real : NULL;

    return im != NULL && im->kind == kind ? im : NULL;
}

CUresult srv_array_object_destroy(struct srv_session *s, void *real)
{
    struct srv_image *im = real;
    CUresult res;

    switch (im->kind) {
    case IMAGE_ARRAY:
        res = s->drv.cuArrayDestroy(im->array);
        break;
    case IMAGE_TEX:
        res = s->drv.cuTexObjectDestroy(im->object);
        break;
    default:
        res = s->drv.cuSurfObjectDestroy(im->object);
        break;
    }
    free(im);
    return res;
}

/* Texture and surface objects first (they name arrays), then the arrays; before streams and
 * contexts. */
static void arrays_teardown(struct srv_session *s, void *state)
{
    unsigned done[2] = {0, 0};

    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < s->handle_cap; i++) {
            struct srv_handle *h = &s->handles[i];
            struct srv_image *im = h->id && PROTO_ID_TYPE(h->id) == PROTO_H_IMAGE ? h->real : NULL;
            if (im == NULL || (im->kind == IMAGE_ARRAY) != (pass == 1))
                continue;
            done[pass] += srv_array_object_destroy(s, im) == CUDA_SUCCESS;
            h->real = NULL;
            h->borrowed = true; /* gone: the generic teardown must not touch it again */
        }
    if (done[0] + done[1] != 0)
        rg_info("session %llu: destroyed %u texture/surface object(s) and %u array(s)",
                (unsigned long long)s->id, done[0], done[1]);
}

const struct srv_component srv_arrays_component = {.name = "arrays", .teardown = arrays_teardown};

/* Bytes of one element of an array format (a quota estimate for the formats not listed). */
static unsigned format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

static rg_status_t image_put(struct srv_session *s, uint64_t id, struct srv_image *im)
{
    if (srv_handle_put(s, id, im) == RG_OK)
        return RG_OK;
    srv_array_object_destroy(s, im);
    return RG_ERR_INVALID;
}

/* [id]  data: CUDA_ARRAY3D_DESCRIPTOR */
CUresult srv_op_array_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_ARRAY_CREATE *a = SRV_ARGS(call, ARRAY_CREATE);
    CUDA_ARRAY3D_DESCRIPTOR d;
    struct srv_image *im;
    uint64_t bytes;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_IMAGE || call->msg->data.len != sizeof(d))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&d, call->msg->data.data, sizeof(d));
    if (d.Width == 0 || d.Width > (1u << 20) || d.Height > (1u << 20) || d.Depth > (1u << 20) ||
        d.NumChannels == 0 || d.NumChannels > 4 ||
        __builtin_mul_overflow((uint64_t)d.Width * format_bytes(d.Format) * d.NumChannels,
                               (uint64_t)(d.Height ? d.Height : 1) * (d.Depth ? d.Depth : 1),
                               &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    if ((im = calloc(1, sizeof(*im))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!srv_quota_charge(s, bytes)) {
        free(im);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res = s->drv.cuArray3DCreate(&im->array, &d);
    if (res != CUDA_SUCCESS) {
        srv_quota_release(s, bytes);
        free(im);
        return res;
    }
    im->kind = IMAGE_ARRAY;
    im->bytes = bytes;
    if (image_put(s, a->id, im) != RG_OK) {
        srv_quota_release(s, bytes);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return CUDA_SUCCESS;
}

static CUresult image_destroy(struct srv_session *s, uint64_t id, enum image_kind kind)
{
    struct srv_image *im = image_get(s, id, kind);

    if (im == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    srv_quota_release(s, im->bytes);
    srv_handle_del(s, id);
    return srv_array_object_destroy(s, im);
}

CUresult srv_op_array_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_ARRAY_DESTROY *a = SRV_ARGS(call, ARRAY_DESTROY);
    return image_destroy(s, a->handle, IMAGE_ARRAY);
}

CUresult srv_op_tex_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_TEX_OBJECT_DESTROY *a = SRV_ARGS(call, TEX_OBJECT_DESTROY);
    return image_destroy(s, a->id, IMAGE_TEX);
}

CUresult srv_op_surf_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SURF_OBJECT_DESTROY *a = SRV_ARGS(call, SURF_OBJECT_DESTROY);
    return image_destroy(s, a->id, IMAGE_SURF);
}

/* The resource descriptor at the head of the call's data with its array (args[1]) resolved. */
static CUresult resource_of(struct srv_session *s, struct srv_call *call, CUDA_RESOURCE_DESC *r)
{
    const struct proto_args_TEX_OBJECT_CREATE *a = SRV_ARGS(call, TEX_OBJECT_CREATE);
    struct srv_image *arr = NULL;

    memcpy(r, call->msg->data.data, sizeof(*r));
    if (r->resType == CU_RESOURCE_TYPE_ARRAY) {
        if ((arr = image_get(s, a->array, IMAGE_ARRAY)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        r->res.array.hArray = arr->array;
        return CUDA_SUCCESS;
    }
    /* linear and pitch2D resources name device addresses, which pass through */
    return a->array == 0 &&
                   (r->resType == CU_RESOURCE_TYPE_LINEAR || r->resType == CU_RESOURCE_TYPE_PITCH2D)
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

static CUresult object_bind(struct srv_session *s, struct srv_call *call, enum image_kind kind,
                            uint64_t object)
{
    const struct proto_args_TEX_OBJECT_CREATE *a = SRV_ARGS(call, TEX_OBJECT_CREATE);
    struct srv_image *im = calloc(1, sizeof(*im));

    if (im == NULL) {
        if (kind == IMAGE_TEX)
            s->drv.cuTexObjectDestroy(object);
        else
            s->drv.cuSurfObjectDestroy(object);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *im = (struct srv_image){.kind = kind, .object = object};
    if (image_put(s, a->id, im) != RG_OK)
        return CUDA_ERROR_INVALID_HANDLE;
    call->out[call->nout++] = object;
    return CUDA_SUCCESS;
}

/* [id, array id or 0, has view] -> out[object]  data: resource, texture [, view] */
CUresult srv_op_tex_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_TEX_OBJECT_CREATE *a = SRV_ARGS(call, TEX_OBJECT_CREATE);
    size_t want = sizeof(CUDA_RESOURCE_DESC) + sizeof(CUDA_TEXTURE_DESC) +
                  (a->has_view ? sizeof(CUDA_RESOURCE_VIEW_DESC) : 0);
    CUDA_RESOURCE_DESC r;
    CUDA_TEXTURE_DESC t;
    CUDA_RESOURCE_VIEW_DESC v;
    CUtexObject obj;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_IMAGE || call->msg->data.len != want)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = resource_of(s, call, &r)) != CUDA_SUCCESS)
        return res;
    memcpy(&t, call->msg->data.data + sizeof(r), sizeof(t));
    if (a->has_view)
        memcpy(&v, call->msg->data.data + sizeof(r) + sizeof(t), sizeof(v));
    res = s->drv.cuTexObjectCreate(&obj, &r, &t, a->has_view ? &v : NULL);
    return res == CUDA_SUCCESS ? object_bind(s, call, IMAGE_TEX, obj) : res;
}

/* [id, array id] -> out[object]  data: resource */
CUresult srv_op_surf_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SURF_OBJECT_CREATE *a = SRV_ARGS(call, SURF_OBJECT_CREATE);
    CUDA_RESOURCE_DESC r;
    CUsurfObject obj;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_IMAGE || call->msg->data.len != sizeof(r))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = resource_of(s, call, &r)) != CUDA_SUCCESS)
        return res;
    res = s->drv.cuSurfObjectCreate(&obj, &r);
    return res == CUDA_SUCCESS ? object_bind(s, call, IMAGE_SURF, obj) : res;
}

/* ---- MEMCPY_3D ---- */

/* One end of a 3D copy from its five wire values; a host end points into buf. */
static CUresult end_of(struct srv_session *s, const uint64_t *a, void *buf, size_t w, size_t h,
                       bool src, CUDA_MEMCPY3D *c)
{
    struct srv_image *arr = NULL;
    CUmemorytype type = a[0] == 0   ? CU_MEMORYTYPE_HOST
                        : a[0] == 1 ? CU_MEMORYTYPE_DEVICE
                                    : CU_MEMORYTYPE_ARRAY;

    if (a[0] > 2)
        return CUDA_ERROR_INVALID_VALUE;
    if (a[0] == 2 && (arr = image_get(s, a[1], IMAGE_ARRAY)) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
#define END_SET(p)                                                                                 \
    c->p##MemoryType = type;                                                                       \
    if (a[0] == 0)                                                                                 \
        c->p##Host = buf, c->p##Pitch = w, c->p##Height = h;                                       \
    else if (a[0] == 1)                                                                            \
        c->p##Device = a[1], c->p##Pitch = a[2], c->p##Height = a[3];                              \
    else                                                                                           \
        c->p##Array = arr->array, c->p##XInBytes = a[2], c->p##Y = a[3], c->p##Z = a[4];
    if (src) {
        END_SET(src)
    } else {
        END_SET(dst)
    }
#undef END_SET
    return CUDA_SUCCESS;
}

/* A 3D copy with a host end moves in slabs of at most SLAB3D bytes of host rows (whole slices,
 * rows of one slice, or pieces of a row wider than a slab), as 2D copies do
 * (handlers_memcpy_2d.c); the worker held the whole copy before, up to 4 GiB. */
#define SLAB3D (16u << 20)

struct piece3d {
    size_t z, depth, y, rows, x, width;
    bool started;
};

/* The next piece after p: whole slices while a slice fits in a slab, else rows of one slice,
 * else pieces of one row. False past the last slice. */
static bool next_piece3d(struct piece3d *p, size_t w, size_t h, size_t d)
{
    if (!p->started) {
        *p = (struct piece3d){.started = true};
    } else if (p->x + p->width < w) {
        p->x += p->width;
    } else {
        p->x = 0, p->y += p->rows;
        if (p->y >= h)
            p->y = 0, p->z += p->depth;
    }
    if (p->z >= d)
        return false;
    p->width = w - p->x < SLAB3D ? w - p->x : SLAB3D;
    p->rows = w > SLAB3D ? 1 : (SLAB3D / w < h - p->y ? SLAB3D / w : h - p->y);
    p->depth = 1;
    if (p->y == 0 && p->rows == h && SLAB3D / (w * h) > 1) /* whole slices */
        p->depth = SLAB3D / (w * h) < d - p->z ? SLAB3D / (w * h) : d - p->z;
    return true;
}

/* Copy one piece between host rows at host (packed, width p->width) and the other end of c. */
static CUresult copy_piece3d(struct srv_session *s, const CUDA_MEMCPY3D *c, const struct piece3d *p,
                             const void *host, CUstream st, bool async)
{
    CUDA_MEMCPY3D k = *c;
    CUresult res;

    k.WidthInBytes = p->width, k.Height = p->rows, k.Depth = p->depth;
    if (c->srcMemoryType == CU_MEMORYTYPE_HOST) {
        k.srcHost = host, k.srcPitch = p->width, k.srcHeight = p->rows;
        k.dstXInBytes += p->x, k.dstY += p->y, k.dstZ += p->z;
    } else {
        k.dstHost = (void *)host, k.dstPitch = p->width, k.dstHeight = p->rows;
        k.srcXInBytes += p->x, k.srcY += p->y, k.srcZ += p->z;
    }
    res = async ? s->drv.cuMemcpy3DAsync(&k, st) : s->drv.cuMemcpy3D(&k);
    return res == CUDA_SUCCESS && async ? s->drv.cuStreamSynchronize(st) : res; /* buf reused */
}

/* Host rows in: from the call's data in place, or from its bulk slab by slab. */
static CUresult copy_3d_up(struct srv_session *s, struct srv_call *call, const CUDA_MEMCPY3D *c,
                           size_t len, CUstream st)
{
    size_t w = c->WidthInBytes, h = c->Height, got = 0;
    struct piece3d p = {0};
    CUresult res = CUDA_SUCCESS;
    uint8_t *buf;

    if (call->hdr->bulk_len == 0) {
        if (call->msg->data.len != len)
            return CUDA_ERROR_INVALID_VALUE;
        while (res == CUDA_SUCCESS && next_piece3d(&p, w, h, c->Depth))
            res = copy_piece3d(s, c, &p, call->msg->data.data + (p.z * h + p.y) * w + p.x, st,
                               SRV_ARGS(call, MEMCPY_3D)->async);
        return res;
    }
    if (call->hdr->bulk_len != len)
        return CUDA_ERROR_INVALID_VALUE;
    if ((buf = srv_scratch(s, len < SLAB3D ? len : SLAB3D)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call->bulk_taken = true;
    while (next_piece3d(&p, w, h, c->Depth)) {
        if (transport_recv(s->conn, buf, p.depth * p.rows * p.width) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        got += p.depth * p.rows * p.width;
        if (res == CUDA_SUCCESS) /* after an error the rest is still read: framing holds */
            res = copy_piece3d(s, c, &p, buf, st, SRV_ARGS(call, MEMCPY_3D)->async);
    }
    return got == len ? res : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* Host rows out: the reply's bulk, streamed slab by slab after the first one is copied. */
static CUresult copy_3d_down(struct srv_session *s, struct srv_call *call, const CUDA_MEMCPY3D *c,
                             size_t len, CUstream st)
{
    struct piece3d p = {0};
    uint8_t *buf = srv_scratch(s, len < SLAB3D ? len : SLAB3D);
    CUresult res;

    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    next_piece3d(&p, c->WidthInBytes, c->Height, c->Depth);
    if ((res = copy_piece3d(s, c, &p, buf, st, SRV_ARGS(call, MEMCPY_3D)->async)) != CUDA_SUCCESS)
        return res;
    if (len <= SLAB3D) /* one piece: an ordinary reply */
        return srv_reply_bulk(s, call, buf, len);
    if ((res = srv_reply_bulk(s, call, NULL, len)) != CUDA_SUCCESS)
        return res;
    for (;;) {
        struct iovec iov = {buf, p.depth * p.rows * p.width};
        if (transport_sendv(s->conn, &iov, 1) != RG_OK)
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        if (!next_piece3d(&p, c->WidthInBytes, c->Height, c->Depth))
            break;
        if (res == CUDA_SUCCESS)
            res = copy_piece3d(s, c, &p, buf, st, SRV_ARGS(call, MEMCPY_3D)->async);
        if (res != CUDA_SUCCESS) /* framing holds; the error stays sticky */
            memset(buf, 0, p.depth * p.rows * p.width);
    }
    return CUDA_SUCCESS;
}

/* [skind, s0..s3, dkind, d0..d3, width, height, depth, stream, async] */
CUresult srv_op_memcpy_3d(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_3D *a = SRV_ARGS(call, MEMCPY_3D);
    CUDA_MEMCPY3D c = {.WidthInBytes = a->width, .Height = a->height, .Depth = a->depth};
    bool up = a->src[0] == 0, down = a->dst[0] == 0;
    uint64_t len = 0;
    CUstream st;
    CUresult res;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((up && down) || a->width == 0 || a->height == 0 || a->depth == 0 ||
        __builtin_mul_overflow(a->width, a->height, &len) ||
        __builtin_mul_overflow(len, a->depth, &len))
        return CUDA_ERROR_INVALID_VALUE;
    if ((up || down) && len > (4ull << 30))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = end_of(s, a->src, NULL, a->width, a->height, true, &c)) != CUDA_SUCCESS ||
        (res = end_of(s, a->dst, NULL, a->width, a->height, false, &c)) != CUDA_SUCCESS)
        return res;
    if (up)
        return copy_3d_up(s, call, &c, len, st);
    if (down)
        return copy_3d_down(s, call, &c, len, st);
    return a->async ? s->drv.cuMemcpy3DAsync(&c, st) : s->drv.cuMemcpy3D(&c);
}
