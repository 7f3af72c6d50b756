/* The session's keepalive (protocol 1.3; proto/frame.h PROTO_KEEPALIVE): while a call runs long
 * (a kernel of minutes inside cuStreamSynchronize, a launch held at the compute gate), a small
 * thread of the worker sends the client a Keepalive frame every quarter of the client's session
 * timeout (Hello.session_timeout_ms), so that a client that hears nothing for that long knows
 * the session no longer answers (a stopped worker, a host gone quiet) rather than busy.
 *
 * Frames never interleave: the thread sends only between the frames of the worker's own
 * thread. The worker marks each call's run (srv_keepalive_call_begin/_end, around its handler)
 * and the start of a reply streamed from inside a handler (srv_keepalive_reply_begin); each of
 * these takes the keepalive's lock, which the thread holds while it writes a frame. Cost per
 * call: two uncontended mutex operations; the thread wakes once per quarter timeout. All are
 * no-ops for a session without a keepalive (a client older than 1.3, or one that asked none). */
#ifndef RGPU_SERVER_KEEPALIVE_H
#define RGPU_SERVER_KEEPALIVE_H

#include <stdint.h>

#include "common/status.h"

struct srv_session;

/* The shortest interval the worker keeps, whatever a client asks. */
#define SRV_KEEPALIVE_MIN_MS 50

/* Start the keepalive of s on s->conn (after the handshake and any move to RDMA) for a client
 * whose session timeout is timeout_ms (0: none, nothing started). The keepalive component
 * (server/components.def, SRV_COMP_KEEPALIVE) owns the thread; its teardown, first of the
 * session's, stops it, before the worker closes s->conn. */
rg_status_t srv_keepalive_start(struct srv_session *s, uint32_t timeout_ms);

void srv_keepalive_call_begin(struct srv_session *s);
void srv_keepalive_call_end(struct srv_session *s);
/* A handler starts writing its reply (srv_reply_bulk): no keepalive until the next call. */
void srv_keepalive_reply_begin(struct srv_session *s);

#endif
