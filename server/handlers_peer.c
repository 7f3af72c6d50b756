/* Server-to-server copies (proto/ops.def PEER_*): for one process with devices on two servers,
 * the client asks the destination's worker to receive (PEER_RECV: it opens a side listener,
 * transport/side_listener.h, on an ephemeral port of every address, with the secret the client
 * chose, and a thread takes the one connection that presents it, then writes what arrives into
 * device memory), then the source's worker to send (PEER_SEND: it connects there, presents the
 * secret and streams the range out of device memory), then the destination to finish
 * (PEER_WAIT: the receiving thread's outcome). A session has at most one receive at a time
 * (the peer component's state). The bytes moved are the tenant's own device memory; the secret
 * keeps any other sender out: a connection without it is closed and the receive waits on for
 * the sender. No sender within PEER_ACCEPT_MS, or one that stops sending for that long, ends
 * the receive; a cancelling PEER_WAIT or the session's end cuts it at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/session.h"
#include "transport/side_listener.h"

#define PEER_SECRET_LEN 32
#define PEER_CHUNK      (4u << 20)
#define PEER_ACCEPT_MS  10000

struct peer_recv {
    bool running;
    struct transport_side_listener *listener;
    pthread_mutex_t lock;        /* conn and cancelled, between the thread and job_end */
    struct transport_conn *conn; /* the sender's connection while the thread reads it */
    bool cancelled;
    pthread_t thread;
    struct srv_session *s;
    CUcontext ctx;
    CUdeviceptr dst;
    size_t size;
    CUresult result;
};

static struct peer_recv *job_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_PEER);
}

/* The one sender (it presented the secret): the bytes, chunk by chunk into device memory. */
static CUresult recv_from(struct peer_recv *j, struct transport_conn *conn)
{
    uint8_t *buf = malloc(PEER_CHUNK);
    CUresult res = buf != NULL ? j->s->drv.cuCtxSetCurrent(j->ctx) : CUDA_ERROR_OUT_OF_MEMORY;

    for (size_t off = 0; off < j->size && res == CUDA_SUCCESS; off += PEER_CHUNK) {
        size_t len = j->size - off < PEER_CHUNK ? j->size - off : PEER_CHUNK;
        res = transport_recv(conn, buf, len) == RG_OK
                  ? j->s->drv.cuMemcpyHtoD(j->dst + off, buf, len)
                  : CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(buf);
    return res;
}

static bool take_sender(void *arg, struct transport_conn *conn, const uint8_t *tag)
{
    *(struct transport_conn **)arg = conn;
    return true;
}

/* The sender's connection published for job_end to cut, unless the receive was cancelled; a
 * sender that stops sending is cut after PEER_ACCEPT_MS. */
static bool connection_take(struct peer_recv *j, struct transport_conn *conn)
{
    bool go;

    transport_set_recv_idle(conn, PEER_ACCEPT_MS);
    pthread_mutex_lock(&j->lock);
    if ((go = !j->cancelled))
        j->conn = conn;
    pthread_mutex_unlock(&j->lock);
    return go;
}

static void *recv_main(void *arg)
{
    struct peer_recv *j = arg;
    struct transport_conn *conn = NULL;

    if (transport_side_accept(j->listener, 1, PEER_ACCEPT_MS, -1, take_sender, &conn) != RG_OK ||
        !connection_take(j, conn))
        j->result = CUDA_ERROR_NOT_READY; /* no sender came (or PEER_WAIT cancelled) */
    else
        j->result = recv_from(j, conn);
    if (conn != NULL) {
        pthread_mutex_lock(&j->lock);
        j->conn = NULL;
        pthread_mutex_unlock(&j->lock);
        transport_close(conn);
    }
    return NULL;
}

CUresult srv_op_peer_recv(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PEER_RECV *a = SRV_ARGS(call, PEER_RECV);
    const ProtobufCBinaryData *secret = &call->msg->data;
    struct peer_recv *job = job_of(s);
    const char *port;
    char what[80];
    CUresult res;

    if (job->running)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (a->size == 0 || a->dst + a->size < a->dst || secret->len != PEER_SECRET_LEN)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = s->drv.cuCtxGetCurrent(&job->ctx)) != CUDA_SUCCESS)
        return res;
    snprintf(what, sizeof(what), "session %llu: a server-to-server copy",
             (unsigned long long)s->id);
    if (transport_side_open(&(struct transport_side_params){.addr = "[::]:0",
                                                            .secret = secret->data,
                                                            .secret_len = PEER_SECRET_LEN,
                                                            .hello_ms = PEER_ACCEPT_MS,
                                                            .what = what},
                            &job->listener) != RG_OK)
        return CUDA_ERROR_OPERATING_SYSTEM;
    port = strrchr(transport_side_addr(job->listener), ':');
    call->out[0] = port != NULL ? strtoull(port + 1, NULL, 10) : 0;
    job->s = s;
    job->dst = a->dst;
    job->size = a->size;
    job->cancelled = false;
    if (pthread_create(&job->thread, NULL, recv_main, job) != 0) {
        transport_side_close(job->listener);
        job->listener = NULL;
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    job->running = true;
    call->nout = 1;
    return CUDA_SUCCESS;
}

/* The receive's outcome, once its thread is done; cancel: a sender not come yet is not
 * waited for (the waiting accept gives up), and one sending is cut. */
static CUresult job_end(struct peer_recv *job, bool cancel)
{
    if (cancel) {
        transport_side_cancel(job->listener);
        pthread_mutex_lock(&job->lock);
        job->cancelled = true;
        if (job->conn != NULL) /* a sender connected: its transfer is cut too */
            transport_shutdown(job->conn);
        pthread_mutex_unlock(&job->lock);
    }
    pthread_join(job->thread, NULL);
    transport_side_close(job->listener);
    job->listener = NULL;
    job->running = false;
    return job->result;
}

CUresult srv_op_peer_wait(struct srv_session *s, struct srv_call *call)
{
    struct peer_recv *job = job_of(s);

    if (!job->running)
        return CUDA_ERROR_ILLEGAL_STATE;
    return job_end(job, SRV_ARGS(call, PEER_WAIT)->cancel != 0);
}

static rg_status_t peer_init(struct srv_session *s, void *state)
{
    struct peer_recv *job = state;

    return pthread_mutex_init(&job->lock, NULL) == 0 ? RG_OK : RG_ERR_NOMEM;
}

/* A receive never waited for is cancelled and its thread joined before the memory it writes
 * goes (it outlived its session: e11cedd). */
static void peer_teardown(struct srv_session *s, void *state)
{
    struct peer_recv *job = state;

    if (job->running)
        job_end(job, true);
    pthread_mutex_destroy(&job->lock);
}

const struct srv_component srv_peer_component = {.name = "peer",
                                                 .state_size = sizeof(struct peer_recv),
                                                 .init = peer_init,
                                                 .teardown = peer_teardown};

/* data: the secret, then the destination's host as the client reaches it (no port). */
CUresult srv_op_peer_send(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PEER_SEND *a = SRV_ARGS(call, PEER_SEND);
    const ProtobufCBinaryData *d = &call->msg->data;
    const struct transport_opts opts = {.connect_timeout_ms = PEER_ACCEPT_MS};
    struct transport_conn *conn;
    struct iovec iov = {d->data, PEER_SECRET_LEN};
    char host[256], addr[sizeof(host) + 16];
    uint8_t *buf;
    size_t hlen;
    CUresult res = CUDA_SUCCESS;

    if (a->size == 0 || d->len <= PEER_SECRET_LEN || d->len - PEER_SECRET_LEN >= sizeof(host))
        return CUDA_ERROR_INVALID_VALUE;
    hlen = d->len - PEER_SECRET_LEN;
    memcpy(host, d->data + PEER_SECRET_LEN, hlen);
    host[hlen] = '\0';
    snprintf(addr, sizeof(addr), strchr(host, ':') != NULL && host[0] != '[' ? "[%s]:%u" : "%s:%u",
             host, (unsigned)a->port); /* a wrong port fails to connect, as a closed one does */
    if (transport_tcp_ops.connect(addr, &opts, &conn) != RG_OK) /* logged by the transport */
        return CUDA_ERROR_NOT_READY;                            /* the client relays it instead */
    if ((buf = malloc(PEER_CHUNK)) == NULL || transport_sendv(conn, &iov, 1) != RG_OK)
        res = buf == NULL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
    for (size_t off = 0; off < a->size && res == CUDA_SUCCESS; off += PEER_CHUNK) {
        size_t len = a->size - off < PEER_CHUNK ? a->size - off : PEER_CHUNK;
        res = s->drv.cuMemcpyDtoH(buf, a->src + off, len);
        iov = (struct iovec){buf, len};
        if (res == CUDA_SUCCESS && transport_sendv(conn, &iov, 1) != RG_OK)
            res = CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(buf);
    transport_close(conn);
    return res;
}

/* ---- peer access between this server's devices (several GPUs, one process) -------------- */

CUresult srv_op_p2p_query(struct srv_session *s, struct srv_call *call)
{
    static const CUdevice_P2PAttribute attrs[] = {
        CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
        CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
        CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED};
    const struct proto_args_P2P_QUERY *a = SRV_ARGS(call, P2P_QUERY);
    CUdevice src, dst;
    int v = 0;
    CUresult res;

    if (a->src >= (uint64_t)s->ndevices || a->dst >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    src = s->devices[a->src];
    dst = s->devices[a->dst];
    if ((res = s->drv.cuDeviceCanAccessPeer(&v, src, dst)) != CUDA_SUCCESS)
        return res;
    call->out[call->nout++] = (uint64_t)v;
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        if (s->drv.cuDeviceGetP2PAttribute(&v, attrs[i], src, dst) != CUDA_SUCCESS)
            v = 0; /* the same device, or an attribute this driver does not know */
        call->out[call->nout++] = (uint64_t)(int64_t)v;
    }
    return CUDA_SUCCESS;
}

CUresult srv_op_ctx_peer_access(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_PEER_ACCESS *a = SRV_ARGS(call, CTX_PEER_ACCESS);
    CUcontext peer;
    CUresult res = srv_ctx_real(s, a->peer, &peer);

    if (res != CUDA_SUCCESS)
        return res;
    return a->enable ? s->drv.cuCtxEnablePeerAccess(peer, (unsigned)a->flags)
                     : s->drv.cuCtxDisablePeerAccess(peer);
}
