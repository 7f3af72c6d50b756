/* The data path of the socket backends (sock.h): tcp.c and loop.c connect, listen and accept;
 * a connected stream socket then carries frames the same way for both. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/sock.h"

/* sendmsg takes at most this many iovecs per call (well under IOV_MAX). */
#define SOCK_IOV_BATCH 64

rg_status_t transport_errno_status(int err)
{
    switch (err) {
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ETIMEDOUT:
        return RG_ERR_TIMEOUT;
    case EPIPE:
    case ECONNRESET:
        return RG_ERR_CLOSED;
    case ECONNREFUSED:
        return RG_ERR_REFUSED;
    default:
        return RG_ERR_IO;
    }
}

rg_status_t transport_sock_conn_new(const struct transport_ops *ops, int fd, const char *peer,
                                    struct transport_conn **conn_p)
{
    struct sock_conn *sc = calloc(1, sizeof(*sc));

    if (sc == NULL)
        return RG_ERR_NOMEM;
    sc->super.ops = ops;
    sc->fd = fd;
    snprintf(sc->peer, sizeof(sc->peer), "%s", peer);
    *conn_p = &sc->super;
    return RG_OK;
}

rg_status_t transport_sock_set_timeout(int fd, int io_timeout_ms, const char *peer)
{
    struct timeval tv = {io_timeout_ms / 1000, (io_timeout_ms % 1000) * 1000};

    if (io_timeout_ms <= 0)
        return RG_OK;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
        rg_error("setting i/o timeout on connection to %s failed: %s", peer, strerror(errno));
        return RG_ERR_IO;
    }
    return RG_OK;
}

static struct sock_conn *sock_conn_of(struct transport_conn *conn)
{
    return (struct sock_conn *)((char *)conn - offsetof(struct sock_conn, super));
}

/* Log a failed data-path call once, at a level that matches how unusual it is. */
/* what is "send to" or "recv from". */
static rg_status_t sock_fail(struct sock_conn *sc, const char *what, int err)
{
    rg_status_t status = transport_errno_status(err);

    if (status == RG_ERR_IO)
        rg_error("%s %s failed: %s", what, sc->peer, strerror(err));
    else if (status == RG_ERR_TIMEOUT)
        rg_warn("%s %s timed out: %s", what, sc->peer, strerror(err));
    else
        rg_debug("%s %s: %s", what, sc->peer, strerror(err));
    errno = err;
    return status;
}

/* Point batch at the unsent rest of iov, starting off bytes into iov[idx]. No data is copied. */
static int sock_fill_batch(struct iovec *batch, const struct iovec *iov, int iovcnt, int idx,
                           size_t off)
{
    int n = 0;

    for (; idx < iovcnt && n < SOCK_IOV_BATCH; idx++, off = 0) {
        if (iov[idx].iov_len == off)
            continue;
        batch[n].iov_base = (char *)iov[idx].iov_base + off;
        batch[n].iov_len = iov[idx].iov_len - off;
        n++;
    }
    return n;
}

/* Move (idx, off) forward by sent bytes, stepping over empty entries. */
static void sock_advance(const struct iovec *iov, int iovcnt, int *idx_p, size_t *off_p,
                         size_t sent)
{
    int idx = *idx_p;
    size_t off = *off_p;

    while (idx < iovcnt) {
        size_t left = iov[idx].iov_len - off;
        if (sent < left) {
            off += sent;
            break;
        }
        sent -= left;
        idx++;
        off = 0;
    }
    *idx_p = idx;
    *off_p = off;
}

rg_status_t transport_sock_sendv(struct transport_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct sock_conn *sc = sock_conn_of(conn);
    struct iovec batch[SOCK_IOV_BATCH];
    size_t off = 0;
    int idx = 0;

    if (iovcnt < 0 || (iovcnt > 0 && iov == NULL))
        return RG_ERR_INVALID;
    while (idx < iovcnt) {
        struct msghdr msg = {.msg_iov = batch};
        msg.msg_iovlen = (size_t)sock_fill_batch(batch, iov, iovcnt, idx, off);
        if (msg.msg_iovlen == 0)
            break;
        ssize_t rc = sendmsg(sc->fd, &msg, MSG_NOSIGNAL);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return sock_fail(sc, "send to", errno);
        }
        sock_advance(iov, iovcnt, &idx, &off, (size_t)rc);
    }
    return RG_OK;
}

rg_status_t transport_sock_set_recv_idle(struct transport_conn *conn, int ms)
{
    struct sock_conn *sc = sock_conn_of(conn);
    struct timeval tv = {ms > 0 ? ms / 1000 : 0, ms > 0 ? (ms % 1000) * 1000 : 0};

    if (setsockopt(sc->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
        rg_error("setting a receive deadline on the connection to %s failed: %s", sc->peer,
                 strerror(errno));
        return RG_ERR_IO;
    }
    return RG_OK;
}

void transport_sock_set_busy_poll(struct transport_conn *conn, unsigned us)
{
    sock_conn_of(conn)->busy_poll_us = us;
}

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Spin on a non-blocking recv for up to busy_poll_us; returns its result, or -1/EAGAIN. */
static ssize_t sock_busy_recv(struct sock_conn *sc, void *dst, size_t cap)
{
    uint64_t end = now_us() + sc->busy_poll_us;
    ssize_t rc;

    do {
        rc = recv(sc->fd, dst, cap, MSG_DONTWAIT);
    } while (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && now_us() < end);
    return rc;
}

rg_status_t transport_sock_wait_readable(struct transport_conn *conn, int timeout_ms)
{
    struct sock_conn *sc = sock_conn_of(conn);
    struct pollfd p;
    uint64_t end;
    char byte;
    int rc;

    if (sc->rpos < sc->rlen)
        return RG_OK;
    end = now_us() + sc->busy_poll_us;
    do {
        if (recv(sc->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
            return RG_OK; /* data, or the peer closed */
    } while ((errno == EAGAIN || errno == EWOULDBLOCK) && now_us() < end);
    p = (struct pollfd){.fd = sc->fd, .events = POLLIN};
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    return rc == 0 ? RG_ERR_TIMEOUT : RG_OK;
}

/* One recv into dst (flags 0: whatever is there, at least one byte). */
static rg_status_t sock_recv_some(struct sock_conn *sc, void *dst, size_t cap, int flags,
                                  size_t *got_p)
{
    for (;;) {
        ssize_t rc = sc->busy_poll_us > 0 && flags == 0 ? sock_busy_recv(sc, dst, cap) : -1;
        if (rc < 0)
            rc = recv(sc->fd, dst, cap, flags);
        if (rc > 0) {
            *got_p = (size_t)rc;
            return RG_OK;
        }
        if (rc == 0) {
            rg_debug("recv from %s: connection closed", sc->peer);
            return RG_ERR_CLOSED;
        }
        if (errno != EINTR)
            return sock_fail(sc, "recv from", errno);
    }
}

rg_status_t transport_sock_recv(struct transport_conn *conn, void *buf, size_t len)
{
    struct sock_conn *sc = sock_conn_of(conn);
    char *p = buf;
    size_t got = 0, n = 0;
    rg_status_t status;

    while (got < len) {
        if (sc->rpos < sc->rlen) {
            n = sc->rlen - sc->rpos < len - got ? sc->rlen - sc->rpos : len - got;
            memcpy(p + got, sc->rbuf + sc->rpos, n);
            sc->rpos += n;
            got += n;
        } else if (len - got >= SOCK_RBUF_SIZE) {
            status = sock_recv_some(sc, p + got, len - got, MSG_WAITALL, &n);
            if (status != RG_OK)
                return status;
            got += n;
        } else {
            status = sock_recv_some(sc, sc->rbuf, SOCK_RBUF_SIZE, 0, &sc->rlen);
            if (status != RG_OK)
                return status;
            sc->rpos = 0;
        }
    }
    return RG_OK;
}

int transport_sock_fd(struct transport_conn *conn)
{
    return sock_conn_of(conn)->fd;
}

void transport_sock_shutdown(struct transport_conn *conn)
{
    /* Wakes a recv blocked in another thread: it sees end of stream. */
    shutdown(sock_conn_of(conn)->fd, SHUT_RDWR);
}

void transport_sock_set_watch_fd(struct transport_conn *conn, int fd) {}

void transport_sock_close(struct transport_conn *conn)
{
    struct sock_conn *sc;

    if (conn == NULL)
        return;
    sc = sock_conn_of(conn);
    close(sc->fd);
    free(sc);
}

rg_status_t transport_nomem_reg(struct transport_conn *conn, void *addr, size_t len,
                                unsigned access, struct transport_mr **mr_p)
{
    return RG_ERR_UNSUPPORTED;
}

void transport_nomem_dereg(struct transport_mr *mr) {}

rg_status_t transport_nomem_rw(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                               uint64_t raddr, uint32_t rkey, size_t len)
{
    return RG_ERR_UNSUPPORTED;
}

rg_status_t transport_nomem_reg_dmabuf(struct transport_conn *conn, int fd, uint64_t offset,
                                       size_t len, uint64_t iova, unsigned access,
                                       struct transport_mr **mr_p)
{
    return RG_ERR_UNSUPPORTED;
}

rg_status_t transport_noaccept_secret(struct transport_listener *listener, const void *secret,
                                      size_t secret_len, struct transport_conn **conn_p)
{
    return RG_ERR_UNSUPPORTED;
}
