/* What every backend shares: finding one by name, and the calls that dispatch on what a
 * connection's backend can do. The backends: tcp.c and loop.c (their data path: sock.c) and
 * rdma_*.c. */
#include "transport/transport.h"

#include <string.h>

const struct transport_ops *transport_find(const char *name)
{
    static const struct transport_ops *const backends[] = {&transport_tcp_ops, &transport_loop_ops,
                                                           &transport_rdma_ops};

    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

void transport_set_busy_poll(struct transport_conn *conn, unsigned us)
{
    if (conn->ops->caps & TRANSPORT_CAP_BUSY_POLL)
        conn->ops->set_busy_poll(conn, us);
}

rg_status_t transport_wait_readable(struct transport_conn *conn, int timeout_ms)
{
    return conn->ops->wait_readable(conn, timeout_ms);
}

void transport_set_watch_fd(struct transport_conn *conn, int fd)
{
    conn->ops->set_watch_fd(conn, fd);
}
