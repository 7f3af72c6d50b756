/* TCP backend: one blocking stream socket per connection, tuned so that a dead peer is noticed
 * in bounded time (keepalive plus TCP_USER_TIMEOUT) even when nobody sets io_timeout_ms. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "transport/sock.h"

#define TCP_CONNECT_TIMEOUT_MS 5000
#define TCP_BACKLOG            128

struct tcp_listener {
    struct transport_listener super;
    int fd;
};

static const struct {
    int level, name, value;
    const char *what;
} tcp_sockopts[] = {
    {IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY"},
    {SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
    {IPPROTO_TCP, TCP_KEEPIDLE, 5, "TCP_KEEPIDLE"},
    {IPPROTO_TCP, TCP_KEEPINTVL, 2, "TCP_KEEPINTVL"},
    {IPPROTO_TCP, TCP_KEEPCNT, 3, "TCP_KEEPCNT"},
    {IPPROTO_TCP, TCP_USER_TIMEOUT, 15000, "TCP_USER_TIMEOUT"},
};

static struct tcp_listener *tcp_listener_of(struct transport_listener *l)
{
    return (struct tcp_listener *)((char *)l - offsetof(struct tcp_listener, super));
}

static int64_t tcp_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "host:port" (or "[v6]:port") of a socket address, numerically. */
static void tcp_format_addr(const struct sockaddr *sa, socklen_t salen, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN], port[8];

    if (getnameinfo(sa, salen, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(buf, len, "?");
    else if (sa->sa_family == AF_INET6)
        snprintf(buf, len, "[%s]:%s", host, port);
    else
        snprintf(buf, len, "%s:%s", host, port);
}

/* Set the options every tcp connection carries, whichever side made it. */
static rg_status_t tcp_set_sockopts(int fd, int io_timeout_ms, const char *peer)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        rg_error("fcntl on connection to %s failed: %s", peer, strerror(errno));
        return RG_ERR_IO;
    }
    for (size_t i = 0; i < sizeof(tcp_sockopts) / sizeof(tcp_sockopts[0]); i++) {
        if (setsockopt(fd, tcp_sockopts[i].level, tcp_sockopts[i].name, &tcp_sockopts[i].value,
                       sizeof(int)) != 0) {
            rg_error("setsockopt %s on connection to %s failed: %s", tcp_sockopts[i].what, peer,
                     strerror(errno));
            return RG_ERR_IO;
        }
    }
    return transport_sock_set_timeout(fd, io_timeout_ms, peer);
}

/* Wait for a non-blocking connect to finish; 0 or the errno it failed with. */
static int tcp_wait_connected(int fd, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - tcp_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t len = sizeof(soerr);

        if (left <= 0)
            return ETIMEDOUT;
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return errno;
        if (rc == 0)
            return ETIMEDOUT;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            return errno;
        return soerr;
    }
}

/* One connect attempt to one resolved address; the socket, or -1 with *err_p set. */
static int tcp_connect_one(const struct addrinfo *ai, int64_t deadline, int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    int err = 0;

    if (fd < 0) {
        *err_p = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR)
            err = tcp_wait_connected(fd, deadline);
    }
    if (err != 0) {
        close(fd);
        *err_p = err;
        return -1;
    }
    return fd;
}

static rg_status_t tcp_connect(const char *addr, const struct transport_opts *opts,
                               struct transport_conn **conn_p)
{
    int timeout = opts != NULL && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms
                                                               : TCP_CONNECT_TIMEOUT_MS;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    int64_t deadline = tcp_now_ms() + timeout;
    int fd = -1, err = ETIMEDOUT, rc;
    rg_status_t status;

    if (addr == NULL ||
        rg_split_hostport(addr, host, sizeof(host), port, sizeof(port), NULL) != RG_OK) {
        rg_warn("connect to %s failed: expected host:port", addr != NULL ? addr : "(null)");
        return RG_ERR_INVALID;
    }
    rc = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        rg_warn("connect to %s failed: %s", addr, gai_strerror(rc));
        return RG_ERR_NOT_FOUND;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = tcp_connect_one(ai, deadline, &err);
    freeaddrinfo(res);
    if (fd < 0) {
        rg_warn("connect to %s failed: %s", addr, strerror(err));
        errno = err;
        return transport_errno_status(err);
    }
    status = tcp_set_sockopts(fd, opts != NULL ? opts->io_timeout_ms : 0, addr);
    if (status == RG_OK)
        status = transport_sock_conn_new(&transport_tcp_ops, fd, addr, conn_p);
    if (status != RG_OK)
        close(fd);
    return status;
}

/* One bind+listen attempt; the socket, or -1 with *err_p set. */
static int tcp_bind_one(const struct addrinfo *ai, int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1, zero = 0;

    if (fd < 0) {
        *err_p = errno;
        return -1;
    }
    if (ai->ai_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr))
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)); /* "[::]": IPv4 too */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, TCP_BACKLOG) != 0) {
        *err_p = errno;
        close(fd);
        return -1;
    }
    return fd;
}

static rg_status_t tcp_listen(const char *addr, struct transport_listener **listener_p)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    struct tcp_listener *tl;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    int fd = -1, err = EADDRNOTAVAIL, rc;

    if (addr == NULL ||
        rg_split_hostport(addr, host, sizeof(host), port, sizeof(port), NULL) != RG_OK) {
        rg_error("listen on %s failed: expected host:port", addr != NULL ? addr : "(null)");
        return RG_ERR_INVALID;
    }
    rc = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        rg_error("listen on %s failed: %s", addr, gai_strerror(rc));
        return RG_ERR_NOT_FOUND;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = tcp_bind_one(ai, &err);
    freeaddrinfo(res);
    if (fd < 0) {
        rg_error("listen on %s failed: %s", addr, strerror(err));
        errno = err;
        return err == EADDRINUSE ? RG_ERR_BUSY : RG_ERR_IO;
    }
    tl = calloc(1, sizeof(*tl));
    if (tl == NULL) {
        close(fd);
        return RG_ERR_NOMEM;
    }
    tl->super.ops = &transport_tcp_ops;
    tl->fd = fd;
    *listener_p = &tl->super;
    return RG_OK;
}

static rg_status_t tcp_accept(struct transport_listener *listener, struct transport_conn **conn_p)
{
    struct tcp_listener *tl = tcp_listener_of(listener);
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    char peer[TRANSPORT_PEER_MAX];
    rg_status_t status;
    int fd;

    while ((fd = accept4(tl->fd, (struct sockaddr *)&ss, &sslen, SOCK_CLOEXEC)) < 0) {
        if (errno != EINTR && errno != ECONNABORTED) {
            rg_error("accept failed: %s", strerror(errno));
            return RG_ERR_IO;
        }
        sslen = sizeof(ss);
    }
    tcp_format_addr((struct sockaddr *)&ss, sslen, peer, sizeof(peer));
    status = tcp_set_sockopts(fd, 0, peer);
    if (status == RG_OK)
        status = transport_sock_conn_new(&transport_tcp_ops, fd, peer, conn_p);
    if (status != RG_OK)
        close(fd);
    return status;
}

static int tcp_listener_fd(struct transport_listener *listener)
{
    return tcp_listener_of(listener)->fd;
}

static rg_status_t tcp_listener_addr(struct transport_listener *listener, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    char addr[TRANSPORT_PEER_MAX];

    if (getsockname(tcp_listener_of(listener)->fd, (struct sockaddr *)&ss, &sslen) != 0) {
        rg_error("getsockname on listener failed: %s", strerror(errno));
        return RG_ERR_IO;
    }
    tcp_format_addr((struct sockaddr *)&ss, sslen, addr, sizeof(addr));
    if (strlen(addr) + 1 > len)
        return RG_ERR_INVALID;
    memcpy(buf, addr, strlen(addr) + 1);
    return RG_OK;
}

static void tcp_listener_close(struct transport_listener *listener)
{
    struct tcp_listener *tl;

    if (listener == NULL)
        return;
    tl = tcp_listener_of(listener);
    close(tl->fd);
    free(tl);
}

rg_status_t transport_local_any_port(int fd, char *addr, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[NI_MAXHOST];

    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), NULL, 0, NI_NUMERICHOST))
        return RG_ERR_IO;
    snprintf(addr, len, ss.ss_family == AF_INET6 ? "[%s]:0" : "%s:0", host);
    return RG_OK;
}

rg_status_t transport_tcp_adopt_fd(int fd, struct transport_conn **conn_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    char peer[TRANSPORT_PEER_MAX];
    rg_status_t status;

    if (fd < 0)
        return RG_ERR_INVALID;
    if (getpeername(fd, (struct sockaddr *)&ss, &sslen) != 0) {
        rg_error("adopting fd %d failed: getpeername: %s", fd, strerror(errno));
        return errno == ENOTCONN ? RG_ERR_CLOSED : RG_ERR_INVALID;
    }
    tcp_format_addr((struct sockaddr *)&ss, sslen, peer, sizeof(peer));
    status = tcp_set_sockopts(fd, 0, peer);
    if (status != RG_OK)
        return status;
    return transport_sock_conn_new(&transport_tcp_ops, fd, peer, conn_p);
}

const struct transport_ops transport_tcp_ops = {
    .name = "tcp",
    .caps = TRANSPORT_CAP_BUSY_POLL,
    .connect = tcp_connect,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .accept_secret = transport_noaccept_secret,
    .listener_fd = tcp_listener_fd,
    .listener_addr = tcp_listener_addr,
    .listener_close = tcp_listener_close,
    .sendv = transport_sock_sendv,
    .recv = transport_sock_recv,
    .fd = transport_sock_fd,
    .shutdown = transport_sock_shutdown,
    .close = transport_sock_close,
    .mem_reg = transport_nomem_reg,
    .mem_dereg = transport_nomem_dereg,
    .write = transport_nomem_rw,
    .read = transport_nomem_rw,
    .mem_reg_dmabuf = transport_nomem_reg_dmabuf,
    .set_busy_poll = transport_sock_set_busy_poll,
    .wait_readable = transport_sock_wait_readable,
    .set_watch_fd = transport_sock_set_watch_fd,
    .set_recv_idle = transport_sock_set_recv_idle,
};
