#include "server/peer_gate.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "proto/frame.h"
#include "server/preauth.h"

bool srv_peer_gate(const struct srv_tenants *tenants, const struct srv_gate_peer *p,
                   struct srv_gate *g)
{
    const char *why = NULL;
    const char *detail = p->detail != NULL && p->detail[0] != '\0' ? p->detail : NULL;

    memset(g, 0, sizeof(*g));
    if (!proto_version_accept(PROTO_VERSION, PROTO_VERSION_MINOR, p->major, p->minor, &g->minor,
                              g->why, sizeof(g->why))) {
        rg_warn("refused the %s of %s%s%s%s: %s", p->what, p->peer, detail ? " (" : "",
                detail ? detail : "", detail ? ")" : "", g->why);
        g->status = CUDA_ERROR_NOT_SUPPORTED;
        g->reason = g->why;
        return false;
    }
    if (tenants->n == 0)
        return true;
    if ((g->tenant = srv_tenant_auth(tenants, p->tenant, p->token, &why)) != NULL)
        return true;
    rg_warn("refused the %s of %s%s%s%s: tenant '%s': %s", p->what, p->peer, detail ? " (" : "",
            detail ? detail : "", detail ? ")" : "", RG_PEER_STR(p->tenant), why);
    g->status = CUDA_ERROR_NOT_PERMITTED;
    g->reason = SRV_AUTH_REFUSED;
    return false;
}
