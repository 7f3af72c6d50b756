/* The authenticated side listener: THE mechanism for every ephemeral listener whose
 * connections must present a one-time secret before anything else (a TCP session's data
 * lanes, server/lanes.c; a server-to-server copy's receiver, server/handlers_peer.c; the move
 * of a session to RDMA, transport/rdma_upgrade.c).
 *
 * The listener takes a local address with port 0 ("host:0"; "[::]:0": every address, IPv4
 * too) and a secret of at most TRANSPORT_SIDE_SECRET_MAX bytes, given or drawn at random.
 * How a connection presents it depends on the backend: on a byte stream (tcp, loop) its first
 * bytes are the secret then tag_len bytes of a tag the caller reads (a lane's index); where
 * the backend has TRANSPORT_CAP_CONNECT_SECRET (rdma), the secret travels in the connection
 * request and accept_secret checks it before the connection exists (no tag).
 *
 * Bounds: before its secret a connection is read with at most TRANSPORT_SIDE_PENDING_MAX
 * others at once, each within hello_ms (a silent or slow peer holds nobody up), and the whole
 * accept ends at its deadline. A wrong secret, a short hello, or a connection the caller
 * refuses is closed with one log line; the accept goes on. Secrets are compared with
 * rg_secret_equal. */
#ifndef RGPU_TRANSPORT_SIDE_LISTENER_H
#define RGPU_TRANSPORT_SIDE_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

#define TRANSPORT_SIDE_SECRET_MAX  32
#define TRANSPORT_SIDE_TAG_MAX     16
#define TRANSPORT_SIDE_PENDING_MAX 16

struct transport_side_listener;

struct transport_side_params {
    const struct transport_ops *ops; /* the backend (NULL: tcp) */
    const char *addr;                /* local "host:0" to listen on */
    const uint8_t *secret;           /* NULL: secret_len random bytes (transport_side_secret) */
    size_t secret_len;               /* 1 to TRANSPORT_SIDE_SECRET_MAX */
    size_t tag_len;                  /* 0 to TRANSPORT_SIDE_TAG_MAX; 0 with CONNECT_SECRET */
    int hello_ms;     /* each stream connection's time to present the secret (unused with
                       * CONNECT_SECRET) */
    const char *what; /* log lines: "<what> connection without the secret" */
};

/* Open the listener (nothing accepted yet). RG_ERR_INVALID for bad params; the backend's
 * error when it cannot listen there (logged by the backend, unless it was asked to be quiet). */
rg_status_t transport_side_open(const struct transport_side_params *p,
                                struct transport_side_listener **sl_p);
/* Its bound "host:port", to name to the peer; and its secret (secret_len bytes). */
const char *transport_side_addr(const struct transport_side_listener *sl);
const uint8_t *transport_side_secret(const struct transport_side_listener *sl);

/* Called for each connection that presented the secret, with its tag (tag_len bytes): true
 * keeps it (the caller owns conn now), false refuses it (closed, logged as without the
 * secret). */
typedef bool (*transport_side_take_fn)(void *arg, struct transport_conn *conn, const uint8_t *tag);

/* Accept until take kept n connections (RG_OK), or timeout_ms passed (RG_ERR_TIMEOUT), or
 * transport_side_cancel was called (RG_ERR_CLOSED). watch_fd (-1: none), for a listener
 * beside a session's connection: data arriving on it ends the wait with RG_ERR_NOT_FOUND (the
 * peer went on without a side connection), its close with RG_ERR_CLOSED. Connections still
 * presenting their secret when it returns are closed. One accept at a time per listener. */
rg_status_t transport_side_accept(struct transport_side_listener *sl, int n, int timeout_ms,
                                  int watch_fd, transport_side_take_fn take, void *arg);
/* From any thread: the running accept (or the next one) returns RG_ERR_CLOSED at once. */
void transport_side_cancel(struct transport_side_listener *sl);
/* Close the listener (no accept running) and forget its secret. NULL is fine. */
void transport_side_close(struct transport_side_listener *sl);

#endif
