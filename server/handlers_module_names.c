/* The names of a module's functions (cuModuleEnumerateFunctions + cuFuncGetName), for the
 * client's tools-module export table: libraries such as cuFFT walk a module's functions
 * through it instead of naming them. */
#include <string.h>

#include "server/session.h"

#define MAX_FUNCS 4096

/* [module] -> data: the names, each followed by NUL */
CUresult srv_op_module_function_names(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_FUNCTION_NAMES *a = SRV_ARGS(call, MODULE_FUNCTION_NAMES);
    struct srv_handle *m = srv_handle_get(s, a->module, PROTO_H_MODULE);
    unsigned n = 0;
    size_t len = 0, cap = 1 << 16;
    CUfunction *fs;
    char *names;
    CUresult res;

    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = s->drv.cuModuleGetFunctionCount(&n, m->real)) != CUDA_SUCCESS)
        return res;
    if (n > MAX_FUNCS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((fs = srv_scratch(s, n * sizeof(*fs) + cap)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    names = (char *)(fs + n);
    if (n > 0 && (res = s->drv.cuModuleEnumerateFunctions(fs, n, m->real)) != CUDA_SUCCESS)
        return res;
    for (unsigned i = 0; i < n; i++) {
        const char *name = NULL;
        size_t l;
        if ((res = s->drv.cuFuncGetName(&name, fs[i])) != CUDA_SUCCESS)
            return res;
        if ((l = strlen(name) + 1) > cap - len)
            return CUDA_ERROR_NOT_SUPPORTED; /* more than 64 KiB of names */
        memcpy(names + len, name, l);
        len += l;
    }
    call->rdata = names;
    call->rdata_len = len;
    return CUDA_SUCCESS;
}
