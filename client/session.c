/* The session with gpu-server: connect and handshake on first use, then an ordered stream of
 * calls on one connection. Synchronous calls wait for their reply; asynchronous ones do not, and
 * their failures (AsyncError frames) are returned by the next synchronous call, as CUDA returns
 * errors of asynchronous work at the next synchronizing call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "client.h"
#include "client_config.h"
#include "pool.h"
#include "common/array_grow.h"
#include "proto/arena.h"
#include "proto/frame.h"
#include "transport/rdma.h"

#define HANDSHAKE_TIMEOUT_MS 30000 /* a server that accepts and never answers */
#define RECV_BUF_SIZE (256u << 10)
/* Asynchronous calls are coalesced: written when BATCH_FLUSH_AT bytes are pending, at the next
 * synchronous call, or BATCH_DELAY_US after the first one, whichever comes first. */
#define BATCH_SIZE (64u << 10)
#define BATCH_FLUSH_AT (32u << 10)
#define BATCH_DELAY_US 50
/* Deferred DtoH replies carrying more than this are read before anything else is sent. */
#define DEFERRED_DRAIN_AT (16u << 10)

struct deferred {
    uint64_t id;
    void *dst;
    size_t len;
};

static struct {
    pthread_mutex_t lock;
    bool tried;
    CUresult init_result;
    struct transport_conn *conn;
    struct transport_conn *tcp_ctl; /* the TCP connection kept once frames moved to RDMA */
    char transport[8];              /* what the Hello asks for: tcp | rdma | auto */
    bool dead;
    bool said_bye;            /* the exit-time goodbye went: no more calls */
    char server[256];
    uint64_t next_call_id;
    CUresult async_error; /* first failure of an asynchronous call not yet reported */
    struct deferred *deferred; /* FIFO of DtoH replies still to come */
    size_t ndeferred, deferred_cap;
    size_t deferred_bytes;    /* data those replies still carry */
    pid_t pid;                /* the process that opened the session (a forked child may not use it) */
    bool forked;              /* set in a forked child: cheaper than a getpid() per call */
    uint8_t *recv_buf;
    struct proto_arena arena; /* replies are unpacked here, reset after each */
    bool trace_calls;
    uint8_t *batch;           /* coalesced asynchronous frames not yet written */
    size_t batch_len;
    pthread_cond_t batch_cond; /* signalled when the batch becomes non-empty */
    struct cli_device *devices;
    int ndevices;
} sess = {.lock = PTHREAD_MUTEX_INITIALIZER, .next_call_id = 1,
        .batch_cond = PTHREAD_COND_INITIALIZER};

/* ---- handshake -------------------------------------------------------------------------- */

static rg_status_t send_hello(const struct cli_conf *conf)
{
    Rgpu__Hello hello = RGPU__HELLO__INIT;
    char host[256] = "";
    extern char *program_invocation_short_name;

    gethostname(host, sizeof(host) - 1);
    hello.proto_version = PROTO_VERSION;
    hello.client_name = getenv("RGPU_CLIENT_NAME") != NULL ? getenv("RGPU_CLIENT_NAME")
                                                           : program_invocation_short_name;
    hello.client_host = host;
    hello.client_pid = (uint32_t)getpid();
    hello.tenant = (char *)conf->tenant;
    hello.token = (char *)conf->token;
    hello.mem_quota = conf->mem_quota;
    hello.transport = sess.transport;
    return proto_send(sess.conn, PROTO_HELLO, &hello.base, NULL, 0);
}

static void device_from_info(struct cli_device *dev, int ordinal, const Rgpu__DeviceInfo *info)
{
    memset(dev, 0, sizeof(*dev));
    dev->ordinal = ordinal;
    snprintf(dev->name, sizeof(dev->name), "%s", info->name ? info->name : "");
    if (info->uuid.len == sizeof(dev->uuid.bytes))
        memcpy(dev->uuid.bytes, info->uuid.data, sizeof(dev->uuid.bytes));
    dev->total_mem = info->total_mem;
    for (size_t i = 0; i < info->n_attrs && i < CU_DEVICE_ATTRIBUTE_MAX; i++)
        dev->attrs[i] = info->attrs[i];
    snprintf(dev->pci_bus_id, sizeof(dev->pci_bus_id), "%s",
             info->pci_bus_id ? info->pci_bus_id : "");
    dev->pci_domain = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID];
    dev->pci_bus = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID];
    dev->pci_device = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
}

static CUresult take_welcome(const Rgpu__Welcome *w, char *why, size_t why_len)
{
    if (w->status != 0) {
        snprintf(why, why_len, "gpu-server at %s refused the session: %s", sess.server,
                 w->reason ? w->reason : "(no reason)");
        return w->status > 0 ? (CUresult)w->status : CUDA_ERROR_NOT_SUPPORTED;
    }
    sess.devices = calloc(w->n_devices ? w->n_devices : 1, sizeof(*sess.devices));
    if (sess.devices == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < w->n_devices; i++)
        device_from_info(&sess.devices[i], (int)i, w->devices[i]);
    sess.ndevices = (int)w->n_devices;
    rg_info("session %llu on %s (%s), driver %d, %d device(s)",
            (unsigned long long)w->session_id, sess.server, w->server_name ? w->server_name : "",
            w->driver_version, sess.ndevices);
    return sess.ndevices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* ---- transport: tcp, or a move to RDMA after the handshake ------------------------------ */

/* What to ask the server for. auto without RDMA here asks for tcp, saying why in one line. */
static CUresult transport_choose(const char *want)
{
    char why[256];

    if (strcmp(want, "tcp") != 0 && strcmp(want, "rdma") != 0 && strcmp(want, "auto") != 0) {
        rg_error("transport = %s is not one of auto, rdma, tcp (RGPU_TRANSPORT or the config)",
                 want);
        return CUDA_ERROR_INVALID_VALUE;
    }
    snprintf(sess.transport, sizeof(sess.transport), "%s", want);
    if (strcmp(want, "tcp") == 0 || transport_rdma_probe(why, sizeof(why)) == RG_OK)
        return CUDA_SUCCESS;
    if (strcmp(want, "rdma") == 0) {
        rg_error("transport = rdma, but this host cannot use RDMA: %s", why);
        return CUDA_ERROR_NO_DEVICE;
    }
    rg_info("transport: tcp to %s (auto: %s here)", sess.server, why);
    snprintf(sess.transport, sizeof(sess.transport), "tcp");
    return CUDA_SUCCESS;
}

/* After the Welcome: take the server's RDMA offer, or say in one line why not. */
static CUresult transport_upgrade(const Rgpu__Welcome *w, const struct transport_opts *opts)
{
    bool required = strcmp(sess.transport, "rdma") == 0;
    struct transport_conn *rconn;
    rg_status_t st;

    if (strcmp(sess.transport, "tcp") == 0)
        return CUDA_SUCCESS;
    if (w->rdma_addr == NULL || w->rdma_addr[0] == '\0') {
        const char *note = w->transport_note && w->transport_note[0] ? w->transport_note
                                                                     : "no RDMA offer";
        if (required)
            rg_error("transport = rdma, but gpu-server at %s offers no RDMA: %s", sess.server,
                     note);
        else
            rg_info("transport: tcp to %s (auto: %s)", sess.server, note);
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    st = transport_rdma_upgrade(w->rdma_addr, w->rdma_secret.data, w->rdma_secret.len,
                                transport_fd(sess.conn), opts, &rconn);
    if (st != RG_OK) {
        if (required)
            rg_error("transport = rdma, but connecting to %s over RDMA failed: %s",
                     w->rdma_addr, rg_status_str(st));
        else
            rg_info("transport: tcp to %s (auto: RDMA connect to %s failed: %s)", sess.server,
                    w->rdma_addr, rg_status_str(st));
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    sess.tcp_ctl = sess.conn;
    sess.conn = rconn;
    rg_info("transport: rdma to %s (session with %s)", w->rdma_addr, sess.server);
    return CUDA_SUCCESS;
}

static void set_recv_timeout(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    setsockopt(transport_fd(sess.conn), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static CUresult handshake(const struct cli_conf *conf, const struct transport_opts *opts,
                          char *why, size_t why_len)
{
    struct proto_frame_hdr hdr;
    Rgpu__Welcome *w;
    rg_status_t st;
    CUresult res;

    set_recv_timeout(HANDSHAKE_TIMEOUT_MS);
    if ((st = send_hello(conf)) == RG_OK)
        st = proto_recv(sess.conn, &hdr, sess.recv_buf, RECV_BUF_SIZE);
    set_recv_timeout(0);
    if (st != RG_OK) {
        snprintf(why, why_len, "gpu-server at %s %s during the handshake", sess.server,
                 st == RG_ERR_TIMEOUT ? "did not answer" : "closed the connection");
        return CUDA_ERROR_NO_DEVICE;
    }
    if (hdr.type != PROTO_WELCOME || hdr.bulk_len != 0 ||
        (w = rgpu__welcome__unpack(NULL, hdr.msg_len, sess.recv_buf)) == NULL) {
        snprintf(why, why_len, "%s answered the handshake with a malformed %s frame",
                 sess.server, proto_frame_type_name(hdr.type));
        return CUDA_ERROR_NO_DEVICE;
    }
    res = take_welcome(w, why, why_len);
    if (res == CUDA_SUCCESS)
        res = transport_upgrade(w, opts);
    if (res == CUDA_SUCCESS && sess.tcp_ctl == NULL) /* still on TCP */
        cli_lanes_offered(w->lane_addr, w->lane_secret.data, w->lane_secret.len, conf->lanes);
    rgpu__welcome__free_unpacked(w, NULL);
    return res;
}

static CUresult session_lost(const char *what, rg_status_t status);

/* Write the coalesced frames (lock held). */
static CUresult batch_flush(void)
{
    struct iovec iov = {sess.batch, sess.batch_len};
    rg_status_t status;

    if (sess.batch_len == 0 || sess.dead)
        return sess.dead ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
    sess.batch_len = 0;
    status = transport_sendv(sess.conn, &iov, 1);
    return status == RG_OK ? CUDA_SUCCESS : session_lost("send", status);
}

/* Bounds how long an asynchronous call may wait in the batch. */
static void *batch_flusher(void *arg)
{
    pthread_mutex_lock(&sess.lock);
    while (!sess.dead) {
        if (sess.batch_len == 0) {
            pthread_cond_wait(&sess.batch_cond, &sess.lock);
            continue;
        }
        pthread_mutex_unlock(&sess.lock);
        usleep(BATCH_DELAY_US);
        pthread_mutex_lock(&sess.lock);
        batch_flush();
    }
    pthread_mutex_unlock(&sess.lock);
    return NULL;
}

/* A child forked while the flusher held the lock (over RDMA a flush holds it longer, while the
 * slot is posted) must not inherit it held: the child takes it only to learn that it cannot use
 * the session (CUDA_ERROR_NOT_INITIALIZED). */
static void session_atfork_child(void)
{
    pthread_mutex_init(&sess.lock, NULL);
    sess.forked = true;
}

static CUresult batch_start(void)
{
    pthread_t thread;
    pthread_attr_t attr;
    int rc;

    if ((sess.batch = malloc(BATCH_SIZE)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_atfork(NULL, NULL, session_atfork_child);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&thread, &attr, batch_flusher, NULL);
    pthread_attr_destroy(&attr);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

/* One server of the pool (cli_pool_try_fn): connect and hand-shake; on failure nothing is
 * left open and why says what happened. */
static int session_try(const char *addr, const struct cli_conf *conf, char *why, size_t why_len)
{
    struct transport_opts opts = {.connect_timeout_ms = conf->connect_timeout_ms};
    rg_status_t status;
    CUresult res;

    snprintf(sess.server, sizeof(sess.server), "%s", addr);
    status = transport_tcp_ops.connect(addr, &opts, &sess.conn);
    if (status != RG_OK) {
        snprintf(why, why_len, "cannot reach gpu-server at %s: %s%s", addr,
                 rg_status_str(status), conf->npool > 1 ? "" :
                 ". Start gpu-server there, or point the client at one with "
                 "RGPU_SERVER=host:port or a client config (RGPU_CONFIG, ~/.config/rgpu/"
                 "client.conf, /etc/rgpu/client.conf) with 'pool = host:port ...'");
        sess.conn = NULL;
        return CUDA_ERROR_NO_DEVICE;
    }
    res = handshake(conf, &opts, why, why_len);
    if (res != CUDA_SUCCESS) {
        transport_close(sess.conn);
        if (sess.tcp_ctl != NULL)
            transport_close(sess.tcp_ctl);
        sess.conn = sess.tcp_ctl = NULL;
        free(sess.devices);
        sess.devices = NULL;
        sess.ndevices = 0;
    }
    return res;
}

static CUresult session_open(void)
{
    struct cli_conf conf;
    char why[512];
    CUresult res;

    /* A library stays quiet unless asked: warnings and errors only by default. */
    rg_log_set_level(RG_LOG_WARN);
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    if (cli_conf_load(&conf, why, sizeof(why)) != RG_OK) {
        rg_error("client configuration: %s", why);
        return CUDA_ERROR_INVALID_VALUE;
    }
    sess.trace_calls = getenv("RGPU_TRACE_CALLS") != NULL;
    snprintf(sess.server, sizeof(sess.server), "%s", conf.npool == 1 ? conf.pool[0] : "the pool");
    sess.recv_buf = malloc(RECV_BUF_SIZE);
    if (sess.recv_buf == NULL || proto_arena_init(&sess.arena, 64u << 10) != RG_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = transport_choose(conf.transport)) != CUDA_SUCCESS)
        return res;
    sess.pid = getpid();
    res = (CUresult)cli_pool_connect(&conf, session_try, CUDA_ERROR_NO_DEVICE);
    if (res == CUDA_SUCCESS && getenv("RGPU_BUSY_POLL_US") != NULL)
        transport_set_busy_poll(sess.conn, (unsigned)atoi(getenv("RGPU_BUSY_POLL_US")));
    if (res == CUDA_SUCCESS)
        res = batch_start();
    if (res != CUDA_SUCCESS && sess.conn != NULL) {
        transport_close(sess.conn);
        if (sess.tcp_ctl != NULL)
            transport_close(sess.tcp_ctl);
        sess.conn = sess.tcp_ctl = NULL;
    }
    return res;
}

CUresult cli_ensure_init(void)
{
    CUresult res;

    pthread_mutex_lock(&sess.lock);
    if (!sess.tried) {
        sess.init_result = session_open();
        sess.tried = true;
    }
    res = sess.init_result;
    pthread_mutex_unlock(&sess.lock);
    return res;
}

bool cli_initialized(void)
{
    /* sess.tried is only ever set once, under the lock, after init_result. */
    return __atomic_load_n(&sess.tried, __ATOMIC_ACQUIRE) && sess.init_result == CUDA_SUCCESS;
}

int cli_driver_version(void) { return CUDA_VERSION; }
int cli_device_count(void) { return cli_initialized() ? sess.ndevices : 0; }

const struct cli_device *cli_device(int ordinal)
{
    if (!cli_initialized() || ordinal < 0 || ordinal >= sess.ndevices)
        return NULL;
    return &sess.devices[ordinal];
}

/* ---- the call stream -------------------------------------------------------------------- */

static CUresult session_lost(const char *what, rg_status_t status)
{
    if (!sess.dead) {
        rg_error("lost the gpu-server at %s (%s: %s); every CUDA call now fails with "
                 "CUDA_ERROR_DEVICE_UNAVAILABLE",
                 sess.server, what, rg_status_str(status));
        sess.dead = true;
        transport_shutdown(sess.conn);
    }
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* RGPU_TRACE_CALLS=1: every call on the wire to stderr (a debugging aid). */
static void trace_call(const Rgpu__Call *msg, unsigned flags)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "rgpu call %llu %s%s", (unsigned long long)msg->id,
                     proto_op_name(msg->op), flags & PROTO_FLAG_NOREPLY ? " (async)" : "");

    for (size_t i = 0; i < msg->n_args && n > 0 && (size_t)n < sizeof(line) - 24; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, " %#llx",
                      (unsigned long long)msg->args[i]);
    fprintf(stderr, "%s data=%zu\n", line, msg->data.len);
}

static CUresult wait_reply(struct cli_call *call, uint64_t id, CUresult *result_p);

/* Read the replies of deferred DtoH copies now. Needed before sending more once they carry
 * much data: the worker blocks writing them while we would block writing to it. */
static CUresult deferred_drain(void)
{
    CUresult res = batch_flush(), ignored;

    return res == CUDA_SUCCESS ? wait_reply(NULL, 0, &ignored) : res;
}

/* Append a frame to the batch; false if it does not fit even when empty. wake: the flusher is
 * to write it within BATCH_DELAY_US (not when the caller writes the batch itself now). */
static bool batch_append(const Rgpu__Call *msg, unsigned flags, bool wake)
{
    size_t n = proto_frame_pack(sess.batch + sess.batch_len, BATCH_SIZE - sess.batch_len,
                                PROTO_CALL, flags, &msg->base, 0);

    if (n == 0 && sess.batch_len > 0 && batch_flush() == CUDA_SUCCESS)
        n = proto_frame_pack(sess.batch, BATCH_SIZE, PROTO_CALL, flags, &msg->base, 0);
    if (n == 0)
        return false;
    if (sess.batch_len == 0 && wake)
        pthread_cond_signal(&sess.batch_cond);
    sess.batch_len += n;
    if (sess.batch_len >= BATCH_FLUSH_AT)
        batch_flush();
    return true;
}

static CUresult send_call(struct cli_call *call, unsigned flags, uint64_t *id_p)
{
    Rgpu__Call msg = RGPU__CALL__INIT;
    bool inline_data = call->data_len <= PROTO_INLINE_MAX;
    rg_status_t status;
    CUresult res;

    if (sess.dead)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (sess.forked) /* as in CUDA: a forked child cannot use its parent's context */
        return CUDA_ERROR_NOT_INITIALIZED;
    if (sess.deferred_bytes > DEFERRED_DRAIN_AT && (res = deferred_drain()) != CUDA_SUCCESS)
        return res;
    if (call->on_send != NULL)
        call->on_send(call->on_send_arg);
    msg.id = sess.next_call_id++;
    msg.op = call->op;
    msg.ctx = call->ctx ? call->ctx : cli_ctx_current_id();
    msg.n_args = call->nargs;
    msg.args = call->args;
    if (inline_data && call->data_len > 0) {
        msg.data.data = (uint8_t *)call->data;
        msg.data.len = call->data_len;
    }
    *id_p = msg.id;
    if (sess.trace_calls)
        trace_call(&msg, flags);
    if ((flags & PROTO_FLAG_NOREPLY) && inline_data && batch_append(&msg, flags, true))
        return sess.dead ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
    /* A synchronous call goes out in the same write as the batch before it: the worker wakes
     * once for both, not twice. */
    if (inline_data && sess.batch_len > 0 && batch_append(&msg, flags, false))
        return batch_flush();
    if ((res = batch_flush()) != CUDA_SUCCESS)
        return res;
    status = proto_send_flags(sess.conn, PROTO_CALL, flags, &msg.base,
                              inline_data ? NULL : call->data, inline_data ? 0 : call->data_len);
    return status == RG_OK ? CUDA_SUCCESS : session_lost("send", status);
}

/* Receive bulk of len bytes into dst (cap bytes of room), dropping what does not fit. */
static rg_status_t recv_bulk(void *dst, size_t cap, uint64_t len, size_t *got_p)
{
    size_t take = len < cap ? (size_t)len : cap;
    rg_status_t status = RG_OK;

    if (take > 0)
        status = transport_recv(sess.conn, dst, take);
    if (status == RG_OK && len > take)
        status = proto_discard(sess.conn, len - take);
    *got_p = take;
    return status;
}

static void take_async_error(const uint8_t *buf, size_t len)
{
    Rgpu__AsyncError *e = rgpu__async_error__unpack(&sess.arena.allocator, len, buf);

    if (e == NULL)
        return;
    rg_debug("asynchronous %s failed: %s", proto_op_name(e->op),
             e->message ? e->message : "");
    if (sess.async_error == CUDA_SUCCESS)
        sess.async_error = (CUresult)e->result;
    rgpu__async_error__free_unpacked(e, &sess.arena.allocator);
    proto_arena_reset(&sess.arena);
}

static void fill_reply(struct cli_call *call, const Rgpu__Reply *r)
{
    call->nout = (unsigned)r->n_out;
    for (size_t i = 0; call->out != NULL && i < r->n_out && i < call->out_cap; i++)
        call->out[i] = r->out[i];
    call->rdata_len = 0;
    if (r->data.len > 0 && call->rdata != NULL) {
        call->rdata_len = r->data.len < call->rdata_cap ? r->data.len : call->rdata_cap;
        memcpy(call->rdata, r->data.data, call->rdata_len);
    }
}

/* A reply to a deferred DtoH call: its data lands in the registered destination. */
static CUresult take_deferred(const struct proto_frame_hdr *hdr, const Rgpu__Reply *r)
{
    struct deferred d = sess.deferred[0];
    size_t got = 0;
    rg_status_t status = RG_OK;

    memmove(sess.deferred, sess.deferred + 1, --sess.ndeferred * sizeof(*sess.deferred));
    sess.deferred_bytes -= d.len;
    if (r->data.len > 0)
        memcpy(d.dst, r->data.data, r->data.len < d.len ? r->data.len : d.len);
    if (hdr->bulk_len > 0)
        status = recv_bulk(d.dst, d.len, hdr->bulk_len, &got);
    if (status != RG_OK)
        return session_lost("receive", status);
    if (r->result != CUDA_SUCCESS && sess.async_error == CUDA_SUCCESS)
        sess.async_error = (CUresult)r->result;
    return CUDA_SUCCESS;
}

/* Read one Reply frame (already received header and message) for id or a deferred call.
 * Returns true in *done_p when it was the reply to `call`. */
static CUresult take_reply(const struct proto_frame_hdr *hdr, struct cli_call *call, uint64_t id,
                           bool *done_p, CUresult *result_p)
{
    Rgpu__Reply *r = rgpu__reply__unpack(&sess.arena.allocator, hdr->msg_len, sess.recv_buf);
    CUresult res = CUDA_SUCCESS;
    size_t got = 0;
    rg_status_t status;

    if (r == NULL)
        return session_lost("receive", RG_ERR_PROTO);
    if (sess.ndeferred > 0 && r->id == sess.deferred[0].id) {
        res = take_deferred(hdr, r);
    } else if (r->id == id && call != NULL) {
        fill_reply(call, r);
        status = recv_bulk((uint8_t *)call->rdata + call->rdata_len,
                           call->rdata_cap - call->rdata_len, hdr->bulk_len, &got);
        call->rdata_len += got;
        *result_p = (CUresult)r->result;
        *done_p = true;
        if (status != RG_OK)
            res = session_lost("receive", status);
    } else {
        rg_error("reply %llu from %s matches no call", (unsigned long long)r->id,
                 sess.server);
        res = session_lost("receive", RG_ERR_PROTO);
    }
    rgpu__reply__free_unpacked(r, &sess.arena.allocator);
    proto_arena_reset(&sess.arena);
    return res;
}

/* What the session's kernels printed (device printf): to this process's stdout, as locally. */
static rg_status_t take_output(uint64_t len, unsigned flags)
{
    FILE *to = (flags & PROTO_OUTPUT_STDERR) ? stderr : stdout;
    char buf[16384];

    while (len > 0) {
        size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        rg_status_t st = transport_recv(sess.conn, buf, n);
        if (st != RG_OK)
            return st;
        fwrite(buf, 1, n, to);
        len -= n;
    }
    fflush(to);
    return RG_OK;
}

/* Process frames until the reply to id arrives (id 0: until no deferred reply is pending). */
static CUresult wait_reply(struct cli_call *call, uint64_t id, CUresult *result_p)
{
    struct proto_frame_hdr hdr;
    bool done = false;
    rg_status_t status;
    CUresult res;

    while (!done && (id != 0 || sess.ndeferred > 0)) {
        status = proto_recv(sess.conn, &hdr, sess.recv_buf, RECV_BUF_SIZE);
        if (status != RG_OK)
            return session_lost("receive", status);
        if (hdr.type == PROTO_OUTPUT) {
            if (take_output(hdr.bulk_len, hdr.flags) != RG_OK)
                return session_lost("receive", RG_ERR_IO);
            continue;
        }
        if (hdr.type == PROTO_ASYNC_ERROR) {
            take_async_error(sess.recv_buf, hdr.msg_len);
            if (hdr.bulk_len > 0 && proto_discard(sess.conn, hdr.bulk_len) != RG_OK)
                return session_lost("receive", RG_ERR_IO);
            continue;
        }
        if (hdr.type != PROTO_REPLY)
            return session_lost("unexpected frame", RG_ERR_PROTO);
        res = take_reply(&hdr, call, id, &done, result_p);
        if (res != CUDA_SUCCESS)
            return res;
    }
    return CUDA_SUCCESS;
}

CUresult cli_call_simple(unsigned op, unsigned nargs, const uint64_t *args, const void *data,
                         size_t len, uint64_t *out)
{
    CUresult res = cli_need_ctx();

    return res != CUDA_SUCCESS ? res : cli_call_device(op, nargs, args, data, len, out);
}

CUresult cli_call_device(unsigned op, unsigned nargs, const uint64_t *args, const void *data,
                         size_t len, uint64_t *out)
{
    struct cli_call call = {.op = op, .nargs = nargs, .data = data, .data_len = len,
                            .out = out, .out_cap = out ? 1 : 0};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    memcpy(call.args, args, nargs * sizeof(*args));
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && out != NULL && call.nout < 1)
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

/* A synchronous call's reply came (res; lock held since it was sent): the lane copies sent
 * before it are done on the worker, so the client's lanes finish theirs now. */
static CUresult lanes_after(CUresult res)
{
    CUresult lanes_res = cli_lanes_settle(cli_lanes_sent(), res == CUDA_ERROR_DEVICE_UNAVAILABLE);

    return res == CUDA_SUCCESS ? lanes_res : res;
}

CUresult cli_call_sync(struct cli_call *call)
{
    CUresult res, result = CUDA_SUCCESS;
    double since = cli_stats_now_us();
    uint64_t id = 0;

    pthread_mutex_lock(&sess.lock);
    res = send_call(call, 0, &id);
    if (res == CUDA_SUCCESS)
        res = lanes_after(wait_reply(call, id, &result));
    cli_stats_count(call->op, true, since);
    if (res == CUDA_SUCCESS) {
        res = result;
        if (res != CUDA_SUCCESS)
            rg_debug("%s returned %d", proto_op_name(call->op), (int)res);
        if (sess.async_error != CUDA_SUCCESS) {
            if (res == CUDA_SUCCESS)
                res = sess.async_error;
            sess.async_error = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&sess.lock);
    return res;
}

CUresult cli_call_async(struct cli_call *call)
{
    CUresult res;
    uint64_t id;

    pthread_mutex_lock(&sess.lock);
    res = send_call(call, PROTO_FLAG_NOREPLY, &id);
    cli_stats_count(call->op, false, 0);
    pthread_mutex_unlock(&sess.lock);
    return res;
}

static bool deferred_push(uint64_t id, void *dst, size_t len)
{
    if (!rg_array_grow((void **)&sess.deferred, &sess.deferred_cap, sess.ndeferred,
                       sizeof(*sess.deferred), 16))
        return false;
    sess.deferred[sess.ndeferred++] = (struct deferred){id, dst, len};
    sess.deferred_bytes += len;
    return true;
}

CUresult cli_call_deferred(struct cli_call *call, void *dst, size_t len)
{
    CUresult res, result = CUDA_SUCCESS;
    uint64_t id = 0;

    pthread_mutex_lock(&sess.lock);
    res = send_call(call, 0, &id);
    cli_stats_count(call->op, false, 0);
    if (res == CUDA_SUCCESS && !deferred_push(id, dst, len)) {
        /* No room to remember it: wait for it now instead. */
        call->rdata = dst;
        call->rdata_cap = len;
        res = wait_reply(call, id, &result);
        if (res == CUDA_SUCCESS)
            res = result;
    }
    pthread_mutex_unlock(&sess.lock);
    return res;
}

CUresult cli_session_fence(void)
{
    struct cli_call call = {.op = PROTO_OP_NOP};
    CUresult res, result = CUDA_SUCCESS;
    double since = cli_stats_now_us();
    uint64_t id = 0;

    pthread_mutex_lock(&sess.lock);
    res = sess.said_bye ? CUDA_ERROR_DEINITIALIZED : send_call(&call, 0, &id);
    if (res == CUDA_SUCCESS)
        res = lanes_after(wait_reply(&call, id, &result));
    cli_stats_count(call.op, true, since);
    pthread_mutex_unlock(&sess.lock);
    return res;
}

/* sess.conn never changes once the session is open; a session lost meanwhile is noticed by
 * the call that follows. */
struct transport_conn *cli_session_rdma_conn(void)
{
    if (!cli_initialized() || sess.forked || sess.conn == NULL ||
        sess.conn->ops != &transport_rdma_ops)
        return NULL;
    return sess.conn;
}

CUresult cli_status_to_cu(rg_status_t status)
{
    switch (status) {
    case RG_OK: return CUDA_SUCCESS;
    case RG_ERR_INVALID: return CUDA_ERROR_INVALID_VALUE;
    case RG_ERR_NOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
    case RG_ERR_UNSUPPORTED: return CUDA_ERROR_NOT_SUPPORTED;
    case RG_ERR_NOT_FOUND: return CUDA_ERROR_NOT_FOUND;
    default: return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
}

/* At exit: flush what is pending and say goodbye. trylock: another thread may be blocked in a
 * synchronous call (holding the lock) while the process exits; never hang the exit for it. */
__attribute__((destructor)) static void session_close(void)
{
    int tries = 0;

    while (pthread_mutex_trylock(&sess.lock) != 0)
        if (++tries > 100 || usleep(1000) != 0)
            return;
    /* A forked child exiting must not end its parent's session. */
    if (sess.conn != NULL && !sess.dead && getpid() == sess.pid && batch_flush() == CUDA_SUCCESS) {
        proto_send(sess.conn, PROTO_BYE, NULL, NULL, 0);
        sess.said_bye = true; /* pinned memory freed by later destructors needs no fence */
    }
    pthread_mutex_unlock(&sess.lock);
}
