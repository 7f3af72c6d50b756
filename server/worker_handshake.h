/* The worker's handshake, private to the worker (server/worker*.c): Hello -> gate -> quota ->
 * admission -> Welcome (worker_handshake.c), and the move to RDMA around the Welcome
 * (worker_rdma_upgrade.c). The call loop that follows is server/worker.c. */
#ifndef RGPU_SERVER_WORKER_HANDSHAKE_H
#define RGPU_SERVER_WORKER_HANDSHAKE_H

#include <stdint.h>

#include "server/server.h"
#include "server/session.h"
#include "transport/rdma.h"

#define SRV_EXIT_MALFORMED 2 /* the worker's exit status after a malformed message */

/* The session's transport beyond its TCP connection, during the handshake: the RDMA offer
 * named in the Welcome, or why there is none. */
struct srv_worker_rdma {
    struct transport_rdma_offer offer;
    char note[200];
};

/* Hello -> Welcome. Returns -1 to go on serving (with the client's session timeout in
 * *timeout_ms_p, for the keepalive), or the worker's exit status. An RDMA offer a refusal
 * left open is closed here. */
int srv_worker_handshake(struct srv_session *s, const struct srv_config *cfg,
                         uint32_t *timeout_ms_p);

/* Every log line of the worker names its session, and its tenant once known: set again when
 * the tenant is. */
void srv_worker_log_prefix(const struct srv_session *s);

/* A Welcome that refuses the session (status and reason for the client), logged. */
void srv_worker_refuse(struct srv_session *s, CUresult status, const char *reason);

/* Before the Welcome: open an RDMA offer when the client asks (want: its Hello's transport) and
 * this server allows. 0 to go on (with or without an offer), 1 when refused (transport = rdma
 * and no RDMA). */
int srv_worker_rdma_offer(struct srv_session *s, const struct srv_config *cfg, const char *want,
                          struct srv_worker_rdma *rdma);

/* After the Welcome: wait for the client's RDMA connection. -1 to serve, else exit status. */
int srv_worker_rdma_upgrade(struct srv_session *s, const struct srv_config *cfg,
                            struct srv_worker_rdma *rdma);

#endif
