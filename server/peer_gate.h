/* The one gate a peer passes before it is served: a Hello or a Probe, checked by the supervisor
 * before anything is forked and again by the worker on the Hello the supervisor hands it. Its
 * protocol version against this server's (proto_version_accept), then its tenant and token
 * (srv_tenant_auth: the same work for an unknown tenant and a wrong token); a server without
 * tenants admits any peer whose version it speaks. The refusal the peer hears names no tenant;
 * the log line (one, written here) says which check failed, with every string the peer sent
 * escaped (rg_log_escape). */
#ifndef RGPU_SERVER_PEER_GATE_H
#define RGPU_SERVER_PEER_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "server/tenant_config.h"

struct srv_gate {
    CUresult status;                 /* CUDA_SUCCESS when through, else the refusal's */
    const char *reason;              /* refused: what the peer hears (a constant or why) */
    uint32_t minor;                  /* through: the minor the session speaks */
    const struct srv_tenant *tenant; /* through: its tenant; NULL when the server has none */
    char why[200];
};

/* What the peer sent: its version, tenant and token, and for the log what it is ("hello",
 * "probe"), who (peer "ip:port") and, optionally, more about it (detail, already escaped: the
 * client's name, pid and host; "" or NULL for none). tenants: the server's (n == 0: open).
 * true when through (g->minor, g->tenant set); false with g->status and g->reason, logged. */
struct srv_gate_peer {
    const char *what, *peer, *detail;
    uint32_t major, minor;
    const char *tenant, *token;
};
bool srv_peer_gate(const struct srv_tenants *tenants, const struct srv_gate_peer *p,
                   struct srv_gate *g);

#endif
