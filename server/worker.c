/* A session worker: one process per client, owning that client's CUDA context(s). After the
 * handshake (server/worker_handshake.c) it executes calls in order until the client leaves, and
 * frees everything the session held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/host_nvml.h"
#include "server/keepalive.h"
#include "server/nccl.h"
#include "server/module_cache.h"
#include "server/tenancy.h"
#include "server/worker_handshake.h"

#define CALL_ARGS_INLINE 64 /* calls with more arguments are decoded by protobuf-c */

CUresult srv_reply_bulk(struct srv_session *s, struct srv_call *call, const void *buf, size_t len)
{
    Rgpu__Reply reply = RGPU__REPLY__INIT;

    reply.id = call->msg->id;
    call->replied = true;
    srv_keepalive_reply_begin(s); /* the reply's frame begins: no keepalive may cut into it */
    return proto_send(s->conn, PROTO_REPLY, &reply.base, buf, len) == RG_OK
               ? CUDA_SUCCESS
               : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

rg_status_t srv_recv_input(struct srv_session *s, struct srv_call *call, void *dst, size_t len)
{
    if (call->hdr->bulk_len > 0) {
        if (call->hdr->bulk_len != len)
            return RG_ERR_INVALID;
        call->bulk_taken = true;
        return transport_recv(s->conn, dst, len);
    }
    if (call->msg->data.len != len)
        return RG_ERR_INVALID;
    memcpy(dst, call->msg->data.data, len);
    return RG_OK;
}

static rg_status_t send_result(struct srv_session *s, struct srv_call *call, CUresult res)
{
    const Rgpu__Call *m = call->msg;

    if (call->noreply) {
        Rgpu__AsyncError e = RGPU__ASYNC_ERROR__INIT;
        const char *name = "?";
        char text[160];
        if (res == CUDA_SUCCESS)
            return RG_OK;
        s->drv.cuGetErrorName(res, &name);
        snprintf(text, sizeof(text), "%s: %s", proto_op_name(m->op), name);
        e.id = m->id;
        e.op = m->op;
        e.result = res;
        e.message = text;
        return proto_send(s->conn, PROTO_ASYNC_ERROR, &e.base, NULL, 0);
    }
    Rgpu__Reply r = RGPU__REPLY__INIT;
    r.id = m->id;
    r.result = res;
    r.n_out = call->nout;
    r.out = call->out_ext != NULL ? call->out_ext : call->out;
    r.data = (ProtobufCBinaryData){call->rdata_len, (uint8_t *)call->rdata};
    return proto_send(s->conn, PROTO_REPLY, &r.base, NULL, 0);
}

/* Bytes of copied data a call sends back to the client (for the session's counters). */
static uint64_t reply_bytes(const struct srv_call *call, CUresult res)
{
    if (res != CUDA_SUCCESS)
        return 0;
    if ((call->replied && call->msg->op == PROTO_OP_MEMCPY_DTOH) ||
        call->msg->op == PROTO_OP_MEMCPY_DTOH_RDMA)
        return SRV_ARGS(call, MEMCPY_DTOH)->size; /* streamed as bulk, or written one-sided */
    return call->rdata_len;
}

/* Bytes a call brought in: the frame, or what the worker read one-sided. */
static uint64_t call_bytes(const struct proto_frame_hdr *hdr, const struct srv_call *call,
                           CUresult res)
{
    if (call->msg->op == PROTO_OP_MEMCPY_HTOD_RDMA && res == CUDA_SUCCESS)
        return hdr->msg_len + SRV_ARGS(call, MEMCPY_HTOD_RDMA)->size;
    return hdr->msg_len + hdr->bulk_len;
}

/* The call in msg_buf: decoded in place into *view (its args into args) when it has the form
 * clients send (proto/call_unpack.c), else by protobuf-c into the arena; NULL if malformed. */
static Rgpu__Call *decode_call(struct srv_session *s, const struct proto_frame_hdr *hdr,
                               Rgpu__Call *view, uint64_t *args)
{
    if (proto_call_unpack(s->msg_buf, hdr->msg_len, view, args, CALL_ARGS_INLINE))
        return view;
    return rgpu__call__unpack(&s->arena.allocator, hdr->msg_len, s->msg_buf);
}

static void release_call(struct srv_session *s, Rgpu__Call *m, const Rgpu__Call *view)
{
    if (m != view)
        rgpu__call__free_unpacked(m, &s->arena.allocator);
    proto_arena_reset(&s->arena);
}

/* The call's arguments as its handler reads them: at least the op's fixed count of words, the
 * optional ones the message left out as 0 (in padded). */
static const uint64_t *call_args(const Rgpu__Call *m, const struct proto_op_info *op,
                                 uint64_t *padded)
{
    if (m->n_args >= op->nargs)
        return m->args;
    memset(padded, 0, PROTO_CALL_MAX_ARGS * sizeof(*padded));
    memcpy(padded, m->args, m->n_args * sizeof(*padded));
    return padded;
}

/* An op the session's protocol does not have (an op number this server does not know, or one
 * newer than the client's minor): refused with CUDA_ERROR_NOT_SUPPORTED, never run, and said
 * by name once per session. */
static CUresult refuse_op(struct srv_session *s, unsigned op)
{
    if (!s->refused_logged) {
        s->refused_logged = true;
        if (op < PROTO_OP_COUNT)
            rg_warn("session %llu: refused %s: new in protocol %u.%u, the session speaks %u.%u",
                    (unsigned long long)s->id, proto_op_name(op), proto_ops[op].major,
                    proto_ops[op].minor, PROTO_VERSION, s->proto_minor);
        else
            rg_warn("session %llu: refused op %u: unknown to protocol %u.%u (a newer client?)",
                    (unsigned long long)s->id, op, PROTO_VERSION, PROTO_VERSION_MINOR);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Execute one call. Returns false when the session must end (set *why for a bad message). */
static bool execute(struct srv_session *s, const struct proto_frame_hdr *hdr, const char **why)
{
    uint64_t args[CALL_ARGS_INLINE], padded[PROTO_CALL_MAX_ARGS];
    Rgpu__Call view, *m = decode_call(s, hdr, &view, args);
    struct srv_call call = {.msg = m, .hdr = hdr, .noreply = hdr->flags & PROTO_FLAG_NOREPLY};
    const struct proto_op_info *op;
    CUresult res;
    uint64_t t0;
    bool ok = true;

    if (m == NULL) {
        *why = "a call that does not decode";
        return false;
    }
    op = proto_op_in_minor(m->op, s->proto_minor) ? &proto_ops[m->op] : NULL;
    if (op != NULL && m->n_args < op->min_args) {
        *why = "a call with too few arguments";
        release_call(s, m, &view);
        return false;
    }
    t0 = srv_worker_stats_now();
    res = op == NULL ? refuse_op(s, m->op) : srv_use_ctx(s, m->ctx);
    call.ctx_res = res;
    /* A lane copy runs even when its context cannot be made current (call.ctx_res): the
     * client's lanes move its bytes regardless, so the worker's must too, or both would wait
     * forever. */
    if (op != NULL)
        call.args = call_args(m, op, padded);
    if (op != NULL && res == CUDA_SUCCESS && (op->flags & PROTO_OPF_SYNCHRONIZING))
        srv_nccl_before_wait(s); /* the NCCL watchdog sees the latest collectives (nccl.h) */
    if (op != NULL && (res == CUDA_SUCCESS || (op->flags & PROTO_OPF_LANE))) {
        srv_keepalive_call_begin(s);
        res = srv_dispatch[m->op](s, &call);
        srv_keepalive_call_end(s);
    }
    srv_worker_stats_add(m->op, t0);
    srv_tenancy_count(s, call_bytes(hdr, &call, res), reply_bytes(&call, res), res != CUDA_SUCCESS);
    if (hdr->bulk_len > 0 && !call.bulk_taken && proto_discard(s->conn, hdr->bulk_len) != RG_OK)
        ok = false;
    if (ok && !call.noreply && srv_output_forward(s) != RG_OK)
        ok = false;
    if (ok && !call.replied && send_result(s, &call, res) != RG_OK)
        ok = false;
    if (call.why[0] != '\0') { /* the call broke the session (server/lanes.c) */
        memcpy(s->end_reason, call.why, sizeof(s->end_reason));
        *why = s->end_reason;
        ok = false;
    }
    free(call.out_ext);
    release_call(s, m, &view);
    return ok;
}

/* Between calls a session may wait as long as idle_ms (-1: for ever); once a frame has begun,
 * every receive and send must progress within the socket's timeout (recv_timeout_ms, set in
 * srv_worker_run), or the session ends. */
static int serve(struct srv_session *s, int idle_ms)
{
    struct proto_frame_hdr hdr;
    const char *why = NULL;
    rg_status_t st;

    for (;;) {
        if (transport_wait_readable(s->conn, idle_ms) == RG_ERR_TIMEOUT) {
            rg_warn("session %llu (%s): no call for %d s (idle_timeout); ending the session",
                    (unsigned long long)s->id, s->peer, idle_ms / 1000);
            return 0;
        }
        st = proto_recv(s->conn, &hdr, s->msg_buf, PROTO_MSG_MAX);
        if (st == RG_ERR_CLOSED || (st == RG_OK && hdr.type == PROTO_BYE)) {
            rg_info("session %llu (%s): client disconnected", (unsigned long long)s->id, s->peer);
            return 0;
        }
        if (st == RG_ERR_TIMEOUT) {
            rg_warn("session %llu (%s): a message stopped arriving (recv_timeout_ms); ending "
                    "the session",
                    (unsigned long long)s->id, s->peer);
            return 0;
        }
        if (st == RG_ERR_PROTO)
            why = "a frame with a bad header or an oversized message";
        else if (st != RG_OK)
            why = NULL;
        else if (hdr.type != PROTO_CALL)
            why = "an unexpected frame type";
        else if (execute(s, &hdr, &why))
            continue;
        if (why != NULL) {
            rg_error("session %llu: malformed message from %s: %s; ending the session",
                     (unsigned long long)s->id, s->peer, why);
            return SRV_EXIT_MALFORMED;
        }
        rg_warn("session %llu (%s): connection lost: %s", (unsigned long long)s->id, s->peer,
                rg_status_str(st));
        return 0;
    }
}

int srv_worker_run(const struct srv_config *cfg, int fd, uint64_t session_id, const char *peer)
{
    struct srv_session s = {.id = session_id};
    struct timeval io_timeout = {cfg->recv_timeout_ms / 1000, cfg->recv_timeout_ms % 1000 * 1000};
    uint32_t timeout_ms = 0;
    int rc;

    srv_worker_log_prefix(&s);
    snprintf(s.peer, sizeof(s.peer), "%s", peer);
    if (cfg->recv_timeout_ms > 0 && /* no progress inside a frame, either way: the session ends */
        (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &io_timeout, sizeof(io_timeout)) != 0 ||
         setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &io_timeout, sizeof(io_timeout)) != 0))
        rg_warn("cannot set the session's i/o timeout: %m");
    if ((s.msg_buf = malloc(PROTO_MSG_MAX)) == NULL ||
        proto_arena_init(&s.arena, 64u << 10) != RG_OK ||
        transport_tcp_adopt_fd(fd, &s.conn) != RG_OK || srv_session_init(&s) != RG_OK)
        return 1;
    transport_set_busy_poll(s.conn, (unsigned)cfg->busy_poll_us);
    srv_module_cache_configure(cfg);
    srv_host_nvml_configure(cfg->host_nvml);
    srv_nccl_configure(cfg);
    srv_output_capture(&s);
    rc = srv_worker_handshake(&s, cfg, &timeout_ms);
    if (rc < 0) {
        s.served = true;                     /* its teardown reports what it held */
        srv_keepalive_start(&s, timeout_ms); /* failing (logged), the session goes on without */
        rc = serve(&s, cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s * 1000 : -1);
        srv_worker_stats_report();
    }
    srv_session_teardown(&s); /* every component's, in the order of server/components.def (the
                               * keepalive's first: it writes on s.conn) */
    transport_close(s.conn);
    if (s.tcp_ctl != NULL)
        transport_close(s.tcp_ctl);
    proto_arena_destroy(&s.arena);
    free(s.scratch);
    free(s.msg_buf);
    return rc;
}
