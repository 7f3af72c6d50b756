/* The session's quota and allocation table (server/quota.h): the only writer of mem_used. */
#include "server/quota.h"

#include <stdlib.h>

#include "common/array_grow.h"
#include "scheduler/admission.h"
#include "server/session.h"

/* The memory component's state: the allocation table. */
struct memory_state {
    struct srv_alloc *allocs;
    size_t n, cap;
    size_t freed;         /* allocations freed at the session's end */
    uint64_t freed_bytes; /* and their bytes */
};

static struct memory_state *memory_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_MEMORY);
}

bool srv_quota_allows(struct srv_session *s, uint64_t size)
{
    srv_ipc_charge_orphans(s);
    return sched_quota_fits(s->mem_quota, s->mem_used, size);
}

bool srv_quota_charge(struct srv_session *s, uint64_t size)
{
    if (!srv_quota_allows(s, size))
        return false;
    s->mem_used += size;
    return true;
}

void srv_quota_charge_held(struct srv_session *s, uint64_t size)
{
    s->mem_used += size;
}

void srv_quota_release(struct srv_session *s, uint64_t size)
{
    s->mem_used -= size < s->mem_used ? size : s->mem_used;
}

CUresult srv_alloc_record(struct srv_session *s, CUdeviceptr d, size_t size)
{
    struct memory_state *m = memory_of(s);

    if (!rg_array_grow((void **)&m->allocs, &m->cap, m->n, sizeof(*m->allocs), 64) ||
        !srv_quota_charge(s, size)) { /* checked before the allocation: fits unless out of memory */
        s->drv.cuMemFree(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->allocs[m->n++] = (struct srv_alloc){d, size};
    return CUDA_SUCCESS;
}

CUresult srv_alloc_answer(struct srv_session *s, struct srv_call *call, CUresult res, CUdeviceptr d,
                          size_t size)
{
    if (res == CUDA_SUCCESS && (res = srv_alloc_record(s, d, size)) == CUDA_SUCCESS)
        call->out[call->nout++] = d;
    return res;
}

void srv_alloc_del(struct srv_session *s, CUdeviceptr dptr)
{
    struct memory_state *m = memory_of(s);

    for (size_t i = 0; i < m->n; i++) {
        if (m->allocs[i].dptr == dptr) {
            srv_quota_release(s, m->allocs[i].size);
            m->allocs[i] = m->allocs[--m->n];
            return;
        }
    }
}

const struct srv_alloc *srv_alloc_find(struct srv_session *s, CUdeviceptr d, size_t len)
{
    struct memory_state *m = memory_of(s);

    for (size_t i = 0; i < m->n; i++) {
        const struct srv_alloc *a = &m->allocs[i];
        if (d >= a->dptr && d - a->dptr <= a->size && len <= a->size - (d - a->dptr))
            return a;
    }
    return NULL;
}

void srv_alloc_reset(struct srv_session *s)
{
    memory_of(s)->n = 0;
    s->mem_used = 0;
}

void srv_alloc_freed(struct srv_session *s, size_t *n_p, uint64_t *bytes_p)
{
    struct memory_state *m = memory_of(s);

    *n_p = m != NULL ? m->freed : 0;
    *bytes_p = m != NULL ? m->freed_bytes : 0;
}

static void memory_teardown(struct srv_session *s, void *state)
{
    struct memory_state *m = state;

    m->freed = m->n;
    for (size_t i = 0; i < m->n; i++) {
        m->freed_bytes += m->allocs[i].size;
        s->drv.cuMemFree(m->allocs[i].dptr);
    }
    free(m->allocs);
    m->allocs = NULL;
    m->n = m->cap = 0;
}

const struct srv_component srv_memory_component = {
    .name = "memory", .state_size = sizeof(struct memory_state), .teardown = memory_teardown};

size_t srv_mem_free_now(struct srv_session *s)
{
    size_t free_b = 0, total;

    return s->drv.cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS ? free_b : 0;
}

/* A module's globals (and its code) count against the quota: the device memory that loading it
 * took, measured around the load (one worker is one process, so the difference is this load's
 * unless another process allocated at the same moment). Charged to the handle, given back when
 * it is unloaded; CUDA_ERROR_OUT_OF_MEMORY (and the module unloaded) when it does not fit. */
CUresult srv_load_charge(struct srv_session *s, uint64_t id, unsigned type, size_t before)
{
    size_t after = srv_mem_free_now(s);
    uint64_t took = before > after ? before - after : 0;

    if (!srv_quota_charge(s, took)) {
        srv_handle_destroy(s, id, type);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    srv_handle_get(s, id, type)->size = took;
    return CUDA_SUCCESS;
}
