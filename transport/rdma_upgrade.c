/* A session's move from TCP to RDMA: the server offers a listener with a one-time secret on
 * its end of the TCP connection's address, the client connects proving the secret, and the TCP
 * socket stays open only so that either side notices a dead peer. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"
#include "transport/rdma_conn.h"

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
    st = transport_rdma_ops.listen(addr, &offer->listener);
    rdma_set_quiet(false);
    if (st != RG_OK) { /* the address without its ":0" */
        snprintf(why, len, "no RDMA listener on %.*s (%s)", (int)strlen(addr) - 2, addr,
                 rg_status_str(st));
        return st;
    }
    if (getrandom(offer->secret, sizeof(offer->secret), 0) != (ssize_t)sizeof(offer->secret) ||
        transport_rdma_ops.listener_addr(offer->listener, offer->addr, sizeof(offer->addr))) {
        snprintf(why, len, "no random secret or listener address");
        transport_rdma_offer_close(offer);
        return RG_ERR_IO;
    }
    return RG_OK;
}

void transport_rdma_offer_close(struct transport_rdma_offer *offer)
{
    if (offer->listener != NULL)
        transport_rdma_ops.listener_close(offer->listener);
    offer->listener = NULL;
    memset(offer->secret, 0, sizeof(offer->secret));
}

static int64_t offer_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

rg_status_t transport_rdma_offer_accept(struct transport_rdma_offer *offer, int ctl_fd,
                                        int timeout_ms, struct transport_conn **conn_p)
{
    int64_t deadline = offer_now_ms() + timeout_ms;
    struct pollfd p[2] = {{.fd = transport_rdma_ops.listener_fd(offer->listener), .events = POLLIN},
                          {.fd = ctl_fd, .events = POLLIN}};
    rg_status_t st;
    char b;

    for (;;) {
        int left = (int)(deadline - offer_now_ms());
        if (left <= 0 || poll(p, 2, left) == 0)
            return RG_ERR_NOT_FOUND;
        if (p[1].revents != 0) /* the client went on over TCP, or left */
            return recv(ctl_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0 ? RG_ERR_NOT_FOUND
                                                                    : RG_ERR_CLOSED;
        if (!(p[0].revents & POLLIN))
            continue;
        st = transport_rdma_accept_secret(offer->listener, offer->secret, sizeof(offer->secret),
                                          conn_p);
        if (st == RG_OK) {
            transport_set_watch_fd(*conn_p, ctl_fd);
            return RG_OK;
        }
        if (st != RG_ERR_REFUSED && st != RG_ERR_TIMEOUT)
            return st;
    }
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
