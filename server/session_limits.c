/* What a session makes the worker hold beyond its allocations, charged or bounded
 * (server/session.h): device memory that context limits reserve. The limits component. */
#include <stdlib.h>

#include "common/array_grow.h"
#include "server/session.h"

/* The component's state: what each context's limits charge. */
struct limits_state {
    struct limit_charge {
        uint64_t ctx; /* wire id of the context */
        CUlimit limit;
        uint64_t bytes; /* charged to the quota */
    } * charges;
    size_t n, cap;
};

static struct limits_state *limits_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_LIMITS);
}

/* After the contexts: their charges went back with them (8c7997e: the table was not freed). */
static void limits_teardown(struct srv_session *s, void *state)
{
    struct limits_state *l = state;

    free(l->charges);
    l->charges = NULL;
    l->n = l->cap = 0;
}

const struct srv_component srv_limits_component = {
    .name = "limits", .state_size = sizeof(struct limits_state), .teardown = limits_teardown};

/* The client ordinal of the current context's device (0 when unknown). */
static int ctx_device(struct srv_session *s)
{
    uint64_t id = s->current_ctx, d = (id >> 4) - 1;
    struct srv_handle *h;

    if (id == PROTO_PRIMARY_CTX_ID(d) && d < (uint64_t)s->ndevices)
        return (int)d;
    h = srv_handle_get(s, id, PROTO_H_CTX);
    return h != NULL && h->size < (uint64_t)s->ndevices ? (int)h->size : 0;
}

/* Device memory the driver reserves for a limit's value: false when the limit reserves none
 * worth charging (or the product overflows: *bytes_p is then UINT64_MAX). */
static bool limit_bytes(struct srv_session *s, CUlimit limit, uint64_t value, uint64_t *bytes_p)
{
    int sms = 0, threads = 0;
    CUdevice dev = s->devices[ctx_device(s)];

    switch (limit) {
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
        *bytes_p = value;
        return true;
    case CU_LIMIT_STACK_SIZE: /* per thread, for every thread the device can hold at once */
        s->drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
        s->drv.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                    dev);
        if (sms <= 0 || threads <= 0)
            sms = threads = 1;
        *bytes_p = value > UINT64_MAX / ((uint64_t)sms * (uint64_t)threads)
                       ? UINT64_MAX
                       : value * (uint64_t)sms * (uint64_t)threads;
        return true;
    default:
        return false;
    }
}

static struct limit_charge *charge_of(struct srv_session *s, uint64_t ctx, CUlimit limit)
{
    struct limits_state *l = limits_of(s);

    for (size_t i = 0; i < l->n; i++)
        if (l->charges[i].ctx == ctx && l->charges[i].limit == limit)
            return &l->charges[i];
    if (!rg_array_grow((void **)&l->charges, &l->cap, l->n, sizeof(*l->charges), 8))
        return NULL;
    l->charges[l->n] = (struct limit_charge){ctx, limit, 0};
    return &l->charges[l->n++];
}

CUresult srv_ctx_set_limit(struct srv_session *s, CUlimit limit, uint64_t value)
{
    struct limit_charge *c;
    uint64_t bytes;
    CUresult res;

    if (!limit_bytes(s, limit, value, &bytes))
        return s->drv.cuCtxSetLimit(limit, value);
    if ((c = charge_of(s, s->current_ctx, limit)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* the new value replaces the old: only the growth must fit */
    if (bytes > c->bytes && !srv_quota_allows(s, bytes - c->bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = s->drv.cuCtxSetLimit(limit, value)) != CUDA_SUCCESS)
        return res;
    srv_quota_release(s, c->bytes);
    c->bytes = srv_quota_charge(s, bytes) ? bytes : 0; /* fits: checked above */
    return CUDA_SUCCESS;
}

void srv_ctx_limits_forget(struct srv_session *s, uint64_t ctx)
{
    struct limits_state *l = limits_of(s);

    for (size_t i = 0; i < l->n;) {
        if (l->charges[i].ctx != ctx) {
            i++;
            continue;
        }
        srv_quota_release(s, l->charges[i].bytes);
        l->charges[i] = l->charges[--l->n];
    }
}
