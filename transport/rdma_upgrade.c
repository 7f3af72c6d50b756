/* A session's move from TCP to RDMA: the server offers a side listener (transport/
 * side_listener.h) with a one-time secret on its end of the TCP connection's address, the
 * client connects proving the secret in its connection request, and the TCP socket stays open
 * only so that either side notices a dead peer. */
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "transport/rdma_conn.h"
#include "transport/side_listener.h"

rg_status_t transport_rdma_offer_open(int ctl_fd, struct transport_rdma_offer *offer, char *why,
                                      size_t len)
{
    char addr[NI_MAXHOST + 8];
    rg_status_t st;

    memset(offer, 0, sizeof(*offer));
    if ((st = transport_rdma_probe(why, len)) != RG_OK)
        return st;
    if (transport_local_any_port(ctl_fd, addr, sizeof(addr)) != RG_OK) {
        snprintf(why, len, "the session's local address is unknown");
        return RG_ERR_IO;
    }
    rdma_set_quiet(true);
    st = transport_side_open(&(struct transport_side_params){.ops = &transport_rdma_ops,
                                                             .addr = addr,
                                                             .secret_len = RDMA_SECRET_LEN,
                                                             .what = "an RDMA upgrade"},
                             &offer->side);
    rdma_set_quiet(false);
    if (st != RG_OK) { /* the address without its ":0" */
        snprintf(why, len, "no RDMA listener on %.*s (%s)", (int)strlen(addr) - 2, addr,
                 rg_status_str(st));
        return st;
    }
    snprintf(offer->addr, sizeof(offer->addr), "%s", transport_side_addr(offer->side));
    memcpy(offer->secret, transport_side_secret(offer->side), sizeof(offer->secret));
    return RG_OK;
}

void transport_rdma_offer_close(struct transport_rdma_offer *offer)
{
    transport_side_close(offer->side);
    offer->side = NULL;
    memset(offer->secret, 0, sizeof(offer->secret));
}

static bool take_client(void *arg, struct transport_conn *conn, const uint8_t *tag)
{
    *(struct transport_conn **)arg = conn;
    return true;
}

rg_status_t transport_rdma_offer_accept(struct transport_rdma_offer *offer, int ctl_fd,
                                        int timeout_ms, struct transport_conn **conn_p)
{
    struct transport_conn *conn = NULL;
    rg_status_t st = transport_side_accept(offer->side, 1, timeout_ms, ctl_fd, take_client, &conn);

    if (st == RG_OK) {
        transport_set_watch_fd(conn, ctl_fd);
        *conn_p = conn;
    }
    return st == RG_ERR_TIMEOUT ? RG_ERR_NOT_FOUND : st; /* not in time: as if it stayed */
}

rg_status_t transport_rdma_upgrade(const char *addr, const void *secret, size_t secret_len,
                                   int ctl_fd, const struct transport_opts *opts,
                                   struct transport_conn **conn_p)
{
    rg_status_t st;

    rdma_set_quiet(true); /* the session logs the outcome in one line */
    st = transport_rdma_connect_pdata(addr, opts, secret, secret_len, conn_p);
    rdma_set_quiet(false);
    if (st == RG_OK)
        transport_set_watch_fd(*conn_p, ctl_fd);
    return st;
}
