/* Modules and libraries: loads (with the module cache), unloads, functions, kernels and
 * globals by name. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/module_cache.h"
#include "server/session.h"
#include "server/tenancy.h"

#define NAME_MAX_LEN 4096

/* Images come inline, as bulk, or from the module cache by hash (server/module_cache.c). */
CUresult srv_op_module_load(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    void *image;
    size_t len, before;
    CUmodule mod;
    CUresult res = srv_image_take(s, call, &image, &len);

    if (res != CUDA_SUCCESS)
        return res;
    before = srv_mem_free_now(s);
    res = s->drv.cuModuleLoadData(&mod, image);
    srv_image_release(s, call, image, len, res == CUDA_SUCCESS);
    res = srv_handle_adopt(s, a->id, PROTO_H_MODULE, res, mod);
    return res == CUDA_SUCCESS ? srv_load_charge(s, a->id, PROTO_H_MODULE, before) : res;
}

CUresult srv_op_library_load(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LIBRARY_LOAD *a = SRV_ARGS(call, LIBRARY_LOAD);
    size_t before = srv_mem_free_now(s);
    CUlibrary lib;
    CUresult res = srv_library_load(s, call, &lib); /* server/library_image.c */

    res = srv_handle_adopt(s, a->id, PROTO_H_LIBRARY, res, lib);
    return res == CUDA_SUCCESS ? srv_load_charge(s, a->id, PROTO_H_LIBRARY, before) : res;
}

CUresult srv_op_unload(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_UNLOAD *a = SRV_ARGS(call, MODULE_UNLOAD);
    unsigned type = call->msg->op == PROTO_OP_MODULE_UNLOAD ? PROTO_H_MODULE : PROTO_H_LIBRARY;

    return srv_handle_destroy(s, a->handle, type);
}

/* Call.data as a NUL-terminated name. */
static bool call_name(struct srv_call *call, char *buf)
{
    size_t len = call->msg->data.len;

    if (len == 0 || len >= NAME_MAX_LEN || memchr(call->msg->data.data, 0, len) != NULL)
        return false;
    memcpy(buf, call->msg->data.data, len);
    buf[len] = '\0';
    return true;
}

CUresult srv_op_get_by_name(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_GET_FUNCTION *a = SRV_ARGS(call, MODULE_GET_FUNCTION);
    char name[NAME_MAX_LEN];
    bool kernel = call->msg->op == PROTO_OP_LIBRARY_GET_KERNEL;
    void *owner = srv_handle_real(s, a->parent, kernel ? PROTO_H_LIBRARY : PROTO_H_MODULE);
    void *real;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!call_name(call, name))
        return CUDA_ERROR_INVALID_VALUE;
    res = kernel ? s->drv.cuLibraryGetKernel((CUkernel *)&real, owner, name)
                 : s->drv.cuModuleGetFunction((CUfunction *)&real, owner, name);
    if (res == CUDA_SUCCESS)
        res = srv_bind_new(s, a->id, kernel ? PROTO_H_KERNEL : PROTO_H_FUNCTION, real);
    return res;
}

CUresult srv_op_get_global(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_GET_GLOBAL *a = SRV_ARGS(call, MODULE_GET_GLOBAL);
    char name[NAME_MAX_LEN];
    bool lib = call->msg->op == PROTO_OP_LIBRARY_GET_GLOBAL;
    void *owner = srv_handle_real(s, a->parent, lib ? PROTO_H_LIBRARY : PROTO_H_MODULE);
    CUdeviceptr d;
    size_t size;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!call_name(call, name))
        return CUDA_ERROR_INVALID_VALUE;
    res = lib ? s->drv.cuLibraryGetGlobal(&d, &size, owner, name)
              : s->drv.cuModuleGetGlobal(&d, &size, owner, name);
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = d;
        call->out[call->nout++] = size;
    }
    return res;
}

CUresult srv_op_library_get_module(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LIBRARY_GET_MODULE *a = SRV_ARGS(call, LIBRARY_GET_MODULE);
    void *lib = srv_handle_real(s, a->library, PROTO_H_LIBRARY);
    CUmodule mod;
    CUresult res;

    if (lib == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuLibraryGetModule(&mod, lib);
    if (res == CUDA_SUCCESS)
        res = srv_bind_new(s, a->id, PROTO_H_MODULE, mod);
    /* Owned by the library: bound for lookups, never unloaded on its own. */
    if (res == CUDA_SUCCESS)
        srv_handle_get(s, a->id, PROTO_H_MODULE)->borrowed = true;
    return res;
}

CUresult srv_op_kernel_get_function(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_KERNEL_GET_FUNCTION *a = SRV_ARGS(call, KERNEL_GET_FUNCTION);
    void *kernel = srv_handle_real(s, a->kernel, PROTO_H_KERNEL);
    CUfunction f;
    CUresult res;

    if (kernel == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuKernelGetFunction(&f, kernel);
    return res == CUDA_SUCCESS ? srv_bind_new(s, a->id, PROTO_H_FUNCTION, f) : res;
}

/* Modules, then libraries (their kernels' work is gone with the streams). */
static void modules_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_MODULE);
    srv_handles_destroy_all(s, PROTO_H_LIBRARY);
}

const struct srv_component srv_modules_component = {.name = "modules",
                                                    .teardown = modules_teardown};
