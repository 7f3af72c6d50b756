/* The fake driver's CUDA arrays, texture and surface objects, and 3D copies. An array is host
 * memory laid out row after row (Width * element bytes per row, Height rows per slice, Depth
 * slices or layers) with its descriptor; texture and surface objects are records of their
 * descriptors whose value is a slot number, as a real driver's are small opaque integers. The
 * fake kernels of tests/programs/textures.cu read and write arrays through these records. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define MAX_ARRAYS  256
#define MAX_OBJECTS 256

struct fk_array {
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t row, rows, slices; /* bytes per row, rows per slice, slices */
    uint8_t *data;
};

struct fk_object {
    bool live, surf;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
};

static pthread_mutex_t alock = PTHREAD_MUTEX_INITIALIZER;
static struct fk_array *arrays[MAX_ARRAYS];
static struct fk_object objects[MAX_OBJECTS];

static size_t elem_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

/* The live array behind a handle, or NULL (lock held). */
static struct fk_array *array_find(CUarray a)
{
    for (int i = 0; i < MAX_ARRAYS && a != NULL; i++)
        if (arrays[i] == (struct fk_array *)a)
            return arrays[i];
    return NULL;
}

CUresult cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct fk_array *a;
    size_t eb = d ? elem_bytes(d->Format) : 0;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

    if (!out || !d || eb == 0 || d->Width == 0 || d->NumChannels < 1 || d->NumChannels > 4 ||
        (d->Height == 0 && d->Depth != 0))
        return CUDA_ERROR_INVALID_VALUE;
    if ((d->Flags & CUDA_ARRAY3D_CUBEMAP) && (d->Width != d->Height || d->Depth % 6 != 0))
        return CUDA_ERROR_INVALID_VALUE;
    if ((a = calloc(1, sizeof(*a))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->d = *d;
    a->row = d->Width * eb * d->NumChannels;
    a->rows = d->Height ? d->Height : 1;
    a->slices = d->Depth ? d->Depth : 1;
    if ((a->data = calloc(a->slices * a->rows, a->row)) == NULL) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&alock);
    for (int i = 0; i < MAX_ARRAYS && res != CUDA_SUCCESS; i++)
        if (arrays[i] == NULL) {
            arrays[i] = a;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&alock);
    if (res != CUDA_SUCCESS) {
        free(a->data);
        free(a);
        return res;
    }
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray h)
{
    struct fk_array *a = NULL;

    pthread_mutex_lock(&alock);
    for (int i = 0; i < MAX_ARRAYS && h != NULL; i++)
        if (arrays[i] == (struct fk_array *)h) {
            a = arrays[i];
            arrays[i] = NULL;
        }
    pthread_mutex_unlock(&alock);
    if (a == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    free(a->data);
    free(a);
    return CUDA_SUCCESS;
}

/* One end of a copy: the first byte, the distance between rows and between slices, and for
 * arrays the bounds check. */
struct end3d {
    uint8_t *p;
    size_t pitch, slice;
    bool device;
};

static CUresult end_of(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t x,
                       size_t y, size_t z, size_t pitch, size_t height, const CUDA_MEMCPY3D *c,
                       struct end3d *e)
{
    struct fk_array *a;

    switch (t) {
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
        if (c->WidthInBytes > pitch || (c->Depth > 1 && c->Height > height))
            return CUDA_ERROR_INVALID_VALUE;
        e->pitch = pitch, e->slice = pitch * height, e->device = t == CU_MEMORYTYPE_DEVICE;
        e->p = (uint8_t *)(t == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev) + x +
               y * pitch + z * e->slice;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        pthread_mutex_lock(&alock);
        a = array_find(arr);
        pthread_mutex_unlock(&alock);
        if (a == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        if (x + c->WidthInBytes > a->row || y + c->Height > a->rows || z + c->Depth > a->slices)
            return CUDA_ERROR_INVALID_VALUE;
        e->pitch = a->row, e->slice = a->row * a->rows, e->device = false;
        e->p = a->data + x + y * a->row + z * e->slice;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuMemcpy3D(const CUDA_MEMCPY3D *c)
{
    struct end3d s, d;
    CUresult res;

    if (!c || c->srcLOD || c->dstLOD || c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    res = end_of(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY,
                 c->srcZ, c->srcPitch, c->srcHeight, c, &s);
    if (res == CUDA_SUCCESS)
        res = end_of(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes,
                     c->dstY, c->dstZ, c->dstPitch, c->dstHeight, c, &d);
    for (size_t z = 0; res == CUDA_SUCCESS && z < c->Depth; z++)
        for (size_t r = 0; r < c->Height; r++) {
            uint8_t *from = s.p + z * s.slice + r * s.pitch, *to = d.p + z * d.slice + r * d.pitch;
            if ((s.device && !fk_valid(from, c->WidthInBytes)) ||
                (d.device && !fk_valid(to, c->WidthInBytes)))
                return CUDA_ERROR_INVALID_VALUE;
            memmove(to, from, c->WidthInBytes);
        }
    return res;
}

CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D *c, CUstream s)
{
    return cuMemcpy3D(c);
}

/* ---- texture and surface objects ---- */

static CUresult object_create(unsigned long long *out, const CUDA_RESOURCE_DESC *r,
                              const CUDA_TEXTURE_DESC *t, bool surf)
{
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

    if (!out || !r || (!surf && !t))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&alock);
    if (r->resType == CU_RESOURCE_TYPE_ARRAY ? array_find(r->res.array.hArray) == NULL
        : r->resType == CU_RESOURCE_TYPE_LINEAR
            ? surf || !fk_valid((void *)(uintptr_t)r->res.linear.devPtr, r->res.linear.sizeInBytes)
        : r->resType == CU_RESOURCE_TYPE_PITCH2D
            ? surf || !fk_valid((void *)(uintptr_t)r->res.pitch2D.devPtr,
                                r->res.pitch2D.pitchInBytes * r->res.pitch2D.height)
            : true)
        res = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_OBJECTS && res == CUDA_ERROR_OUT_OF_MEMORY; i++)
        if (!objects[i].live) {
            objects[i] = (struct fk_object){.live = true, .surf = surf, .res = *r};
            if (t)
                objects[i].tex = *t;
            *out = (unsigned long long)i + 1;
            res = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&alock);
    return res;
}

static CUresult object_destroy(uint64_t v, bool surf)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    pthread_mutex_lock(&alock);
    if (v >= 1 && v <= MAX_OBJECTS && objects[v - 1].live && objects[v - 1].surf == surf) {
        objects[v - 1].live = false;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&alock);
    return res;
}

CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r,
                           const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
    return object_create(out, r, t, false);
}

CUresult cuTexObjectDestroy(CUtexObject o)
{
    return object_destroy(o, false);
}

CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
    if (r && r->resType != CU_RESOURCE_TYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    return object_create(out, r, NULL, true);
}

CUresult cuSurfObjectDestroy(CUsurfObject o)
{
    return object_destroy(o, true);
}

bool fk_image_of(unsigned long long v, bool surf, struct fk_image *im)
{
    struct fk_object *o = v >= 1 && v <= MAX_OBJECTS ? &objects[v - 1] : NULL;
    struct fk_array *a;
    bool ok = false;

    pthread_mutex_lock(&alock);
    if (o != NULL && o->live && o->surf == surf) {
        ok = true;
        if (o->res.resType == CU_RESOURCE_TYPE_ARRAY && (a = array_find(o->res.res.array.hArray))) {
            *im = (struct fk_image){a->data, a->row, a->rows, a->slices};
        } else if (o->res.resType == CU_RESOURCE_TYPE_LINEAR) {
            *im = (struct fk_image){(uint8_t *)(uintptr_t)o->res.res.linear.devPtr,
                                    o->res.res.linear.sizeInBytes, 1, 1};
        } else if (o->res.resType == CU_RESOURCE_TYPE_PITCH2D) {
            *im = (struct fk_image){(uint8_t *)(uintptr_t)o->res.res.pitch2D.devPtr,
                                    o->res.res.pitch2D.pitchInBytes, o->res.res.pitch2D.height, 1};
        } else {
            ok = false;
        }
    }
    pthread_mutex_unlock(&alock);
    return ok;
}
