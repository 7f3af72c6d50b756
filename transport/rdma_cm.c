/* The rdma backend's connections: librdmacm resolve/connect and listen/accept, the verbs
 * resources of a connection (protection domain, completion channel and queue, RC queue pair,
 * registered send and receive slots), shutdown and close, and the ops table. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/secret.h"
#include "transport/rdma_conn.h"

struct rdma_listener {
    struct transport_listener super;
    const struct rdma_dl *dl;
    struct rdma_event_channel *ech;
    struct rdma_cm_id *id;
    char host[NI_MAXHOST];
};

/* Set while a caller that reports failures itself (the session upgrade) connects or listens:
 * the transport's own failure lines go to debug, so a fallback is logged once, by the caller. */
static __thread bool rdma_quiet;
#define RDMA_FAIL_LOG(...)                                                                         \
    do {                                                                                           \
        if (rdma_quiet)                                                                            \
            rg_debug(__VA_ARGS__);                                                                 \
        else                                                                                       \
            rg_warn(__VA_ARGS__);                                                                  \
    } while (0)

void rdma_set_quiet(bool quiet)
{
    rdma_quiet = quiet;
}

static struct rdma_listener *rdma_listener_of(struct transport_listener *l)
{
    return (struct rdma_listener *)((char *)l - offsetof(struct rdma_listener, super));
}

static int64_t rdma_cm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

rg_status_t transport_rdma_probe(char *why, size_t len)
{
    const struct rdma_dl *dl = rdma_dl_get(why, len);
    struct ibv_device **list;
    int n = 0;

    if (dl == NULL)
        return RG_ERR_UNSUPPORTED;
    list = dl->get_device_list(&n);
    if (list != NULL)
        dl->free_device_list(list);
    if (n <= 0) {
        snprintf(why, len, "no RDMA device");
        return RG_ERR_UNSUPPORTED;
    }
    return RG_OK;
}

/* The status of a failed cm call, with errno translated into words for the log. */
static rg_status_t rdma_cm_errno(const char *what, const char *peer)
{
    int err = errno;

    if (err == ENODEV || err == EADDRNOTAVAIL || err == EAFNOSUPPORT) {
        RDMA_FAIL_LOG("rdma %s %s failed: no RDMA device for that address (%s)", what, peer,
                      strerror(err));
        return RG_ERR_UNSUPPORTED;
    }
    RDMA_FAIL_LOG("rdma %s %s failed: %s", what, peer, strerror(err));
    return transport_errno_status(err);
}

rg_status_t rdma_cm_wait(const struct rdma_dl *dl, struct rdma_event_channel *ch,
                         enum rdma_cm_event_type want, int timeout_ms, const char *peer,
                         struct rdma_cm_id **id_p, void *pdata, size_t *pdata_len)
{
    int64_t deadline = rdma_cm_now_ms() + timeout_ms;
    struct rdma_cm_event *ev;
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};

    while (dl->get_cm_event(ch, &ev) != 0) {
        int left = (int)(deadline - rdma_cm_now_ms());
        if (errno != EAGAIN && errno != EINTR)
            return rdma_cm_errno("waiting for an event from", peer);
        if (left <= 0 || (poll(&p, 1, left) == 0)) {
            RDMA_FAIL_LOG("rdma connection with %s: no %s within %d ms", peer, dl->event_str(want),
                          timeout_ms);
            return RG_ERR_TIMEOUT;
        }
    }
    enum rdma_cm_event_type got = ev->event;
    int status = ev->status;
    if (got == want && id_p != NULL)
        *id_p = ev->id;
    if (got == want && pdata != NULL) {
        size_t n = ev->param.conn.private_data_len;
        *pdata_len = n < *pdata_len ? n : *pdata_len;
        if (*pdata_len > 0)
            memcpy(pdata, ev->param.conn.private_data, *pdata_len);
    }
    dl->ack_cm_event(ev);
    if (got == want)
        return RG_OK;
    RDMA_FAIL_LOG("rdma connection with %s: %s (status %d) while waiting for %s", peer,
                  dl->event_str(got), status, dl->event_str(want));
    if (got == RDMA_CM_EVENT_REJECTED)
        return RG_ERR_REFUSED;
    if (got == RDMA_CM_EVENT_ADDR_ERROR || got == RDMA_CM_EVENT_ROUTE_ERROR ||
        got == RDMA_CM_EVENT_UNREACHABLE)
        return RG_ERR_NOT_FOUND;
    return RG_ERR_IO;
}

static struct rdma_event_channel *rdma_new_channel(const struct rdma_dl *dl)
{
    struct rdma_event_channel *ch = dl->create_event_channel();

    if (ch == NULL) {
        rg_error("rdma_create_event_channel failed: %s", strerror(errno));
        return NULL;
    }
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    return ch;
}

/* ---- connection resources --------------------------------------------------------------- */

static rg_status_t rdma_alloc_slots(struct rdma_conn *c)
{
    size_t sbytes = (size_t)RDMA_SEND_DEPTH * RDMA_SLOT_SIZE;
    size_t rbytes = (size_t)RDMA_RECV_DEPTH * RDMA_SLOT_SIZE;

    c->send_buf = aligned_alloc(4096, sbytes);
    c->recv_buf = aligned_alloc(4096, rbytes);
    if (c->send_buf == NULL || c->recv_buf == NULL)
        return RG_ERR_NOMEM;
    c->send_mr = c->dl->reg_mr(c->pd, c->send_buf, sbytes, 0);
    c->recv_mr = c->dl->reg_mr(c->pd, c->recv_buf, rbytes, IBV_ACCESS_LOCAL_WRITE);
    if (c->send_mr == NULL || c->recv_mr == NULL) {
        rg_error("registering rdma buffers failed: %s", strerror(errno));
        return RG_ERR_IO;
    }
    return RG_OK;
}

/* Everything a connection needs on cm id c->id; undone by rdma_conn_free. */
static rg_status_t rdma_conn_setup(struct rdma_conn *c)
{
    struct ibv_context *verbs = c->id->verbs;
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
                                  .sq_sig_all = 0,
                                  .cap = {.max_send_wr = RDMA_SQ_DEPTH,
                                          .max_recv_wr = RDMA_RECV_DEPTH,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1,
                                          .max_inline_data = RDMA_INLINE_MAX}};
    rg_status_t st;

    c->super.ops = &transport_rdma_ops;
    c->watch_fd = -1;
    c->credits = RDMA_RECV_DEPTH;
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if ((c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
        (c->pd = c->dl->alloc_pd(verbs)) == NULL ||
        (c->cch = c->dl->create_comp_channel(verbs)) == NULL ||
        (c->cq = c->dl->create_cq(verbs, RDMA_CQ_DEPTH, c, c->cch, 0)) == NULL) {
        rg_error("setting up rdma resources for %s failed: %s", c->peer, strerror(errno));
        return RG_ERR_IO;
    }
    fcntl(c->cch->fd, F_SETFL, fcntl(c->cch->fd, F_GETFL) | O_NONBLOCK);
    qa.send_cq = qa.recv_cq = c->cq;
    if (c->dl->create_qp(c->id, c->pd, &qa) != 0) {
        rg_error("creating an rdma queue pair for %s failed: %s", c->peer, strerror(errno));
        return RG_ERR_IO;
    }
    c->max_inline = qa.cap.max_inline_data; /* what the provider granted */
    if ((st = rdma_alloc_slots(c)) != RG_OK)
        return st;
    for (unsigned i = 0; i < RDMA_RECV_DEPTH && st == RG_OK; i++)
        st = rdma_post_recv_slot(c, i);
    return st;
}

static void rdma_conn_free(struct rdma_conn *c)
{
    const struct rdma_dl *dl = c->dl;

    if (c->id != NULL && c->id->qp != NULL)
        dl->destroy_qp(c->id);
    if (c->send_mr != NULL)
        dl->dereg_mr(c->send_mr);
    if (c->recv_mr != NULL)
        dl->dereg_mr(c->recv_mr);
    if (c->cq != NULL)
        dl->destroy_cq(c->cq);
    if (c->cch != NULL)
        dl->destroy_comp_channel(c->cch);
    if (c->pd != NULL)
        dl->dealloc_pd(c->pd);
    if (c->id != NULL)
        dl->destroy_id(c->id);
    if (c->ech != NULL)
        dl->destroy_event_channel(c->ech);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    free(c->send_buf);
    free(c->recv_buf);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

static struct rdma_conn *rdma_conn_new(const struct rdma_dl *dl, const char *peer)
{
    struct rdma_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->dl = dl;
    c->wake_fd = -1;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    return c;
}

/* ---- connect ---------------------------------------------------------------------------- */

static rg_status_t rdma_resolve(const char *addr, int passive, struct sockaddr_storage *ss,
                                char *host, size_t hlen)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res;
    char port[NI_MAXSERV];
    int rc;

    if (addr == NULL || rg_split_hostport(addr, host, hlen, port, sizeof(port), NULL) != RG_OK) {
        RDMA_FAIL_LOG("rdma address %s: expected host:port", addr != NULL ? addr : "(null)");
        return RG_ERR_INVALID;
    }
    if ((rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res)) != 0) {
        RDMA_FAIL_LOG("rdma address %s: %s", addr, gai_strerror(rc));
        return RG_ERR_NOT_FOUND;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return RG_OK;
}

/* Resolve address and route, set up the resources and connect (c->id created on c->ech). */
static rg_status_t rdma_connect_id(struct rdma_conn *c, struct sockaddr *dst, int timeout,
                                   const void *pdata, size_t pdata_len)
{
    struct rdma_conn_param cp = {.private_data = pdata,
                                 .private_data_len = (uint8_t)pdata_len,
                                 .responder_resources = 1,
                                 .initiator_depth = 1,
                                 .retry_count = 7,
                                 .rnr_retry_count = RDMA_RNR_RETRY};
    const struct rdma_dl *dl = c->dl;
    rg_status_t st;

    if (dl->resolve_addr(c->id, NULL, dst, timeout) != 0)
        return rdma_cm_errno("connect to", c->peer);
    if ((st = rdma_cm_wait(dl, c->ech, RDMA_CM_EVENT_ADDR_RESOLVED, timeout, c->peer, NULL, NULL,
                           NULL)) != RG_OK)
        return st;
    if (dl->resolve_route(c->id, timeout) != 0)
        return rdma_cm_errno("route to", c->peer);
    if ((st = rdma_cm_wait(dl, c->ech, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout, c->peer, NULL, NULL,
                           NULL)) != RG_OK)
        return st;
    if ((st = rdma_conn_setup(c)) != RG_OK)
        return st;
    if (dl->connect(c->id, &cp) != 0)
        return rdma_cm_errno("connect to", c->peer);
    return rdma_cm_wait(dl, c->ech, RDMA_CM_EVENT_ESTABLISHED, timeout, c->peer, NULL, NULL, NULL);
}

rg_status_t transport_rdma_connect_pdata(const char *addr, const struct transport_opts *opts,
                                         const void *pdata, size_t pdata_len,
                                         struct transport_conn **conn_p)
{
    int timeout = opts != NULL && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms
                                                               : RDMA_CM_TIMEOUT_MS;
    struct sockaddr_storage ss;
    char host[NI_MAXHOST], why[256];
    const struct rdma_dl *dl = rdma_dl_get(why, sizeof(why));
    struct rdma_conn *c;
    rg_status_t st;

    if (dl == NULL) {
        RDMA_FAIL_LOG("rdma connect to %s failed: %s", addr != NULL ? addr : "(null)", why);
        return RG_ERR_UNSUPPORTED;
    }
    if (pdata_len > 56 || (st = rdma_resolve(addr, 0, &ss, host, sizeof(host))) != RG_OK)
        return pdata_len > 56 ? RG_ERR_INVALID : st;
    if ((c = rdma_conn_new(dl, addr)) == NULL)
        return RG_ERR_NOMEM;
    c->io_timeout_ms = opts != NULL ? opts->io_timeout_ms : 0;
    if ((c->ech = rdma_new_channel(dl)) == NULL || dl->create_id(c->ech, &c->id, c, RDMA_PS_TCP))
        st = RG_ERR_IO;
    else
        st = rdma_connect_id(c, (struct sockaddr *)&ss, timeout, pdata, pdata_len);
    if (st != RG_OK) {
        if (st == RG_ERR_REFUSED)
            RDMA_FAIL_LOG("rdma connect to %s failed: refused", addr);
        rdma_conn_free(c);
        return st;
    }
    *conn_p = &c->super;
    return RG_OK;
}

static rg_status_t trdma_connect(const char *addr, const struct transport_opts *opts,
                                 struct transport_conn **conn_p)
{
    return transport_rdma_connect_pdata(addr, opts, NULL, 0, conn_p);
}

/* ---- listen and accept ------------------------------------------------------------------ */

static void rdma_listener_close(struct transport_listener *listener)
{
    struct rdma_listener *l;

    if (listener == NULL)
        return;
    l = rdma_listener_of(listener);
    if (l->id != NULL)
        l->dl->destroy_id(l->id);
    if (l->ech != NULL)
        l->dl->destroy_event_channel(l->ech);
    free(l);
}

static rg_status_t trdma_listen(const char *addr, struct transport_listener **listener_p)
{
    char why[256];
    const struct rdma_dl *dl = rdma_dl_get(why, sizeof(why));
    struct sockaddr_storage ss;
    struct rdma_listener *l;
    rg_status_t st;

    if (dl == NULL) {
        RDMA_FAIL_LOG("rdma listen on %s failed: %s", addr != NULL ? addr : "(null)", why);
        return RG_ERR_UNSUPPORTED;
    }
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return RG_ERR_NOMEM;
    l->super.ops = &transport_rdma_ops;
    l->dl = dl;
    if ((st = rdma_resolve(addr, 1, &ss, l->host, sizeof(l->host))) == RG_OK &&
        ((l->ech = rdma_new_channel(dl)) == NULL ||
         dl->create_id(l->ech, &l->id, l, RDMA_PS_TCP) != 0))
        st = RG_ERR_IO;
    if (st == RG_OK &&
        (dl->bind_addr(l->id, (struct sockaddr *)&ss) != 0 || dl->listen(l->id, 16) != 0))
        st = rdma_cm_errno("listen on", addr);
    if (st != RG_OK) {
        rdma_listener_close(&l->super);
        return st;
    }
    *listener_p = &l->super;
    return RG_OK;
}

static int rdma_listener_fd(struct transport_listener *listener)
{
    return rdma_listener_of(listener)->ech->fd;
}

static rg_status_t rdma_listener_addr(struct transport_listener *listener, char *buf, size_t len)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    int n = snprintf(buf, len, strchr(l->host, ':') ? "[%s]:%u" : "%s:%u",
                     l->host[0] ? l->host : "0.0.0.0", ntohs(l->dl->get_src_port(l->id)));

    return n > 0 && (size_t)n < len ? RG_OK : RG_ERR_INVALID;
}

/* The secret at the start of the private data (its length is no secret). */
static int rdma_secret_ok(const uint8_t *pdata, size_t n, const void *secret, size_t len)
{
    return n >= len && rg_secret_equal(pdata, secret, len);
}

/* A request arrived on id: take it onto its own channel, set up, accept, wait established. */
static rg_status_t rdma_accept_id(struct rdma_listener *l, struct rdma_cm_id *id,
                                  struct rdma_conn **c_p)
{
    struct rdma_conn_param cp = {
        .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = RDMA_RNR_RETRY};
    char peer[TRANSPORT_PEER_MAX], host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    struct sockaddr *sa = rdma_get_peer_addr(id);
    struct rdma_conn *c;
    rg_status_t st;

    getnameinfo(
        sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
        host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(peer, sizeof(peer), "rdma peer %s:%s", host, port);
    if ((c = rdma_conn_new(l->dl, peer)) == NULL) {
        l->dl->reject(id, NULL, 0);
        l->dl->destroy_id(id);
        return RG_ERR_NOMEM;
    }
    c->id = id;
    if ((c->ech = rdma_new_channel(l->dl)) == NULL || l->dl->migrate_id(id, c->ech) != 0)
        st = RG_ERR_IO;
    else if ((st = rdma_conn_setup(c)) == RG_OK && l->dl->accept(id, &cp) != 0)
        st = rdma_cm_errno("accept from", peer);
    if (st == RG_OK)
        st = rdma_cm_wait(l->dl, c->ech, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_TIMEOUT_MS, peer, NULL,
                          NULL, NULL);
    if (st != RG_OK) {
        rdma_conn_free(c);
        return st;
    }
    *c_p = c;
    return RG_OK;
}

rg_status_t transport_rdma_accept_secret(struct transport_listener *listener, const void *secret,
                                         size_t secret_len, struct transport_conn **conn_p)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    uint8_t pdata[64];
    size_t plen = sizeof(pdata);
    struct rdma_cm_id *id = NULL;
    struct rdma_conn *c;
    rg_status_t st;

    st = rdma_cm_wait(l->dl, l->ech, RDMA_CM_EVENT_CONNECT_REQUEST, 24 * 3600 * 1000, "listener",
                      &id, pdata, &plen);
    if (st != RG_OK)
        return st;
    if (secret != NULL && !rdma_secret_ok(pdata, plen, secret, secret_len)) {
        rg_warn("rdma connection request without the session's secret rejected");
        l->dl->reject(id, NULL, 0);
        l->dl->destroy_id(id);
        return RG_ERR_REFUSED;
    }
    if ((st = rdma_accept_id(l, id, &c)) != RG_OK)
        return st;
    *conn_p = &c->super;
    return RG_OK;
}

static rg_status_t trdma_accept(struct transport_listener *listener, struct transport_conn **conn_p)
{
    return transport_rdma_accept_secret(listener, NULL, 0, conn_p);
}

/* ---- the rest of the connection slots ---------------------------------------------------- */

static int rdma_fd(struct transport_conn *conn)
{
    return rdma_conn_of(conn)->cch->fd;
}

static void rdma_shutdown(struct transport_conn *conn)
{
    struct rdma_conn *c = rdma_conn_of(conn);

    pthread_mutex_lock(&c->lock);
    if (!c->shut) {
        c->shut = true;
        c->dl->disconnect(c->id); /* the peer sees the end; our queue pair is flushed */
        rdma_wake(c);
    }
    pthread_mutex_unlock(&c->lock);
}

static void rdma_close(struct transport_conn *conn)
{
    struct rdma_conn *c;

    if (conn == NULL)
        return;
    c = rdma_conn_of(conn);
    pthread_mutex_lock(&c->lock);
    if (!c->shut && c->broken == RG_OK)
        rdma_drain_sends(c, 2000); /* what was sent is delivered before the end */
    pthread_mutex_unlock(&c->lock);
    rdma_shutdown(conn);
    rdma_conn_free(c);
}

static void rdma_set_watch_fd(struct transport_conn *conn, int fd)
{
    rdma_conn_of(conn)->watch_fd = fd;
}

/* Received data and a peer's close are seen only by a receive (the completion queue). */
static rg_status_t rdma_wait_readable(struct transport_conn *conn, int timeout_ms)
{
    return RG_OK;
}

static void rdma_set_busy_poll(struct transport_conn *conn, unsigned us)
{
    rdma_conn_of(conn)->busy_poll_us = us;
}

static rg_status_t rdma_set_recv_idle(struct transport_conn *conn, int ms)
{
    struct rdma_conn *c = rdma_conn_of(conn);

    pthread_mutex_lock(&c->lock);
    c->recv_idle_ms = ms > 0 ? ms : 0;
    pthread_mutex_unlock(&c->lock);
    return RG_OK;
}

const struct transport_ops transport_rdma_ops = {
    .name = "rdma",
    .caps = TRANSPORT_CAP_BUSY_POLL | TRANSPORT_CAP_ONE_SIDED | TRANSPORT_CAP_CONNECT_SECRET,
    .connect = trdma_connect,
    .listen = trdma_listen,
    .accept = trdma_accept,
    .accept_secret = transport_rdma_accept_secret,
    .listener_fd = rdma_listener_fd,
    .listener_addr = rdma_listener_addr,
    .listener_close = rdma_listener_close,
    .sendv = rdma_sendv,
    .recv = rdma_recv,
    .fd = rdma_fd,
    .shutdown = rdma_shutdown,
    .close = rdma_close,
    .mem_reg = rdma_mem_reg,
    .mem_dereg = rdma_mem_dereg,
    .write = rdma_write,
    .read = rdma_read,
    .mem_reg_dmabuf = rdma_mem_reg_dmabuf,
    .set_busy_poll = rdma_set_busy_poll,
    .wait_readable = rdma_wait_readable,
    .set_watch_fd = rdma_set_watch_fd,
    .set_recv_idle = rdma_set_recv_idle,
};
