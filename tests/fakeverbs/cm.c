/* Fake librdmacm.so.1: connection management over the rendezvous directory. A listener is a
 * unix socket named "ip:port" in $FAKEVERBS_DIR; a connection is a unix socket to it, which
 * then carries that queue pair's traffic (nic.c). Events go through a pipe, so the channel's fd
 * is pollable and a non-blocking one gives EAGAIN, as with the real library. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fakeverbs.h"

static struct fv_cm_id *fv_cid(struct rdma_cm_id *id)
{
    return (struct fv_cm_id *)id;
}

static int fv_fail(int err)
{
    errno = err;
    return -1;
}

FV_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct fv_event_channel *ch = calloc(1, sizeof(*ch));
    int fds[2];

    if (ch == NULL || pipe2(fds, O_CLOEXEC) != 0) {
        free(ch);
        return NULL;
    }
    ch->ch.fd = fds[0];
    ch->wfd = fds[1];
    return &ch->ch;
}

FV_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    struct fv_event_channel *ch = (struct fv_event_channel *)channel;
    struct fv_event *e;

    fcntl(ch->ch.fd, F_SETFL, O_NONBLOCK);
    while (read(ch->ch.fd, &e, sizeof(e)) == (ssize_t)sizeof(e))
        free(e);
    close(ch->ch.fd);
    close(ch->wfd);
    free(ch);
}

FV_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    struct fv_event *e;

    if (read(channel->fd, &e, sizeof(e)) != (ssize_t)sizeof(e))
        return -1;
    *event = &e->ev;
    return 0;
}

FV_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    free(event);
    return 0;
}

FV_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
        "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
        "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
        "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
        "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
        "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
    };
    return (unsigned)event < sizeof(names) / sizeof(names[0]) ? names[event] : "UNKNOWN EVENT";
}

FV_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
                             void *context, enum rdma_port_space ps)
{
    struct fv_cm_id *cid = calloc(1, sizeof(*cid));

    if (cid == NULL)
        return fv_fail(ENOMEM);
    cid->id.channel = channel;
    cid->id.context = context;
    cid->id.ps = ps;
    cid->id.qp_type = IBV_QPT_RC;
    cid->fd = -1;
    fv_lock();
    fv_id_add(cid);
    fv_unlock();
    *id = &cid->id;
    return 0;
}

static int fv_sun(const struct sockaddr_in *sin, struct sockaddr_un *sun);

FV_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
    struct sockaddr_un sun;

    fv_lock();
    if (fv_cid(id)->state == FV_L_LISTEN && fv_sun(&id->route.addr.src_sin, &sun) == 0)
        unlink(sun.sun_path);
    fv_id_remove(fv_cid(id));
    fv_unlock();
    free(fv_cid(id));
    return 0;
}

FV_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
    fv_lock();
    id->channel = channel;
    fv_unlock();
    return 0;
}

/* "dir/ip:port" of an IPv4 address. */
static int fv_sun(const struct sockaddr_in *sin, struct sockaddr_un *sun)
{
    char ip[INET_ADDRSTRLEN];

    if (sin->sin_family != AF_INET || inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip)) == NULL)
        return -1;
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    snprintf(sun->sun_path, sizeof(sun->sun_path), "%s/%s:%u", fv_dir(), ip, ntohs(sin->sin_port));
    return 0;
}

FV_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    if (fv_context() == NULL)
        return fv_fail(ENODEV); /* no RDMA device owns this address */
    if (addr->sa_family != AF_INET)
        return fv_fail(EAFNOSUPPORT);
    memcpy(&id->route.addr.src_sin, addr, sizeof(struct sockaddr_in));
    id->verbs = fv_context();
    id->port_num = 1;
    return 0;
}

static int fv_bind_port(int fd, struct sockaddr_in *sin)
{
    struct sockaddr_un sun;
    int fixed = sin->sin_port != 0;

    for (int tries = 0; tries < 100; tries++) {
        if (!fixed)
            sin->sin_port = htons((uint16_t)(20000 + (unsigned)rand() % 40000));
        if (fv_sun(sin, &sun) != 0)
            return fv_fail(EINVAL);
        if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
            return 0;
        if (errno != EADDRINUSE || fixed)
            return -1;
    }
    return fv_fail(EADDRINUSE);
}

FV_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
    struct fv_cm_id *cid = fv_cid(id);
    int fd;

    if (id->verbs == NULL)
        return fv_fail(EINVAL);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    srand((unsigned)getpid() ^ (unsigned)fv_now_ms());
    if (fv_bind_port(fd, &id->route.addr.src_sin) != 0 || listen(fd, backlog > 0 ? backlog : 16)) {
        int err = errno;
        close(fd);
        return fv_fail(err);
    }
    fv_lock();
    cid->fd = fd;
    cid->state = FV_L_LISTEN;
    fv_unlock();
    fv_kick();
    return 0;
}

FV_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
                                struct sockaddr *dst_addr, int timeout_ms)
{
    if (fv_context() == NULL)
        return fv_fail(ENODEV);
    if (dst_addr->sa_family != AF_INET)
        return fv_fail(EAFNOSUPPORT);
    memcpy(&id->route.addr.dst_sin, dst_addr, sizeof(struct sockaddr_in));
    if (src_addr != NULL)
        memcpy(&id->route.addr.src_sin, src_addr, sizeof(struct sockaddr_in));
    else
        id->route.addr.src_sin.sin_family = AF_INET;
    id->verbs = fv_context();
    id->port_num = 1;
    fv_lock();
    fv_post_event(fv_cid(id), RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
    fv_unlock();
    return 0;
}

FV_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    fv_lock();
    fv_post_event(fv_cid(id), RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
    fv_unlock();
    return 0;
}

FV_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    struct fv_qp *qp;

    if (pd == NULL || id->verbs == NULL)
        return fv_fail(EINVAL);
    if ((qp = (struct fv_qp *)ibv_create_qp(pd, qp_init_attr)) == NULL)
        return -1;
    fv_lock();
    qp->cm = fv_cid(id);
    fv_cid(id)->qp = qp;
    id->qp = &qp->ibv;
    fv_unlock();
    return 0;
}

FV_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
    if (id->qp != NULL)
        ibv_destroy_qp(id->qp);
    id->qp = NULL;
}

FV_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    struct fv_cm_id *cid = fv_cid(id);
    struct fv_hdr h = {.type = FV_CONN_REQ};
    struct sockaddr_un sun;
    int fd;

    if (id->qp == NULL || fv_sun(&id->route.addr.dst_sin, &sun) != 0)
        return fv_fail(EINVAL);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    fv_lock();
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        close(fd); /* nobody listens there: the peer's CM rejects, as on a fabric */
        fv_post_event(cid, RDMA_CM_EVENT_REJECTED, 28, NULL, 0);
        fv_unlock();
        return 0;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    cid->fd = fd;
    cid->state = FV_L_CONNECTING;
    if (param != NULL) {
        h.status = param->rnr_retry_count;
        h.len = param->private_data_len;
    }
    if (id->route.addr.src_sin.sin_addr.s_addr == 0) /* as a kernel would pick them */
        id->route.addr.src_sin.sin_addr = id->route.addr.dst_sin.sin_addr;
    if (id->route.addr.src_sin.sin_port == 0)
        id->route.addr.src_sin.sin_port = htons((uint16_t)(20000 + (unsigned)rand() % 40000));
    h.raddr = id->route.addr.src_sin.sin_addr.s_addr; /* the listener learns who connects */
    h.rkey = id->route.addr.src_sin.sin_port;
    fv_queue_pkt(cid, &h, param != NULL ? param->private_data : NULL);
    fv_unlock();
    fv_kick();
    return 0;
}

FV_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    struct fv_cm_id *cid = fv_cid(id);
    struct fv_hdr h = {.type = FV_CONN_ACC};
    int rc = 0;

    fv_lock();
    if (cid->state != FV_L_REQ_PENDING || cid->qp == NULL) {
        rc = fv_fail(cid->state == FV_L_DOWN ? ECONNRESET : EINVAL);
    } else {
        if (param != NULL) {
            h.status = param->rnr_retry_count;
            h.len = param->private_data_len;
        }
        fv_queue_pkt(cid, &h, param != NULL ? param->private_data : NULL);
        cid->state = FV_L_UP;
        cid->qp->ibv.state = IBV_QPS_RTS;
        fv_post_event(cid, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
    }
    fv_unlock();
    fv_kick();
    return rc;
}

FV_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
    struct fv_cm_id *cid = fv_cid(id);
    struct fv_hdr h = {.type = FV_CONN_REJ, .len = private_data_len};

    fv_lock();
    if (cid->state == FV_L_REQ_PENDING)
        fv_queue_pkt(cid, &h, private_data);
    cid->state = FV_L_DOWN;
    fv_unlock();
    return 0;
}

FV_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
    fv_lock();
    fv_link_down(fv_cid(id));
    fv_unlock();
    fv_kick();
    return 0;
}

FV_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    return id->route.addr.src_sin.sin_port;
}

FV_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    return id->route.addr.dst_sin.sin_port;
}
