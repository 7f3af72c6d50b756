/* A session worker: one process per client, owning that client's CUDA context(s). It answers
 * the handshake with a snapshot of the devices, then executes calls in order until the client
 * leaves, and frees everything the session held. */
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
#include "server/lanes.h"
#include "server/peer_gate.h"
#include "server/module_cache.h"
#include "server/preauth.h"
#include "server/probe.h"
#include "server/server.h"
#include "server/session.h"
#include "server/tenancy.h"
#include "scheduler/admission.h"
#include "transport/rdma.h"

#define EXIT_MALFORMED       2
#define CALL_ARGS_INLINE     64 /* calls with more arguments are decoded by protobuf-c */
#define RDMA_UPGRADE_WAIT_MS 10000

static int parse_devices(struct srv_session *s, const char *list)
{
    int count = 0;
    char buf[128], *tok, *save = NULL;

    if (s->drv.cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return -1;
    s->ndevices = 0;
    if (list == NULL || list[0] == '\0') {
        for (int i = 0; i < count && i < SRV_MAX_DEVICES; i++)
            s->drv.cuDeviceGet(&s->devices[s->ndevices++], i);
        return 0;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int ord = atoi(tok);
        if (ord < 0 || ord >= count || s->ndevices == SRV_MAX_DEVICES)
            return -1;
        s->drv.cuDeviceGet(&s->devices[s->ndevices++], ord);
    }
    return 0;
}

/* Device i as the Welcome describes it, into *info (its strings and arrays in the buffers
 * given, which must outlive it). */
static void device_info(struct srv_session *s, int i, Rgpu__DeviceInfo *info, int32_t *attrs,
                        char *name, char *pci, uint8_t *uuid)
{
    CUuuid u;
    size_t total = 0;

    rgpu__device_info__init(info);
    s->drv.cuDeviceGetName(name, 256, s->devices[i]);
    s->drv.cuDeviceTotalMem(&total, s->devices[i]);
    s->drv.cuDeviceGetPCIBusId(pci, 32, s->devices[i]);
    if (s->drv.cuDeviceGetUuid(&u, s->devices[i]) == CUDA_SUCCESS)
        memcpy(uuid, u.bytes, 16);
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
        if (s->drv.cuDeviceGetAttribute(&attrs[a], a, s->devices[i]) != CUDA_SUCCESS)
            attrs[a] = 0;
    info->name = name;
    info->uuid = (ProtobufCBinaryData){16, uuid};
    info->total_mem = s->mem_quota != 0 && s->mem_quota < total ? s->mem_quota : total;
    info->n_attrs = CU_DEVICE_ATTRIBUTE_MAX;
    info->attrs = attrs;
    info->pci_bus_id = pci;
    info->ordinal = s->devices[i];
}

/* The session's transport beyond its TCP connection, during the handshake: the RDMA offer
 * named in the Welcome, or why there is none. */
struct handshake_rdma {
    struct transport_rdma_offer offer;
    char note[200];
};

/* What the Welcome's devices point to (about 10 KiB a device: on the heap). */
struct welcome_devices {
    Rgpu__DeviceInfo infos[SRV_MAX_DEVICES], *ptrs[SRV_MAX_DEVICES];
    int32_t attrs[SRV_MAX_DEVICES][CU_DEVICE_ATTRIBUTE_MAX];
    char names[SRV_MAX_DEVICES][256], pcis[SRV_MAX_DEVICES][32];
    uint8_t uuids[SRV_MAX_DEVICES][16];
};

static rg_status_t send_welcome(struct srv_session *s, const struct srv_config *cfg,
                                struct handshake_rdma *rdma)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;
    struct welcome_devices *d = calloc(1, sizeof(*d));
    int version = 0;
    rg_status_t st;

    if (d == NULL)
        return RG_ERR_NOMEM;
    for (int i = 0; i < s->ndevices; i++) {
        device_info(s, i, &d->infos[i], d->attrs[i], d->names[i], d->pcis[i], d->uuids[i]);
        d->ptrs[i] = &d->infos[i];
    }
    s->drv.cuDriverGetVersion(&version);
    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.session_id = s->id;
    w.driver_version = version;
    w.n_devices = (size_t)s->ndevices;
    w.devices = d->ptrs;
    w.server_name = (char *)cfg->name;
    srv_lanes_offer(s, &w);
    if (rdma->offer.side != NULL) {
        w.rdma_addr = rdma->offer.addr;
        w.rdma_secret = (ProtobufCBinaryData){sizeof(rdma->offer.secret), rdma->offer.secret};
    } else {
        w.transport_note = rdma->note;
    }
    st = proto_send(s->conn, PROTO_WELCOME, &w.base, NULL, 0);
    free(d);
    return st;
}

static void send_refusal(struct srv_session *s, CUresult status, const char *reason)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;

    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.status = status;
    w.reason = (char *)reason;
    proto_send(s->conn, PROTO_WELCOME, &w.base, NULL, 0);
}

static void refuse(struct srv_session *s, CUresult status, const char *reason)
{
    rg_warn("session %llu (%s): refused: %s", (unsigned long long)s->id, s->peer, reason);
    send_refusal(s, status, reason);
}

/* Every log line of the worker names its session, and its tenant once known. */
static void log_prefix(const struct srv_session *s)
{
    char prefix[128];

    snprintf(prefix, sizeof(prefix), "gpu-server[%d]%s%s session %llu", (int)getpid(),
             s->tenant[0] ? " tenant=" : "", s->tenant, (unsigned long long)s->id);
    rg_log_set_prefix(prefix);
}

/* The Hello through the gate (server/peer_gate.h; the supervisor passed it there first, but
 * the tenants may have been reloaded since): the session's minor and tenant. 0 when admitted;
 * refused (and logged by the gate) otherwise. */
static int authenticate(struct srv_session *s, const struct srv_config *cfg,
                        const Rgpu__Hello *hello, const struct srv_tenant **tenant_p)
{
    struct srv_gate g;

    *tenant_p = NULL;
    if (!srv_peer_gate(&cfg->tenants,
                       &(struct srv_gate_peer){"hello", s->peer, NULL, hello->proto_version,
                                               hello->proto_minor, hello->tenant, hello->token},
                       &g)) {
        send_refusal(s, g.status, g.reason);
        return 1;
    }
    s->proto_minor = g.minor;
    if (g.tenant == NULL)
        return 0;
    snprintf(s->tenant, sizeof(s->tenant), "%s", g.tenant->name);
    *tenant_p = g.tenant;
    log_prefix(s);
    return 0;
}

/* The session's quota from what the client asked (bytes, or a share of the smallest GPU it is
 * served), refused above the tenant's quota (scheduler/admission.h). 0, or 1 when refused. */
static int grant_quota(struct srv_session *s, const struct srv_tenant *t, uint64_t asked,
                       double share)
{
    uint64_t smallest = 0;
    char why[256];

    for (int i = 0; i < s->ndevices; i++) {
        size_t total = 0;
        s->drv.cuDeviceTotalMem(&total, s->devices[i]);
        smallest = i == 0 || total < smallest ? total : smallest;
    }
    if (sched_request_quota(t ? t->name : "", t ? t->mem_quota : 0, asked, share, smallest,
                            &s->mem_quota, why, sizeof(why)) == SCHED_ADMIT)
        return 0;
    rg_warn("session %llu (%s): %s", (unsigned long long)s->id, s->peer, why);
    refuse(s, CUDA_ERROR_NOT_PERMITTED, why);
    return 1;
}

/* Before the Welcome: open an RDMA offer when the client asks and this server allows. 0 to go
 * on (with or without an offer), 1 when refused (transport = rdma and no RDMA). */
static int transport_offer(struct srv_session *s, const struct srv_config *cfg, const char *want,
                           struct handshake_rdma *rdma)
{
    bool client_rdma = strcmp(want, "rdma") == 0 || strcmp(want, "auto") == 0;
    char why[160] = "", reason[256];

    if (cfg->transport == SRV_TRANSPORT_TCP)
        snprintf(rdma->note, sizeof(rdma->note), "the server is configured for tcp");
    else if (!client_rdma)
        snprintf(rdma->note, sizeof(rdma->note), "the client asked for tcp");
    else if (transport_rdma_offer_open(transport_fd(s->conn), &rdma->offer, why, sizeof(why)) ==
             RG_OK)
        return 0;
    else
        snprintf(rdma->note, sizeof(rdma->note), "the server cannot use RDMA: %s", why);
    if (cfg->transport == SRV_TRANSPORT_RDMA) {
        snprintf(reason, sizeof(reason), "this server requires RDMA (transport = rdma); %s",
                 rdma->note);
        refuse(s, CUDA_ERROR_NOT_SUPPORTED, reason);
        return 1;
    }
    if (client_rdma)
        rg_info("session %llu: transport tcp (%s)", (unsigned long long)s->id, rdma->note);
    return 0;
}

/* After the Welcome: wait for the client's RDMA connection. -1 to serve, else exit status. */
static int transport_upgrade(struct srv_session *s, const struct srv_config *cfg,
                             struct handshake_rdma *rdma)
{
    struct transport_conn *rconn;
    rg_status_t st;

    if (rdma->offer.side == NULL)
        return -1;
    st = transport_rdma_offer_accept(&rdma->offer, transport_fd(s->conn), RDMA_UPGRADE_WAIT_MS,
                                     &rconn);
    transport_rdma_offer_close(&rdma->offer);
    if (st == RG_OK) {
        s->tcp_ctl = s->conn;
        s->conn = rconn;
        transport_set_busy_poll(rconn, (unsigned)cfg->busy_poll_us);
        rg_info("session %llu: transport rdma", (unsigned long long)s->id);
        return -1;
    }
    if (st == RG_ERR_CLOSED) {
        rg_info("session %llu: %s left before moving to RDMA", (unsigned long long)s->id, s->peer);
        return 0;
    }
    if (cfg->transport == SRV_TRANSPORT_RDMA) {
        rg_error("session %llu: the client did not connect over RDMA (%s); transport = rdma "
                 "ends the session",
                 (unsigned long long)s->id, rg_status_str(st));
        return 1;
    }
    rg_info("session %llu: transport tcp (the client stayed on TCP: %s)", (unsigned long long)s->id,
            rg_status_str(st));
    return -1;
}

/* The Hello: read by the supervisor and passed in a pipe (cfg->hello_fd), or, when a test
 * drives a worker directly, from the connection. */
static rg_status_t recv_hello(struct srv_session *s, const struct srv_config *cfg,
                              struct proto_frame_hdr *hdr)
{
    size_t got = 0, want = sizeof(*hdr);
    uint8_t *dst = (uint8_t *)hdr;

    if (cfg->hello_fd <= 0)
        return proto_recv(s->conn, hdr, s->msg_buf, PROTO_MSG_MAX);
    while (got < want) {
        ssize_t n = read(cfg->hello_fd, dst + got, want - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof(*hdr) && dst == (uint8_t *)hdr) {
            if (hdr->msg_len > PROTO_MSG_MAX)
                break;
            dst = s->msg_buf;
            got = 0;
            want = hdr->msg_len;
        }
    }
    close(cfg->hello_fd);
    return got == want && dst == s->msg_buf ? RG_OK : RG_ERR_PROTO;
}

/* Hello -> Welcome, with rdma for the move to RDMA. */
static int handshake_steps(struct srv_session *s, const struct srv_config *cfg,
                           uint32_t *timeout_ms_p, struct handshake_rdma *rdma)
{
    struct proto_frame_hdr hdr;
    Rgpu__Hello *hello;
    char reason[320], client[RG_PEER_STR_MAX * 2 + 32];
    const struct srv_tenant *tenant;
    uint64_t asked;
    double share;
    CUresult res;
    rg_status_t st = recv_hello(s, cfg, &hdr);

    if (st == RG_ERR_CLOSED) { /* a port probe (load balancer, liveness check) */
        rg_info("session %llu: %s closed the connection before its hello",
                (unsigned long long)s->id, s->peer);
        return 0;
    }
    if (st == RG_OK && hdr.type == PROTO_PROBE) /* not a session: server/probe.h */
        return srv_probe_serve(s, cfg, &hdr);
    if (st != RG_OK || hdr.type != PROTO_HELLO || hdr.bulk_len != 0 ||
        (hello = rgpu__hello__unpack(NULL, hdr.msg_len, s->msg_buf)) == NULL) {
        rg_error("session %llu: malformed message from %s: expected a hello frame",
                 (unsigned long long)s->id, s->peer);
        return EXIT_MALFORMED;
    }
    snprintf(client, sizeof(client), "%s pid %u on %s", RG_PEER_STR(hello->client_name),
             hello->client_pid, RG_PEER_STR(hello->client_host));
    rg_info("session %llu: client %s (%s), tenant '%s'", (unsigned long long)s->id, client, s->peer,
            RG_PEER_STR(hello->tenant));
    if (authenticate(s, cfg, hello, &tenant) != 0 ||
        transport_offer(s, cfg, hello->transport, rdma) != 0) {
        rgpu__hello__free_unpacked(hello, NULL);
        return 0;
    }
    asked = hello->mem_quota;
    share = hello->mem_share;
    *timeout_ms_p = hello->session_timeout_ms;
    rgpu__hello__free_unpacked(hello, NULL);
    /* sharing = mps: an MPS client, its memory limit from the tenant's quota (the session's own
     * grant, at most that, is known only once the driver tells the GPUs' sizes) */
    srv_tenancy_driver_env(cfg->table, tenant, tenant != NULL ? tenant->mem_quota : 0);
    if (srv_driver_open(cfg->driver[0] ? cfg->driver : NULL, &s->drv) != RG_OK ||
        (res = s->drv.cuInit(0)) != CUDA_SUCCESS || parse_devices(s, cfg->devices) != 0) {
        refuse(s, CUDA_ERROR_NO_DEVICE, "the server cannot open its GPUs");
        return 1;
    }
    if (grant_quota(s, tenant, asked, share) != 0)
        return 0;
    if (cfg->table != NULL && /* admission: session limit, quota against free capacity */
        (res = srv_tenancy_admit(s, cfg->table, tenant, client, reason, sizeof(reason))) !=
            CUDA_SUCCESS) {
        refuse(s, res, reason);
        return 0;
    }
    return send_welcome(s, cfg, rdma) == RG_OK ? transport_upgrade(s, cfg, rdma) : 1;
}

/* Hello -> Welcome. Returns -1 to go on serving (with the client's session timeout in
 * *timeout_ms_p, for the keepalive), or the worker's exit status. An RDMA offer a refusal
 * left open is closed here. */
static int handshake(struct srv_session *s, const struct srv_config *cfg, uint32_t *timeout_ms_p)
{
    struct handshake_rdma rdma = {.note = ""};
    int rc = handshake_steps(s, cfg, timeout_ms_p, &rdma);

    transport_rdma_offer_close(&rdma.offer);
    return rc;
}

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
            return EXIT_MALFORMED;
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
    char prefix[64];
    uint32_t timeout_ms = 0;
    int rc;

    snprintf(prefix, sizeof(prefix), "gpu-server[%d] session %llu", (int)getpid(),
             (unsigned long long)session_id);
    rg_log_set_prefix(prefix);
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
    rc = handshake(&s, cfg, &timeout_ms);
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
