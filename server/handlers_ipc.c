/* CUDA IPC between sessions of one gpu-server. Two clients' workers are two processes on the
 * same GPU host, so the driver's own IPC works between them: the exporting worker makes the
 * handle, the client passes its 64 bytes on opaquely, and the opening worker opens them. What
 * the driver cannot know is who may open what: every handle a session exports is recorded in
 * the shared table's registry (server/session_table.h) with its tenant, and a handle is opened
 * only when a live session of the opener's own tenant exported it (on a server without tenants,
 * any live session). Anything else, forged bytes included, is refused with INVALID_VALUE and
 * logged, and never reaches the driver. Opened memory is charged to the exporter's quota while
 * the exporter's session lives; the driver keeps it alive while it is open, after that session
 * ended as well, so from then on every session that keeps it open is charged its size, until
 * it closes it (srv_ipc_charge_orphans; docs/tenants.md). Opened events are ordinary event
 * handles. */
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "common/log.h"
#include "server/session.h"
#include "server/tenancy.h"

#define SRV_IPC_MAX_OPEN 4096 /* memory handles one session may hold open */

/* Memory the session opened from another session's handle. */
struct srv_ipc_map {
    CUdeviceptr dptr;
    size_t size;
    bool charged; /* its exporter's session ended: charged to this one */
    uint8_t handle[CU_IPC_HANDLE_SIZE];
};

/* The component's state. */
struct ipc_state {
    struct srv_ipc_map *maps;
    size_t nmaps, cap;
    uint8_t reply[CU_IPC_HANDLE_SIZE]; /* the reply's handle bytes */
};

static struct ipc_state *ipc_of(const struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_IPC);
}

/* Record a handle the driver just made and answer it. */
static CUresult exported(struct srv_session *s, struct srv_call *call, enum srv_ipc_kind kind,
                         const void *handle)
{
    if (srv_tenancy_ipc_export(s, kind, handle) != RG_OK) {
        rg_warn("session %llu: cannot export another CUDA IPC %s handle: the server's registry "
                "(%d per session, %d in all) is full",
                (unsigned long long)s->id, kind == SRV_IPC_MEM ? "memory" : "event",
                SRV_IPC_PER_SESSION, SRV_TABLE_IPC);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(ipc_of(s)->reply, handle, CU_IPC_HANDLE_SIZE);
    call->rdata = ipc_of(s)->reply;
    call->rdata_len = CU_IPC_HANDLE_SIZE;
    return CUDA_SUCCESS;
}

/* May the session open the handle in the call's data? CUDA_SUCCESS, or INVALID_VALUE logged. */
static CUresult may_open(struct srv_session *s, struct srv_call *call, enum srv_ipc_kind kind)
{
    const char *what = kind == SRV_IPC_MEM ? "memory" : "event";
    char other[64];
    rg_status_t st;

    if (call->msg->data.len != CU_IPC_HANDLE_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    st = srv_tenancy_ipc_check(s, kind, call->msg->data.data, other, sizeof(other));
    if (st == RG_ERR_REFUSED)
        rg_warn("session %llu: refused to open a CUDA IPC %s handle exported by tenant '%s': "
                "IPC is only between sessions of one tenant",
                (unsigned long long)s->id, what, other);
    else if (st != RG_OK)
        rg_warn("session %llu: refused to open a CUDA IPC %s handle that no live session of "
                "this server exported (forged, from another server, or its session ended)",
                (unsigned long long)s->id, what);
    return st == RG_OK ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* [dptr] -> data: CUipcMemHandle */
CUresult srv_op_ipc_get_mem(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_IPC_GET_MEM_HANDLE *a = SRV_ARGS(call, IPC_GET_MEM_HANDLE);
    CUipcMemHandle h;
    CUresult res = s->drv.cuIpcGetMemHandle(&h, (CUdeviceptr)a->dptr);

    return res == CUDA_SUCCESS ? exported(s, call, SRV_IPC_MEM, &h) : res;
}

static bool map_add(struct srv_session *s, CUdeviceptr dptr, size_t size, const CUipcMemHandle *h)
{
    struct ipc_state *st = ipc_of(s);

    if (!rg_array_grow((void **)&st->maps, &st->cap, st->nmaps, sizeof(*st->maps), 16))
        return false;
    st->maps[st->nmaps] = (struct srv_ipc_map){.dptr = dptr, .size = size};
    memcpy(st->maps[st->nmaps++].handle, h, CU_IPC_HANDLE_SIZE);
    return true;
}

void srv_ipc_charge_orphans(struct srv_session *s)
{
    struct ipc_state *st = ipc_of(s);
    char other[64];

    for (size_t i = 0; i < st->nmaps; i++) {
        struct srv_ipc_map *m = &st->maps[i];
        if (m->charged ||
            srv_tenancy_ipc_check(s, SRV_IPC_MEM, m->handle, other, sizeof(other)) == RG_OK)
            continue;
        m->charged = true; /* even over the quota: it is held; new allocations are refused */
        srv_quota_charge_held(s, m->size);
        rg_info("session %llu: the session that exported %zu bytes it keeps open through CUDA "
                "IPC ended: charged to this session until it closes them",
                (unsigned long long)s->id, m->size);
    }
}

/* [flags] data: CUipcMemHandle -> out[dptr, size] */
CUresult srv_op_ipc_open_mem(struct srv_session *s, struct srv_call *call)
{
    struct ipc_state *st = ipc_of(s);
    const struct proto_args_IPC_OPEN_MEM_HANDLE *a = SRV_ARGS(call, IPC_OPEN_MEM_HANDLE);
    CUipcMemHandle h;
    CUdeviceptr d, base;
    size_t size = 0;
    CUresult res = may_open(s, call, SRV_IPC_MEM);

    if (res != CUDA_SUCCESS)
        return res;
    if (st->nmaps >= SRV_IPC_MAX_OPEN)
        return CUDA_ERROR_TOO_MANY_PEERS;
    memcpy(&h, call->msg->data.data, sizeof(h));
    if ((res = s->drv.cuIpcOpenMemHandle(&d, h, (unsigned)a->flags)) != CUDA_SUCCESS)
        return res;
    if (s->drv.cuMemGetAddressRange(&base, &size, d) != CUDA_SUCCESS || base != d)
        size = 0; /* the client then knows the start only */
    if (!map_add(s, d, size, &h)) {
        s->drv.cuIpcCloseMemHandle(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    call->out[call->nout++] = d;
    call->out[call->nout++] = size;
    return CUDA_SUCCESS;
}

/* [dptr]: only what this session opened reaches the driver. */
CUresult srv_op_ipc_close_mem(struct srv_session *s, struct srv_call *call)
{
    struct ipc_state *st = ipc_of(s);
    const struct proto_args_IPC_CLOSE_MEM_HANDLE *a = SRV_ARGS(call, IPC_CLOSE_MEM_HANDLE);
    for (size_t i = 0; i < st->nmaps; i++) {
        if (st->maps[i].dptr != (CUdeviceptr)a->dptr)
            continue;
        if (st->maps[i].charged)
            srv_quota_release(s, st->maps[i].size);
        st->maps[i] = st->maps[--st->nmaps];
        return s->drv.cuIpcCloseMemHandle((CUdeviceptr)a->dptr);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* [event] -> data: CUipcEventHandle */
CUresult srv_op_ipc_get_event(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_IPC_GET_EVENT_HANDLE *a = SRV_ARGS(call, IPC_GET_EVENT_HANDLE);
    struct srv_handle *e = srv_handle_get(s, a->event, PROTO_H_EVENT);
    CUipcEventHandle h;
    CUresult res;

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuIpcGetEventHandle(&h, e->real);
    return res == CUDA_SUCCESS ? exported(s, call, SRV_IPC_EVENT, &h) : res;
}

/* [event id] data: CUipcEventHandle */
CUresult srv_op_ipc_open_event(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_IPC_OPEN_EVENT_HANDLE *a = SRV_ARGS(call, IPC_OPEN_EVENT_HANDLE);
    CUipcEventHandle h;
    CUevent ev;
    CUresult res = may_open(s, call, SRV_IPC_EVENT);

    if (res != CUDA_SUCCESS)
        return res;
    if (PROTO_ID_TYPE(a->id) != PROTO_H_EVENT || srv_handle_get(s, a->id, 0) != NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    memcpy(&h, call->msg->data.data, sizeof(h));
    res = s->drv.cuIpcOpenEventHandle(&ev, h);
    return srv_handle_adopt(s, a->id, PROTO_H_EVENT, res, ev);
}

/* Other sessions' memory, while the contexts live. */
static void ipc_teardown(struct srv_session *s, void *state)
{
    struct ipc_state *st = ipc_of(s);

    if (st->nmaps > 0)
        rg_info("session %llu: closing %zu CUDA IPC memory mapping(s) it left open",
                (unsigned long long)s->id, st->nmaps);
    for (size_t i = 0; i < st->nmaps; i++)
        s->drv.cuIpcCloseMemHandle(st->maps[i].dptr);
    free(st->maps);
    st->maps = NULL;
    st->nmaps = st->cap = 0;
}

const struct srv_component srv_ipc_component = {
    .name = "ipc", .state_size = sizeof(struct ipc_state), .teardown = ipc_teardown};
