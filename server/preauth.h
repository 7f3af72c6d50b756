/* The supervisor's pre-session stage (server/preauth.c): connections accepted on the session
 * port whose first frame has not arrived yet. Nothing is forked and no worker exists for them.
 *
 * Bounds (docs/security.md): at most max_pending such connections in all, at most
 * max_pending_per_peer from one peer address, and the whole first frame (header and message, at
 * most SRV_PREAUTH_FRAME_MAX bytes, no bulk) must arrive within handshake_ms of the accept, or
 * the connection is closed. A new connection over a limit is taken, and room made for it: over
 * max_pending_per_peer its address's oldest pending connection is closed, over max_pending the
 * oldest of the address(es) holding the most; the one closed is told to try again (a Welcome
 * refusal with retry_after_ms). A first frame already there at the accept is read at once. So a
 * flood from many addresses cannot keep out a client that sends its Hello promptly. Reads are
 * non-blocking in the supervisor's libevent loop, so no peer can stall another.
 *
 * Extending: a complete first frame goes to the frame hook with its type; the supervisor keeps
 * one const table of pre-session frame types (PROTO_HELLO, PROTO_PROBE). The hook answers and
 * closes, or hands the fd on (to a worker). */
#ifndef RGPU_SERVER_PREAUTH_H
#define RGPU_SERVER_PREAUTH_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "proto/frame.h"

/* The one refusal for an unknown tenant and for a wrong token alike (the log tells them apart). */
#define SRV_AUTH_REFUSED                                                                           \
    "authentication failed: unknown tenant or wrong token (check RGPU_TENANT and RGPU_TOKEN)"

/* The largest first frame (a Hello is a few hundred bytes). */
#define SRV_PREAUTH_FRAME_MAX (16u << 10)

struct srv_preauth_limits {
    int max_pending;          /* connections before their first frame, all peers */
    int max_pending_per_peer; /* ... from one peer address */
    int handshake_ms;         /* deadline for the first frame, from the accept */
};

/* A connection whose first frame arrived whole: fd (non-blocking; the hook's to keep or not),
 * the peer ("ip:port" and its address alone), and the frame: header, then hdr->msg_len bytes
 * of message in frame + sizeof(*hdr). Returns true when it took the fd (it closes it later),
 * false to have it closed now. */
struct srv_preauth_peer {
    int fd;
    const char *peer, *host;
};
typedef bool (*srv_preauth_frame_fn)(void *arg, const struct srv_preauth_peer *who,
                                     const struct proto_frame_hdr *hdr, const uint8_t *frame,
                                     size_t frame_len);

struct srv_preauth;

rg_status_t srv_preauth_create(struct event_base *base, const struct srv_preauth_limits *limits,
                               srv_preauth_frame_fn on_frame, void *arg, struct srv_preauth **p_p);
void srv_preauth_destroy(struct srv_preauth *p);
/* Accept every connection waiting on the listening socket lfd (non-blocking) and start its
 * deadline; over a limit, close it. RG_ERR_IO when accept itself fails for want of resources
 * (out of descriptors): the caller pauses accepting. */
rg_status_t srv_preauth_accept(struct srv_preauth *p, int lfd);
/* Connections in the pre-session stage now (tests, /metrics). */
int srv_preauth_pending(const struct srv_preauth *p);

/* Send a small frame on a non-blocking socket, best effort (a refusal before closing). */
void srv_preauth_send(int fd, enum proto_frame_type type, const ProtobufCMessage *msg);

#endif
