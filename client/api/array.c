/* CUDA arrays, texture objects and surface objects. Arrays live on the server; the application
 * holds a client object (a PROTO_H_IMAGE handle with the descriptor it was created with, so the
 * descriptor queries are answered here; a list of the live ones refuses a destroyed CUarray
 * without reading freed memory). A texture or surface object's value is the server's
 * real object, because kernels take it as a parameter: creation waits for it, and the client
 * keeps a record per object (its id for the destroy call, and the descriptors for the queries).
 * Mipmapped arrays are not supported. */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "client/api/api.h"
#include "common/array_grow.h"

struct cli_array {
    struct cli_handle h;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    const struct cli_ctx *ctx;
};

/* A texture or surface object: what the application gave, by its value. */
struct image_object {
    uint64_t value, id;
    bool surf, has_view;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
};

static pthread_mutex_t obj_lock = PTHREAD_MUTEX_INITIALIZER;
static struct image_object *objs;
static size_t nobjs, obj_cap;
/* Live arrays, so a destroyed CUarray is refused without touching freed memory. */
static struct cli_array **live;
static size_t nlive, live_cap;

/* Index of a live array in live[] (obj_lock held), or -1. */
static ssize_t live_index(CUarray array)
{
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == (struct cli_array *)array)
            return (ssize_t)i;
    return -1;
}

/* Copy out a live array's record (false if it is not one); remove it if asked. */
static bool array_get(CUarray array, bool remove, struct cli_array *copy)
{
    ssize_t i;

    pthread_mutex_lock(&obj_lock);
    i = live_index(array);
    if (i >= 0) {
        *copy = *live[i];
        if (remove)
            live[i] = live[--nlive];
    }
    pthread_mutex_unlock(&obj_lock);
    return i >= 0;
}

bool cli_array_id(CUarray array, uint64_t *id_p)
{
    struct cli_array a;

    if (!array_get(array, false, &a))
        return false;
    *id_p = a.h.id;
    return true;
}

struct cli_ctx *cli_array_ctx(CUarray array)
{
    struct cli_array a;

    return array_get(array, false, &a) ? (struct cli_ctx *)a.ctx : NULL;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct cli_call call = {CLI_ARGS(ARRAY_CREATE), .data = d, .data_len = sizeof(*d)};
    struct cli_array *a;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (out == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((a = calloc(1, sizeof(*a))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&a->h, PROTO_H_IMAGE);
    a->desc = *d;
    a->ctx = cli_ctx_current();
    call.a.ARRAY_CREATE.id = a->h.id;
    if ((res = cli_call_sync(&call)) != CUDA_SUCCESS) {
        free(a);
        return res;
    }
    pthread_mutex_lock(&obj_lock);
    bool recorded = rg_array_grow((void **)&live, &live_cap, nlive, sizeof(*live), 16);
    if (recorded)
        live[nlive++] = a;
    pthread_mutex_unlock(&obj_lock);
    if (!recorded) { /* created on the server but unknown here: undo it */
        cli_handle_destroy(&a->h, PROTO_OP_ARRAY_DESTROY, a->ctx);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    CUDA_ARRAY3D_DESCRIPTOR d3 = {0};

    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d3.Width = d->Width, d3.Height = d->Height, d3.Format = d->Format;
    d3.NumChannels = d->NumChannels;
    return array_create(out, &d3);
}

CLI_EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return array_create(out, d);
}

CLI_EXPORT CUresult cuArrayDestroy(CUarray array)
{
    struct cli_array a;

    if (!array_get(array, true, &a))
        return CUDA_ERROR_INVALID_HANDLE;
    return cli_handle_destroy((struct cli_handle *)array, PROTO_OP_ARRAY_DESTROY, a.ctx);
}

CLI_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray array)
{
    struct cli_array arr, *a = &arr;

    if (!array_get(array, false, &arr))
        return CUDA_ERROR_INVALID_HANDLE;
    if (d == NULL || a->desc.Depth != 0) /* a 3D or layered array has no 2D descriptor */
        return CUDA_ERROR_INVALID_VALUE;
    *d =
        (CUDA_ARRAY_DESCRIPTOR){a->desc.Width, a->desc.Height, a->desc.Format, a->desc.NumChannels};
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray array)
{
    struct cli_array arr, *a = &arr;

    if (!array_get(array, false, &arr))
        return CUDA_ERROR_INVALID_HANDLE;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *d = a->desc;
    return CUDA_SUCCESS;
}

/* ---- texture and surface objects ---- */

/* The resource as it travels (array handle zeroed) and the id of its array, 0 for none. */
static CUresult resource_wire(const CUDA_RESOURCE_DESC *r, CUDA_RESOURCE_DESC *wire,
                              uint64_t *array_id)
{
    *wire = *r;
    *array_id = 0;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        if (!cli_array_id(r->res.array.hArray, array_id))
            return CUDA_ERROR_INVALID_HANDLE;
        wire->res.array.hArray = NULL;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
    case CU_RESOURCE_TYPE_PITCH2D:
        return CUDA_SUCCESS; /* device addresses are the server's */
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        return cli_unsupported("mipmapped arrays");
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult object_record(const struct image_object *o)
{
    CUresult res = CUDA_SUCCESS;

    pthread_mutex_lock(&obj_lock);
    if (rg_array_grow((void **)&objs, &obj_cap, nobjs, sizeof(*objs), 16))
        objs[nobjs++] = *o;
    else
        res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&obj_lock);
    return res;
}

/* Copy out the record of an object (false if there is none); remove it if asked. */
static bool object_find(uint64_t value, bool surf, bool remove, struct image_object *o)
{
    bool found = false;

    pthread_mutex_lock(&obj_lock);
    for (size_t i = 0; i < nobjs && !found; i++)
        if (objs[i].value == value && objs[i].surf == surf) {
            *o = objs[i];
            if (remove)
                objs[i] = objs[--nobjs];
            found = true;
        }
    pthread_mutex_unlock(&obj_lock);
    return found;
}

static CUresult object_destroy_call(uint64_t id, bool surf)
{
    struct cli_call call = {
        CLI_ARGS_AS(surf ? PROTO_OP_SURF_OBJECT_DESTROY : PROTO_OP_TEX_OBJECT_DESTROY,
                    TEX_OBJECT_DESTROY, .id = id)};

    return cli_call_async(&call);
}

/* Create a texture (tex non-NULL) or surface object on the server and record it. */
static CUresult object_create(unsigned long long *out, const CUDA_RESOURCE_DESC *r,
                              const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view)
{
    struct image_object o = {.surf = tex == NULL, .has_view = view != NULL};
    uint8_t data[sizeof(o.res) + sizeof(o.tex) + sizeof(o.view)];
    struct cli_call call = {CLI_ARGS(TEX_OBJECT_CREATE), .data = data, .out = &o.value,
                            .out_cap = 1};
    struct cli_handle h;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (out == NULL || r == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = resource_wire(r, (CUDA_RESOURCE_DESC *)data, &call.a.TEX_OBJECT_CREATE.array)) !=
        CUDA_SUCCESS)
        return res;
    cli_handle_init(&h, PROTO_H_IMAGE);
    o.id = call.a.TEX_OBJECT_CREATE.id = h.id;
    o.res = *r;
    call.data_len = sizeof(o.res);
    if (tex != NULL) {
        o.tex = *tex;
        memcpy(data + call.data_len, tex, sizeof(*tex));
        call.data_len += sizeof(*tex);
    }
    if (view != NULL) {
        o.view = *view;
        memcpy(data + call.data_len, view, sizeof(*view));
        call.data_len += sizeof(*view);
    }
    if (o.surf) { /* SURF_OBJECT_CREATE [id, array] is TEX_OBJECT_CREATE's without has_view */
        call.op = PROTO_OP_SURF_OBJECT_CREATE;
        call.nargs = PROTO_NARGS_SURF_OBJECT_CREATE;
    }
    call.a.TEX_OBJECT_CREATE.has_view = view != NULL;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout < 1)
        res = CUDA_ERROR_UNKNOWN;
    if (res == CUDA_SUCCESS && (res = object_record(&o)) != CUDA_SUCCESS)
        object_destroy_call(o.id, o.surf);
    if (res == CUDA_SUCCESS)
        *out = o.value;
    return res;
}

static CUresult object_destroy(uint64_t value, bool surf)
{
    struct image_object o;

    if (!object_find(value, surf, true, &o))
        return CUDA_ERROR_INVALID_VALUE;
    return object_destroy_call(o.id, surf);
}

CLI_EXPORT CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r,
                                      const CUDA_TEXTURE_DESC *tex,
                                      const CUDA_RESOURCE_VIEW_DESC *view)
{
    if (tex == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return object_create(out, r, tex, view);
}

CLI_EXPORT CUresult cuTexObjectDestroy(CUtexObject t)
{
    return object_destroy(t, false);
}

CLI_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUtexObject t)
{
    struct image_object o;

    if (r == NULL || !object_find(t, false, false, &o))
        return CUDA_ERROR_INVALID_VALUE;
    *r = o.res;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *d, CUtexObject t)
{
    struct image_object o;

    if (d == NULL || !object_find(t, false, false, &o))
        return CUDA_ERROR_INVALID_VALUE;
    *d = o.tex;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *v, CUtexObject t)
{
    struct image_object o;

    if (v == NULL || !object_find(t, false, false, &o) || !o.has_view)
        return CUDA_ERROR_INVALID_VALUE;
    *v = o.view;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
    if (r != NULL && r->resType != CU_RESOURCE_TYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    return object_create(out, r, NULL, NULL);
}

CLI_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject s)
{
    return object_destroy(s, true);
}

CLI_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUsurfObject s)
{
    struct image_object o;

    if (r == NULL || !object_find(s, true, false, &o))
        return CUDA_ERROR_INVALID_VALUE;
    *r = o.res;
    return CUDA_SUCCESS;
}
