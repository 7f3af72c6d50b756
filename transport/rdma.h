/* The rdma backend's own calls, beyond the transport API (transport_rdma_ops).
 *
 * Byte stream: each side pre-posts RDMA_RECV_DEPTH receive buffers of RDMA_SLOT_SIZE bytes;
 * sendv copies into registered send slots and posts SEND_WITH_IMM, the immediate carrying the
 * credits (receive buffers freed since the last message) returned to the peer, so no message is
 * ever sent without a posted buffer on the other side. One-sided slots (mem_reg, read, write)
 * are RDMA READ/WRITE between registered regions.
 *
 * A remote access error, a queue pair in the error state, a peer without a posted buffer (RNR)
 * or a peer that is gone end the connection: every later call returns an error (RG_ERR_CLOSED
 * when the peer left, RG_ERR_INVALID for an access refused, RG_ERR_IO otherwise) after one log
 * line that says which. Nothing blocks forever: waits also watch the connection manager's
 * events and, when set, a watch fd (the session's TCP socket). */
#ifndef RGPU_TRANSPORT_RDMA_H
#define RGPU_TRANSPORT_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

#define RDMA_SLOT_SIZE  (64u << 10)
#define RDMA_RECV_DEPTH 32
#define RDMA_SEND_DEPTH 32
#define RDMA_SECRET_LEN 16

/* Can this process use RDMA at all? RG_OK, or RG_ERR_UNSUPPORTED with the reason in why
 * ("rdma-core is not installed", "no RDMA device"). Cheap after the first call. */
rg_status_t transport_rdma_probe(char *why, size_t len);

/* Connect carrying private data (at most 56 bytes) for the listener to check. */
rg_status_t transport_rdma_connect_pdata(const char *addr, const struct transport_opts *opts,
                                         const void *pdata, size_t pdata_len,
                                         struct transport_conn **conn_p);
/* Accept the next request; with secret != NULL, a request whose private data does not start
 * with it is rejected (RG_ERR_REFUSED, logged) and the caller may accept again. */
rg_status_t transport_rdma_accept_secret(struct transport_listener *listener, const void *secret,
                                         size_t secret_len, struct transport_conn **conn_p);

/* The TCP-to-RDMA upgrade of a session (see docs/ARCHITECTURE.md). The server side opens a
 * listener on its end of the TCP connection's address, port chosen by the system, with a fresh
 * random secret; the client connects to it proving the secret in private data. */
struct transport_side_listener;
struct transport_rdma_offer {
    struct transport_side_listener *side; /* NULL: no offer */
    char addr[128];                       /* "ip:port" to name in the Welcome */
    uint8_t secret[RDMA_SECRET_LEN];
};
/* ctl_fd: the session's connected TCP socket (its local address is where we listen). On
 * failure why says what was missing ("no RDMA device", ...). */
rg_status_t transport_rdma_offer_open(int ctl_fd, struct transport_rdma_offer *offer, char *why,
                                      size_t len);
/* Wait up to timeout_ms for the client's connection proving the secret. RG_OK: *conn_p is the
 * session's connection, watching ctl_fd. RG_ERR_NOT_FOUND: the client went on over TCP (data
 * arrived on ctl_fd) or did not come in time. RG_ERR_CLOSED: the client left. */
rg_status_t transport_rdma_offer_accept(struct transport_rdma_offer *offer, int ctl_fd,
                                        int timeout_ms, struct transport_conn **conn_p);
void transport_rdma_offer_close(struct transport_rdma_offer *offer);
/* Client side: connect to an offer, then watch ctl_fd. */
rg_status_t transport_rdma_upgrade(const char *addr, const void *secret, size_t secret_len,
                                   int ctl_fd, const struct transport_opts *opts,
                                   struct transport_conn **conn_p);

#endif
