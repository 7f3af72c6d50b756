/* Server-to-server copies (proto/ops.def PEER_*): for one process with devices on two servers,
 * the client asks the destination's worker to receive (PEER_RECV: it listens on an ephemeral
 * TCP port and a thread takes one connection that presents the secret the client chose, then
 * writes what arrives into device memory), then the source's worker to send (PEER_SEND: it
 * connects there, presents the secret and streams the range out of device memory), then the
 * destination to finish (PEER_WAIT: the receiving thread's outcome). A session has at most one
 * receive at a time (the peer component's state). The bytes moved are the tenant's own
 * device memory; the secret keeps any other sender out. A connection that stops sending (or
 * never presents the secret) is cut after PEER_ACCEPT_MS without progress, and a cancelling
 * PEER_WAIT or the session's end cuts it at once. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/secret.h"
#include "server/session.h"

#define PEER_SECRET_LEN 32
#define PEER_CHUNK      (4u << 20)
#define PEER_ACCEPT_MS  10000

struct peer_recv {
    bool running;
    int lfd;
    pthread_mutex_t lock; /* fd and cancelled, between the thread and job_end */
    int fd;               /* the sender's connection while the thread reads it */
    bool cancelled;
    pthread_t thread;
    struct srv_session *s;
    CUcontext ctx;
    CUdeviceptr dst;
    size_t size;
    uint8_t secret[PEER_SECRET_LEN];
    CUresult result;
};

static struct peer_recv *job_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_PEER);
}

static bool io_full(int fd, uint8_t *p, size_t n, bool out)
{
    while (n > 0) {
        ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool secret_eq(const uint8_t *a, const uint8_t *b)
{
    return rg_secret_equal(a, b, PEER_SECRET_LEN);
}

/* The one sender: its secret, then the bytes, chunk by chunk into device memory. */
static CUresult recv_from(struct peer_recv *j, int fd)
{
    uint8_t secret[PEER_SECRET_LEN], *buf = malloc(PEER_CHUNK);
    CUresult res = buf != NULL ? j->s->drv.cuCtxSetCurrent(j->ctx) : CUDA_ERROR_OUT_OF_MEMORY;

    if (res == CUDA_SUCCESS &&
        (!io_full(fd, secret, sizeof(secret), false) || !secret_eq(secret, j->secret)))
        res = CUDA_ERROR_NOT_PERMITTED;
    for (size_t off = 0; off < j->size && res == CUDA_SUCCESS; off += PEER_CHUNK) {
        size_t len = j->size - off < PEER_CHUNK ? j->size - off : PEER_CHUNK;
        res = io_full(fd, buf, len, false) ? j->s->drv.cuMemcpyHtoD(j->dst + off, buf, len)
                                           : CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(buf);
    return res;
}

/* The sender's connection published for job_end to cut, unless the receive was cancelled; a
 * sender that stops sending (or never presents the secret) is cut after PEER_ACCEPT_MS. */
static bool connection_take(struct peer_recv *j, int fd)
{
    struct timeval limit = {PEER_ACCEPT_MS / 1000, 0};
    bool go;

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    pthread_mutex_lock(&j->lock);
    if ((go = !j->cancelled))
        j->fd = fd;
    pthread_mutex_unlock(&j->lock);
    return go;
}

static void *recv_main(void *arg)
{
    struct peer_recv *j = arg;
    struct pollfd pfd = {.fd = j->lfd, .events = POLLIN};
    int fd = -1;

    if (poll(&pfd, 1, PEER_ACCEPT_MS) != 1 || !(pfd.revents & POLLIN) ||
        (fd = accept(j->lfd, NULL, NULL)) < 0 || !connection_take(j, fd))
        j->result = CUDA_ERROR_NOT_READY; /* no sender came (or PEER_WAIT cancelled) */
    else
        j->result = recv_from(j, fd);
    if (fd >= 0) {
        pthread_mutex_lock(&j->lock);
        j->fd = -1;
        pthread_mutex_unlock(&j->lock);
        close(fd);
    }
    return NULL;
}

/* A listening socket on an ephemeral port of every address; its port in *port_p. */
static int listen_any(uint64_t *port_p)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), off = 0;

    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)); /* IPv4 too */
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port_p = ntohs(a.sin6_port);
    return fd;
}

CUresult srv_op_peer_recv(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PEER_RECV *a = SRV_ARGS(call, PEER_RECV);
    const ProtobufCBinaryData *secret = &call->msg->data;
    struct peer_recv *job = job_of(s);
    CUresult res;

    if (job->running)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (a->size == 0 || a->dst + a->size < a->dst || secret->len != PEER_SECRET_LEN)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = s->drv.cuCtxGetCurrent(&job->ctx)) != CUDA_SUCCESS)
        return res;
    if ((job->lfd = listen_any(&call->out[0])) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    job->s = s;
    job->dst = a->dst;
    job->size = a->size;
    memcpy(job->secret, secret->data, PEER_SECRET_LEN);
    job->cancelled = false;
    if (pthread_create(&job->thread, NULL, recv_main, job) != 0) {
        close(job->lfd);
        job->lfd = -1;
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    job->running = true;
    call->nout = 1;
    return CUDA_SUCCESS;
}

/* The receive's outcome, once its thread is done; cancel: a sender not come yet is not
 * waited for (the waiting accept gives up). */
static CUresult job_end(struct peer_recv *job, bool cancel)
{
    if (cancel) {
        shutdown(job->lfd, SHUT_RDWR);
        pthread_mutex_lock(&job->lock);
        job->cancelled = true;
        if (job->fd >= 0) /* a sender connected: its transfer is cut too */
            shutdown(job->fd, SHUT_RDWR);
        pthread_mutex_unlock(&job->lock);
    }
    pthread_join(job->thread, NULL);
    close(job->lfd);
    job->lfd = -1;
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

    job->lfd = job->fd = -1;
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

const struct srv_component srv_peer_component = {
    .name = "peer", .state_size = sizeof(struct peer_recv), .init = peer_init,
    .teardown = peer_teardown};

/* Connected to host:port, or -1. */
static int connect_to(const char *host, uint64_t port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char service[16];
    int fd = -1;

    snprintf(service, sizeof(service), "%u", (unsigned)port);
    if (getaddrinfo(host, service, &hints, &ai) != 0)
        return -1;
    for (struct addrinfo *p = ai; p != NULL && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

CUresult srv_op_peer_send(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PEER_SEND *a = SRV_ARGS(call, PEER_SEND);
    const ProtobufCBinaryData *d = &call->msg->data;
    char host[256];
    uint8_t *buf;
    int fd;
    CUresult res = CUDA_SUCCESS;

    if (a->size == 0 || d->len <= PEER_SECRET_LEN || d->len - PEER_SECRET_LEN >= sizeof(host))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(host, d->data + PEER_SECRET_LEN, d->len - PEER_SECRET_LEN);
    host[d->len - PEER_SECRET_LEN] = '\0';
    if ((fd = connect_to(host, a->port)) < 0) {
        rg_warn("server-to-server copy: cannot connect to %s:%u", RG_PEER_STR(host),
                (unsigned)a->port);
        return CUDA_ERROR_NOT_READY; /* the client relays it instead */
    }
    if ((buf = malloc(PEER_CHUNK)) == NULL || !io_full(fd, d->data, PEER_SECRET_LEN, true))
        res = buf == NULL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
    for (size_t off = 0; off < a->size && res == CUDA_SUCCESS; off += PEER_CHUNK) {
        size_t len = a->size - off < PEER_CHUNK ? a->size - off : PEER_CHUNK;
        res = s->drv.cuMemcpyDtoH(buf, a->src + off, len);
        if (res == CUDA_SUCCESS && !io_full(fd, buf, len, true))
            res = CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(buf);
    close(fd);
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
