/* JIT linking (cuLinkCreate / cuLinkAddData / cuLinkComplete) in the worker. The worker owns
 * the info and error log buffers; their text goes back with each reply and the client copies
 * it into the application's buffers, along with the wall time. The linked cubin is returned in
 * the reply of LINK_COMPLETE. */
#include <stdlib.h>
#include <string.h>

#include "server/session.h"

#define ARG(i) (call->msg->args[i])
#define LOG_LEN 16384
#define MAX_LINK_OPTS 16

/* The driver keeps the option arrays of cuLinkCreate and writes results (logs, the wall time
 * in the value slot of CU_JIT_WALL_TIME) into them later, so they live as long as the link. */
struct srv_link {
    CUlinkState state;
    CUjit_option opts[MAX_LINK_OPTS + 6];
    void *vals[MAX_LINK_OPTS + 6];
    unsigned wall; /* index of CU_JIT_WALL_TIME */
    char info[LOG_LEN], error[LOG_LEN];
};

void srv_link_free(struct srv_session *s, void *real)
{
    struct srv_link *l = real;

    s->drv.cuLinkDestroy(l->state);
    free(l);
}

/* [id, verbose]; data: (option, value) pairs of integer-valued options. */
static CUresult h_link_create(struct srv_session *s, struct srv_call *call)
{
    size_t npairs = call->msg->data.len / 16, n = 0;
    struct srv_link *l;
    CUresult res;

    if (PROTO_ID_TYPE(ARG(0)) != PROTO_H_LINK || npairs > MAX_LINK_OPTS ||
        call->msg->data.len % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUjit_option *opts = l->opts;
    void **vals = l->vals;
    for (size_t i = 0; i < npairs; i++, n++) {
        uint64_t pair[2];
        memcpy(pair, call->msg->data.data + 16 * i, 16);
        opts[n] = (CUjit_option)pair[0];
        vals[n] = (void *)(uintptr_t)pair[1];
    }
    l->wall = (unsigned)n;
    opts[n] = CU_JIT_WALL_TIME, vals[n++] = NULL;
    opts[n] = CU_JIT_INFO_LOG_BUFFER, vals[n++] = l->info;
    opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)LOG_LEN;
    opts[n] = CU_JIT_ERROR_LOG_BUFFER, vals[n++] = l->error;
    opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)LOG_LEN;
    opts[n] = CU_JIT_LOG_VERBOSE, vals[n++] = (void *)(uintptr_t)(ARG(1) != 0);
    res = s->drv.cuLinkCreate((unsigned)n, opts, vals, &l->state);
    if (res != CUDA_SUCCESS) {
        free(l);
        return res;
    }
    return srv_handle_adopt(s, ARG(0), PROTO_H_LINK, res, l);
}

/* The logs as reply data: info text, NUL, error text, NUL (in session scratch). */
static CUresult reply_logs(struct srv_session *s, struct srv_call *call, struct srv_link *l,
                           const void *head, size_t head_len)
{
    size_t ni = strnlen(l->info, LOG_LEN - 1), ne = strnlen(l->error, LOG_LEN - 1);
    uint8_t *buf = srv_scratch(s, head_len + ni + ne + 2);

    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(buf, head, head_len);
    memcpy(buf + head_len, l->info, ni);
    buf[head_len + ni] = 0;
    memcpy(buf + head_len + ni + 1, l->error, ne);
    buf[head_len + ni + 1 + ne] = 0;
    call->rdata = buf;
    call->rdata_len = head_len + ni + ne + 2;
    return CUDA_SUCCESS;
}

/* [link, CUjitInputType]; data: name, NUL, then the input -> data: logs. */
static CUresult h_link_add(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = srv_handle_get(s, ARG(0), PROTO_H_LINK);
    const ProtobufCBinaryData *d = &call->msg->data;
    const uint8_t *nul = d->len ? memchr(d->data, 0, d->len) : NULL;
    struct srv_link *l;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (nul == NULL || nul + 1 == d->data + d->len)
        return CUDA_ERROR_INVALID_VALUE;
    l = h->real;
    res = s->drv.cuLinkAddData(l->state, (CUjitInputType)ARG(1), (void *)(nul + 1),
                               d->data + d->len - nul - 1, (const char *)d->data, 0, NULL, NULL);
    reply_logs(s, call, l, NULL, 0);
    return res;
}

/* [link] -> out[cubin length, wall time float bits]; data: cubin, then the logs. */
static CUresult h_link_complete(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = srv_handle_get(s, ARG(0), PROTO_H_LINK);
    struct srv_link *l;
    void *cubin = NULL;
    size_t len = 0;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    l = h->real;
    res = s->drv.cuLinkComplete(l->state, &cubin, &len);
    if (res != CUDA_SUCCESS)
        len = 0;
    call->out[call->nout++] = len;
    call->out[call->nout++] = 0;
    memcpy(&call->out[1], &l->vals[l->wall], sizeof(float));
    reply_logs(s, call, l, cubin, len);
    return res;
}

static CUresult h_link_destroy(struct srv_session *s, struct srv_call *call)
{
    return srv_handle_destroy(s, ARG(0), PROTO_H_LINK);
}

const srv_handler_fn srv_link_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_LINK_CREATE] = h_link_create,
    [PROTO_OP_LINK_ADD_DATA] = h_link_add,
    [PROTO_OP_LINK_COMPLETE] = h_link_complete,
    [PROTO_OP_LINK_DESTROY] = h_link_destroy,
};
