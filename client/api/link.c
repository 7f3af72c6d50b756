/* JIT linking runs in the worker (cuLinkCreate / AddData / AddFile / Complete / Destroy). As
 * the driver does, the link keeps the application's option arrays and writes into them: the
 * info and error logs into its buffers after each step, the wall time into its value slot. The
 * linked cubin is held here until cuLinkDestroy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/api/jit.h"

struct cli_link {
    struct cli_handle h;
    unsigned nopts;
    CUjit_option *opts;
    void **vals;
    struct cli_jit jit; /* the log buffers, as given at cuLinkCreate */
    void *cubin;
};

CLI_EXPORT CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *opts, void **vals,
                                    CUlinkState *state)
{
    struct cli_link *l;
    struct cli_call call = {CLI_ARGS(LINK_CREATE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = cli_jit_read(n, opts, vals, 16, &l->jit)) != CUDA_SUCCESS) {
        free(l);
        return res;
    }
    cli_handle_init(&l->h, PROTO_H_LINK);
    l->nopts = n, l->opts = opts, l->vals = vals;
    call.a.LINK_CREATE.id = l->h.id;
    call.a.LINK_CREATE.info_cap = l->jit.info_cap;
    call.a.LINK_CREATE.error_cap = l->jit.error_cap;
    call.data = l->jit.words;
    call.data_len = 8 * l->jit.nwords;
    if ((res = cli_call_sync(&call)) != CUDA_SUCCESS) {
        free(l);
        return res;
    }
    *state = (CUlinkState)l;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data,
                                     size_t size, const char *name, unsigned int n,
                                     CUjit_option *opts, void **vals)
{
    struct cli_link *l = cli_handle_check(state, PROTO_H_LINK);
    const size_t logs_cap = l != NULL ? l->jit.info_cap + l->jit.error_cap + 2 : 0;
    const char *nm = name != NULL ? name : "";
    size_t nlen = strlen(nm) + 1;
    struct cli_call call = {CLI_ARGS(LINK_ADD_DATA)};
    uint8_t *buf;
    char *logs;
    CUresult res;

    if (l == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (data == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((buf = malloc(nlen + size)) == NULL || (logs = malloc(logs_cap)) == NULL) {
        free(buf);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(buf, nm, nlen);
    memcpy(buf + nlen, data, size);
    call.a.LINK_ADD_DATA.link = l->h.id;
    call.a.LINK_ADD_DATA.input_type = type;
    call.data = buf;
    call.data_len = nlen + size;
    call.rdata = logs;
    call.rdata_cap = logs_cap;
    res = cli_call_sync(&call);
    if (res != CUDA_ERROR_DEVICE_UNAVAILABLE)
        cli_jit_logs_out(&l->jit, logs, call.rdata_len);
    free(buf);
    free(logs);
    return res;
}

CLI_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                     unsigned int n, CUjit_option *opts, void **vals)
{
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    long len;
    void *data = NULL;
    CUresult res = CUDA_ERROR_FILE_NOT_FOUND;

    if (f == NULL)
        return path == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_FILE_NOT_FOUND;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = malloc((size_t)len)) != NULL && fread(data, 1, (size_t)len, f) == (size_t)len)
        res = cuLinkAddData_v2(state, type, data, (size_t)len, path, n, opts, vals);
    fclose(f);
    free(data);
    return res;
}

CLI_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubin, size_t *size)
{
    struct cli_link *l = cli_handle_check(state, PROTO_H_LINK);
    uint64_t out[2] = {0, 0};
    struct cli_call call = {CLI_ARGS(LINK_COMPLETE), .out = out, .out_cap = 2};
    size_t cap = 64u << 20;
    uint8_t *buf;
    CUresult res;

    if (l == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (cubin == NULL || size == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((buf = malloc(cap)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.LINK_COMPLETE.link = l->h.id;
    call.rdata = buf;
    call.rdata_cap = cap;
    res = cli_call_sync(&call);
    if (res == CUDA_ERROR_DEVICE_UNAVAILABLE || out[0] > call.rdata_len) {
        free(buf);
        return res == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : res;
    }
    cli_jit_logs_out(&l->jit, (char *)buf + out[0], call.rdata_len - out[0]);
    for (unsigned i = 0; i < l->nopts; i++)
        if (l->opts[i] == CU_JIT_WALL_TIME)
            memcpy(&l->vals[i], &out[1], sizeof(float));
    free(l->cubin);
    l->cubin = res == CUDA_SUCCESS ? realloc(buf, out[0] ? out[0] : 1) : NULL;
    if (res != CUDA_SUCCESS)
        free(buf);
    if (res == CUDA_SUCCESS && l->cubin == NULL) {
        free(buf);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *cubin = l->cubin;
    *size = res == CUDA_SUCCESS ? (size_t)out[0] : 0;
    return res;
}

CLI_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
    struct cli_link *l = cli_handle_check(state, PROTO_H_LINK);
    struct cli_call call = {CLI_ARGS(LINK_DESTROY)};
    CUresult res;

    if (l == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.LINK_DESTROY.link = l->h.id;
    res = cli_call_async(&call);
    free(l->cubin);
    cli_handle_kill(&l->h);
    free(l);
    return res;
}
