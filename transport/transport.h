/* One connection API, several backends (tcp, loop, rdma: see transport/rdma.h).
 *
 * A connection carries a reliable, ordered byte stream of frames (see proto/frame.h). Each
 * backend is a const ops table with every slot filled; slots a backend cannot offer return
 * RG_ERR_UNSUPPORTED, so callers never test for NULL.
 *
 * Threading: a connection may be used by one sender and one receiver at the same time; callers
 * serialize senders among themselves (and receivers among themselves). On rdma a sendv may also
 * run beside another thread's one-sided read or write (the worker's keepalive during a long
 * copy, server/keepalive.h): both take the connection's lock and wait on its completions.
 *
 * The memory-registration and one-sided slots exist so that the RDMA backend fits the same API:
 * a region registered with mem_reg gets a key the peer can name; read/write move bytes between a
 * local registered buffer and a peer's registered region without involving the peer's CPU.
 */
#ifndef RGPU_TRANSPORT_H
#define RGPU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/status.h"

struct transport_conn;
struct transport_listener;
struct transport_mr;

struct transport_opts {
    int connect_timeout_ms; /* 0: default (5000) */
    int io_timeout_ms;      /* 0: none. Dead peers are found by keepalive either way. */
};

enum transport_access {
    TRANSPORT_ACCESS_LOCAL_WRITE = 1,
    TRANSPORT_ACCESS_REMOTE_READ = 2,
    TRANSPORT_ACCESS_REMOTE_WRITE = 4,
};

/* What a backend can do (transport_ops.caps): ask, never compare ops pointers. */
#define TRANSPORT_CAP_BUSY_POLL 0x1u /* set_busy_poll spins before a receive blocks */
#define TRANSPORT_CAP_ONE_SIDED 0x2u /* mem_reg, read and write move bytes one-sided */
/* A connection request carries a secret that accept_secret checks before the connection
 * exists (rdma: the request's private data). Without it, a side listener's connections
 * present theirs in-band, as their first bytes (transport/side_listener.h). */
#define TRANSPORT_CAP_CONNECT_SECRET 0x4u

struct transport_ops {
    const char *name;
    unsigned caps; /* TRANSPORT_CAP_* */
    /* Connect to "host:port" (tcp) or "name" (loop). May block up to connect_timeout_ms. */
    rg_status_t (*connect)(const char *addr, const struct transport_opts *opts,
                           struct transport_conn **conn_p);
    /* Listen on "host:port" (port 0 picks one; see listener_addr) or "name" (loop). */
    rg_status_t (*listen)(const char *addr, struct transport_listener **listener_p);
    /* Blocks until a peer connects (use listener_fd to poll first). */
    rg_status_t (*accept)(struct transport_listener *listener, struct transport_conn **conn_p);
    /* With TRANSPORT_CAP_CONNECT_SECRET: accept the next request whose connection data starts
     * with the secret; one without it is rejected before a connection exists (RG_ERR_REFUSED,
     * logged) and the caller may accept again. RG_ERR_UNSUPPORTED without the capability.
     * Callers use transport/side_listener.h. */
    rg_status_t (*accept_secret)(struct transport_listener *listener, const void *secret,
                                 size_t secret_len, struct transport_conn **conn_p);
    /* Pollable fd that becomes readable when accept will not block; -1 if none. */
    int (*listener_fd)(struct transport_listener *listener);
    /* Bound address as "host:port" into buf. */
    rg_status_t (*listener_addr)(struct transport_listener *listener, char *buf, size_t len);
    void (*listener_close)(struct transport_listener *listener);

    /* Send all bytes of iov[0..iovcnt) in order, without copying them into one buffer.
     * Returns RG_OK only when every byte was handed to the backend. */
    rg_status_t (*sendv)(struct transport_conn *conn, const struct iovec *iov, int iovcnt);
    /* Receive exactly len bytes into buf; RG_ERR_CLOSED on orderly close before len. */
    rg_status_t (*recv)(struct transport_conn *conn, void *buf, size_t len);
    /* The underlying fd (-1 if none). Received data may sit in the connection's own buffer, so
     * a poll on it can miss data that recv would return at once. */
    int (*fd)(struct transport_conn *conn);
    /* Stop both directions now: a blocked recv in another thread returns RG_ERR_CLOSED. */
    void (*shutdown)(struct transport_conn *conn);
    /* Free the connection (after shutdown, or as a close). */
    void (*close)(struct transport_conn *conn);

    /* Register [addr, addr+len) for the given access; the key the peer names it by is
     * mr->key. */
    rg_status_t (*mem_reg)(struct transport_conn *conn, void *addr, size_t len, unsigned access,
                           struct transport_mr **mr_p);
    void (*mem_dereg)(struct transport_mr *mr);
    /* One-sided: copy len bytes from local registered memory to the peer's region (write), or
     * from the peer's region into local registered memory (read). Blocks until complete. */
    rg_status_t (*write)(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                         uint64_t raddr, uint32_t rkey, size_t len);
    rg_status_t (*read)(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                        uint64_t raddr, uint32_t rkey, size_t len);
    /* Register memory that is not the caller's to map, exported as a dmabuf (device memory,
     * for GPUDirect RDMA): len bytes from byte offset of the dmabuf fd, which one-sided calls
     * then name as local addresses [iova, iova + len) (laddr = (void *)iova + n). The fd stays
     * the caller's and may be closed once this returns (the registration holds the dmabuf).
     * Free with mem_dereg. RG_ERR_UNSUPPORTED where the backend (tcp, loop) or the host's
     * library cannot; RG_ERR_IO when the registration itself fails, errno left as the
     * library set it (not logged: the caller says what it falls back to). */
    rg_status_t (*mem_reg_dmabuf)(struct transport_conn *conn, int fd, uint64_t offset, size_t len,
                                  uint64_t iova, unsigned access, struct transport_mr **mr_p);
    /* Spin up to us microseconds on a receive that finds no data before blocking (0: off);
     * a no-op without TRANSPORT_CAP_BUSY_POLL. */
    void (*set_busy_poll)(struct transport_conn *conn, unsigned us);
    /* transport_wait_readable: RG_OK at once where the backend cannot tell (rdma). */
    rg_status_t (*wait_readable)(struct transport_conn *conn, int timeout_ms);
    /* transport_set_watch_fd: a no-op where the connection's own socket shows its peer gone
     * (tcp, loop). */
    void (*set_watch_fd)(struct transport_conn *conn, int fd);
    /* A receive that gets no byte for ms milliseconds ends with RG_ERR_TIMEOUT (0: never, the
     * default); each byte that arrives starts the wait again, so a long transfer that keeps
     * moving is never cut. The client's session deadline (a peer that sends keepalive frames
     * while it works: proto/frame.h PROTO_KEEPALIVE). Replaces any receive timeout set before. */
    rg_status_t (*set_recv_idle)(struct transport_conn *conn, int ms);
};

/* Base object of every backend's connection (downcast with container_of). */
struct transport_conn {
    const struct transport_ops *ops;
};

struct transport_listener {
    const struct transport_ops *ops;
};

struct transport_mr {
    const struct transport_ops *ops;
    void *addr;
    size_t len;
    uint32_t key;
};

extern const struct transport_ops transport_tcp_ops;
extern const struct transport_ops transport_loop_ops;
extern const struct transport_ops transport_rdma_ops;

/* Find a backend by name ("tcp", "loop", "rdma"); NULL if unknown. */
const struct transport_ops *transport_find(const char *name);

/* Wrap an already connected TCP socket (e.g. inherited across exec) as a connection. */
rg_status_t transport_tcp_adopt_fd(int fd, struct transport_conn **conn_p);
/* "host:0" ("[host]:0" for IPv6) for the local address of the connected socket fd: where to
 * listen, on any port, for more connections of the same peer (an RDMA upgrade, data lanes).
 * RG_ERR_IO if the address is unknown. */
rg_status_t transport_local_any_port(int fd, char *addr, size_t len);

/* Busy polling (backends with TRANSPORT_CAP_BUSY_POLL; all three have it): a receive that finds no
 * data spins for up to us microseconds before it blocks, trading a CPU core for lower latency. 0
 * (default) = off. */
void transport_set_busy_poll(struct transport_conn *conn, unsigned us);

/* Wait until a receive on conn would return at least one byte at once (data buffered in the
 * connection, or on its socket, or the peer closed), for up to timeout_ms (-1: no limit).
 * RG_OK, or RG_ERR_TIMEOUT. A busy-polling connection spins its busy_poll_us first. Backends
 * that cannot tell (rdma) return RG_OK at once. With a socket receive timeout set, this is how
 * a caller waits for the next frame for long while bounding the wait inside one. */
rg_status_t transport_wait_readable(struct transport_conn *conn, int timeout_ms);

/* A peer that closes (or errors) fd is a peer gone: waits on this connection end with
 * RG_ERR_CLOSED, and data arriving on fd is a protocol error (-1: none). For a connection that
 * has no socket of its own to show it (rdma: the session's TCP socket, kept for that). */
void transport_set_watch_fd(struct transport_conn *conn, int fd);

/* Convenience wrappers that dispatch through conn->ops. */
static inline rg_status_t transport_sendv(struct transport_conn *c, const struct iovec *iov,
                                          int iovcnt)
{
    return c->ops->sendv(c, iov, iovcnt);
}
static inline rg_status_t transport_recv(struct transport_conn *c, void *buf, size_t len)
{
    return c->ops->recv(c, buf, len);
}
static inline int transport_fd(struct transport_conn *c)
{
    return c->ops->fd(c);
}
static inline void transport_shutdown(struct transport_conn *c)
{
    c->ops->shutdown(c);
}
static inline void transport_close(struct transport_conn *c)
{
    c->ops->close(c);
}
static inline rg_status_t transport_set_recv_idle(struct transport_conn *c, int ms)
{
    return c->ops->set_recv_idle(c, ms);
}

#endif
