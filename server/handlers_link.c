/* JIT in the worker: linking (cuLinkCreate / cuLinkAddData / cuLinkComplete) and module or
 * library loads with JIT options (cuModuleLoadDataEx, cuLibraryLoadData). The worker owns the
 * info and error log buffers (server/jit_options.h); their text goes back with each reply and
 * the client copies it into the application's buffers, along with the wall time. The linked
 * cubin is returned in the reply of LINK_COMPLETE. */
#include <stdlib.h>
#include <string.h>

#include "server/jit_options.h"
#include "server/module_cache.h"

/* The driver keeps the option arrays of cuLinkCreate and writes results (logs, the wall time)
 * into them later, so they live as long as the link. */
struct srv_link {
    CUlinkState state;
    struct srv_jit jit;
};

void srv_link_free(struct srv_session *s, void *real)
{
    struct srv_link *l = real;

    s->drv.cuLinkDestroy(l->state);
    srv_jit_fini(&l->jit);
    free(l);
}

/* [id, info log cap, error log cap]; data: JIT option words. */
CUresult srv_op_link_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LINK_CREATE *a = SRV_ARGS(call, LINK_CREATE);
    struct srv_link *l;
    CUresult res;

    if (call->msg->n_args < 3 || PROTO_ID_TYPE(a->id) != PROTO_H_LINK ||
        call->msg->data.len % 8 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t words[SRV_JIT_MAX_WORDS];
    size_t nwords = call->msg->data.len / 8;
    if (nwords <= SRV_JIT_MAX_WORDS && nwords > 0)
        memcpy(words, call->msg->data.data, 8 * nwords);
    res = srv_jit_init(&l->jit, words, nwords, a->info_cap, a->error_cap);
    if (res == CUDA_SUCCESS)
        res = s->drv.cuLinkCreate(l->jit.n, l->jit.opts, l->jit.vals, &l->state);
    if (res != CUDA_SUCCESS) {
        srv_jit_fini(&l->jit);
        free(l);
        return res;
    }
    return srv_handle_adopt(s, a->id, PROTO_H_LINK, res, l);
}

/* [link, CUjitInputType]; data: name, NUL, then the input -> data: logs. */
CUresult srv_op_link_add(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LINK_ADD_DATA *a = SRV_ARGS(call, LINK_ADD_DATA);
    struct srv_handle *h = srv_handle_get(s, a->link, PROTO_H_LINK);
    const ProtobufCBinaryData *d = &call->msg->data;
    const uint8_t *nul = d->len ? memchr(d->data, 0, d->len) : NULL;
    struct srv_link *l;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (nul == NULL || nul + 1 == d->data + d->len)
        return CUDA_ERROR_INVALID_VALUE;
    l = h->real;
    res = s->drv.cuLinkAddData(l->state, (CUjitInputType)a->input_type, (void *)(nul + 1),
                               d->data + d->len - nul - 1, (const char *)d->data, 0, NULL, NULL);
    srv_jit_logs_reply(s, call, &l->jit, NULL, 0);
    return res;
}

/* [link] -> out[cubin length, wall time float bits]; data: cubin, then the logs. */
CUresult srv_op_link_complete(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LINK_COMPLETE *a = SRV_ARGS(call, LINK_COMPLETE);
    struct srv_handle *h = srv_handle_get(s, a->link, PROTO_H_LINK);
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
    call->out[call->nout++] = srv_jit_wall_bits(&l->jit);
    srv_jit_logs_reply(s, call, &l->jit, cubin, len);
    return res;
}

CUresult srv_op_link_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LINK_DESTROY *a = SRV_ARGS(call, LINK_DESTROY);
    return srv_handle_destroy(s, a->link, PROTO_H_LINK);
}

/* ---- loads with JIT options ------------------------------------------------------------- */

/* The loaded image with the JIT arrays; the new module or library bound to id. */
static CUresult load_with(struct srv_session *s, struct srv_call *call, struct srv_jit *j,
                          const void *image)
{
    const struct proto_args_MODULE_LOAD_JIT *a = SRV_ARGS(call, MODULE_LOAD_JIT);
    bool lib = call->msg->op == PROTO_OP_LIBRARY_LOAD_JIT;
    unsigned type = lib ? PROTO_H_LIBRARY : PROTO_H_MODULE;
    size_t before = srv_mem_free_now(s);
    void *obj = NULL;
    CUresult res;

    if (lib)
        res = s->drv.cuLibraryLoadData((CUlibrary *)&obj, image, j->opts, j->vals, j->n, NULL, NULL,
                                       0);
    else
        res = s->drv.cuModuleLoadDataEx((CUmodule *)&obj, image, j->n, j->opts, j->vals);
    res = srv_handle_adopt(s, a->id, type, res, obj);
    return res == CUDA_SUCCESS ? srv_load_charge(s, a->id, type, before) : res;
}

/* [id, image flags, image len, info cap, error cap, option words...]; the image as for
 * MODULE_LOAD -> out[wall bits, info size, error size], data: the logs. */
CUresult srv_op_load_jit(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_LOAD_JIT *a = SRV_ARGS(call, MODULE_LOAD_JIT);
    struct srv_jit j;
    void *image;
    size_t len;
    CUresult res;

    if (call->msg->n_args < 5)
        return CUDA_ERROR_INVALID_VALUE;
    res = srv_jit_init(&j, SRV_ARGS_REST(call, MODULE_LOAD_JIT), call->msg->n_args - 5, a->info_cap,
                       a->error_cap);
    if (res != CUDA_SUCCESS)
        return res;
    if ((res = srv_image_take(s, call, &image, &len)) != CUDA_SUCCESS) {
        srv_jit_fini(&j);
        return res; /* PROTO_RESULT_NOT_CACHED: the client sends the bytes, nothing ran */
    }
    res = load_with(s, call, &j, image);
    srv_image_release(s, call, image, len, res == CUDA_SUCCESS);
    call->out[call->nout++] = srv_jit_wall_bits(&j);
    call->out[call->nout++] = j.info_cap ? (uintptr_t)j.vals[j.info_size] : 0;
    call->out[call->nout++] = j.error_cap ? (uintptr_t)j.vals[j.error_size] : 0;
    srv_jit_logs_reply(s, call, &j, NULL, 0);
    srv_jit_fini(&j);
    return res;
}

static void links_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_LINK);
}

const struct srv_component srv_links_component = {.name = "links", .teardown = links_teardown};
