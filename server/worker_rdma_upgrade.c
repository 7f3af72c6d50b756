/* The worker's move to RDMA: an offer named in the Welcome when the client asks and the server
 * allows, then the client's RDMA connection accepted after it (server/worker_handshake.h). */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "server/worker_handshake.h"

#define RDMA_UPGRADE_WAIT_MS 10000

int srv_worker_rdma_offer(struct srv_session *s, const struct srv_config *cfg, const char *want,
                          struct srv_worker_rdma *rdma)
{
    bool client_rdma = strcmp(want, "rdma") == 0 || strcmp(want, "auto") == 0;
    char why[160] = "", reason[256];

    if (cfg->transport == SRV_TRANSPORT_TCP)
        snprintf(rdma->note, sizeof(rdma->note), "the server is configured for tcp");
    else if (!client_rdma)
        snprintf(rdma->note, sizeof(rdma->note), "the client asked for tcp");
    else if (transport_rdma_offer_open(transport_fd(s->conn), &rdma->offer, why, sizeof(why)) ==
             RG_OK)
        return 0;
    else
        snprintf(rdma->note, sizeof(rdma->note), "the server cannot use RDMA: %s", why);
    if (cfg->transport == SRV_TRANSPORT_RDMA) {
        snprintf(reason, sizeof(reason), "this server requires RDMA (transport = rdma); %s",
                 rdma->note);
        srv_worker_refuse(s, CUDA_ERROR_NOT_SUPPORTED, reason);
        return 1;
    }
    if (client_rdma)
        rg_info("session %llu: transport tcp (%s)", (unsigned long long)s->id, rdma->note);
    return 0;
}

int srv_worker_rdma_upgrade(struct srv_session *s, const struct srv_config *cfg,
                            struct srv_worker_rdma *rdma)
{
    struct transport_conn *rconn;
    rg_status_t st;

    if (rdma->offer.side == NULL)
        return -1;
    st = transport_rdma_offer_accept(&rdma->offer, transport_fd(s->conn), RDMA_UPGRADE_WAIT_MS,
                                     &rconn);
    transport_rdma_offer_close(&rdma->offer);
    if (st == RG_OK) {
        s->tcp_ctl = s->conn;
        s->conn = rconn;
        transport_set_busy_poll(rconn, (unsigned)cfg->busy_poll_us);
        rg_info("session %llu: transport rdma", (unsigned long long)s->id);
        return -1;
    }
    if (st == RG_ERR_CLOSED) {
        rg_info("session %llu: %s left before moving to RDMA", (unsigned long long)s->id, s->peer);
        return 0;
    }
    if (cfg->transport == SRV_TRANSPORT_RDMA) {
        rg_error("session %llu: the client did not connect over RDMA (%s); transport = rdma "
                 "ends the session",
                 (unsigned long long)s->id, rg_status_str(st));
        return 1;
    }
    rg_info("session %llu: transport tcp (the client stayed on TCP: %s)", (unsigned long long)s->id,
            rg_status_str(st));
    return -1;
}
