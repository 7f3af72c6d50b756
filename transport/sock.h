/* Private to transport/: what the socket-based backends (tcp, loop) share.
 *
 * Both backends carry their byte stream on a connected SOCK_STREAM socket, so one connection
 * type and one set of data-path functions serve both; only connect/listen/accept and the
 * one-sided slots differ. */
#ifndef RGPU_TRANSPORT_SOCK_H
#define RGPU_TRANSPORT_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "transport/transport.h"

/* Longest "host:port" / "loop:name" we keep for log lines. */
#define TRANSPORT_PEER_MAX 128

/* Small receives (frame headers, messages) are served from a read buffer, so a stream of
 * small frames costs one recv per buffer instead of two per frame; large ones go straight to
 * the caller's memory. */
#define SOCK_RBUF_SIZE (32u << 10)

struct sock_conn {
    struct transport_conn super;
    int fd;
    char peer[TRANSPORT_PEER_MAX]; /* for log lines only */
    size_t rpos, rlen;             /* unread bytes are rbuf[rpos, rlen) */
    unsigned busy_poll_us;         /* transport_set_busy_poll */
    uint8_t rbuf[SOCK_RBUF_SIZE];
};

/* Wrap fd as a connection of backend ops; the connection owns fd on success only. */
rg_status_t transport_sock_conn_new(const struct transport_ops *ops, int fd, const char *peer,
                                    struct transport_conn **conn_p);

/* Data-path slots shared by tcp and loop. */
rg_status_t transport_sock_sendv(struct transport_conn *conn, const struct iovec *iov, int iovcnt);
rg_status_t transport_sock_recv(struct transport_conn *conn, void *buf, size_t len);
int transport_sock_fd(struct transport_conn *conn);
void transport_sock_shutdown(struct transport_conn *conn);
void transport_sock_close(struct transport_conn *conn);
void transport_sock_set_busy_poll(struct transport_conn *conn, unsigned us);
rg_status_t transport_sock_wait_readable(struct transport_conn *conn, int timeout_ms);
void transport_sock_set_watch_fd(struct transport_conn *conn, int fd);
/* set_recv_idle: SO_RCVTIMEO (a recv returns what it has, or times out, after ms without a
 * byte). */
rg_status_t transport_sock_set_recv_idle(struct transport_conn *conn, int ms);

/* SO_RCVTIMEO/SO_SNDTIMEO of io_timeout_ms (0: none), so a stalled recv/sendv ends with
 * RG_ERR_TIMEOUT. */
rg_status_t transport_sock_set_timeout(int fd, int io_timeout_ms, const char *peer);

/* Map errno from a socket call to a status. */
rg_status_t transport_errno_status(int err);

/* accept_secret of backends without TRANSPORT_CAP_CONNECT_SECRET: RG_ERR_UNSUPPORTED. */
rg_status_t transport_noaccept_secret(struct transport_listener *listener, const void *secret,
                                      size_t secret_len, struct transport_conn **conn_p);

/* Stubs for backends without one-sided memory. */
rg_status_t transport_nomem_reg(struct transport_conn *conn, void *addr, size_t len,
                                unsigned access, struct transport_mr **mr_p);
void transport_nomem_dereg(struct transport_mr *mr);
rg_status_t transport_nomem_rw(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                               uint64_t raddr, uint32_t rkey, size_t len);
rg_status_t transport_nomem_reg_dmabuf(struct transport_conn *conn, int fd, uint64_t offset,
                                       size_t len, uint64_t iova, unsigned access,
                                       struct transport_mr **mr_p);

#endif
