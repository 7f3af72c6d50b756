/* Private to transport/: the rdma backend's connection object, shared by its connection
 * management (rdma_cm.c), data path (rdma_data.c) and upgrade helpers (rdma_upgrade.c). */
#ifndef RGPU_TRANSPORT_RDMA_CONN_H
#define RGPU_TRANSPORT_RDMA_CONN_H

#include <pthread.h>
#include <stdbool.h>

#include "transport/rdma.h"
#include "transport/rdma_dl.h"
#include "transport/sock.h"

#define RDMA_SQ_DEPTH      (RDMA_SEND_DEPTH + 8) /* + credit updates and one-sided operations */
#define RDMA_CQ_DEPTH      (RDMA_SQ_DEPTH + RDMA_RECV_DEPTH)
#define RDMA_RNR_RETRY     6 /* finite: a peer without a posted buffer is an error, not a hang */
#define RDMA_CM_TIMEOUT_MS 5000
#define RDMA_INLINE_MAX    256 /* sent inside the work request: no DMA read of the slot */

/* wr_id = kind << 32 | slot */
enum rdma_wr_kind { RDMA_WR_SEND = 1, RDMA_WR_CREDIT, RDMA_WR_ONESIDED, RDMA_WR_RECV };

struct rdma_conn {
    struct transport_conn super;
    const struct rdma_dl *dl;
    struct rdma_event_channel *ech;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cch;
    struct ibv_cq *cq;
    struct ibv_mr *send_mr, *recv_mr;
    uint8_t *send_buf, *recv_buf; /* RDMA_SEND_DEPTH / RDMA_RECV_DEPTH slots */
    int wake_fd;                  /* eventfd: wakes the thread blocked in poll (the poller) */
    int watch_fd;                 /* transport_set_watch_fd; -1: none */
    int io_timeout_ms;
    int recv_idle_ms; /* set_recv_idle: a receive ends after this long without a byte (0: off) */
    uint32_t max_inline;
    unsigned busy_poll_us;
    char peer[TRANSPORT_PEER_MAX];

    pthread_mutex_t lock; /* guards everything below */
    /* Threads wait in rdma_wait one of two ways: one (the poller) blocks in poll on the
     * channels and wake_fd; the others sleep on cond (CLOCK_MONOTONIC). Every change of state
     * (rdma_wake) broadcasts cond and, while a poller polls, writes wake_fd; only the poller
     * drains it, so no thread can swallow a wake-up meant for another, and the poller
     * broadcasts when it returns so that a sleeper takes over the polling. */
    pthread_cond_t cond;
    bool polling;
    unsigned sleepers;
    unsigned send_next, send_busy;    /* send slots, used and completed in order */
    unsigned sq_used;                 /* work requests in the send queue */
    unsigned credits;                 /* peer receive buffers we may fill */
    unsigned unreturned;              /* our receive buffers reposted, not yet told to the peer */
    unsigned ready_head, ready_count; /* received slots not yet read, in arrival order */
    struct {
        uint32_t slot, len;
    } ready[RDMA_RECV_DEPTH];
    uint32_t ready_off; /* bytes of the head slot already read */
    bool os_done;       /* the one-sided operation in flight completed */
    enum ibv_wc_status os_status;
    bool shut;
    rg_status_t broken; /* RG_OK while usable */
};

/* The state changed (lock held): every thread waiting in rdma_wait looks again. */
void rdma_wake(struct rdma_conn *c);

struct rdma_mr {
    struct transport_mr super;
    struct ibv_mr *mr;
    unsigned access;
};

static inline struct rdma_conn *rdma_conn_of(struct transport_conn *conn)
{
    return (struct rdma_conn *)((char *)conn - offsetof(struct rdma_conn, super));
}

/* rdma_data.c */
rg_status_t rdma_post_recv_slot(struct rdma_conn *c, unsigned slot);
void rdma_mark_broken(struct rdma_conn *c, rg_status_t status, const char *what);
rg_status_t rdma_sendv(struct transport_conn *conn, const struct iovec *iov, int iovcnt);
rg_status_t rdma_recv(struct transport_conn *conn, void *buf, size_t len);
rg_status_t rdma_mem_reg(struct transport_conn *conn, void *addr, size_t len, unsigned access,
                         struct transport_mr **mr_p);
void rdma_mem_dereg(struct transport_mr *mr);
rg_status_t rdma_mem_reg_dmabuf(struct transport_conn *conn, int fd, uint64_t offset, size_t len,
                                uint64_t iova, unsigned access, struct transport_mr **mr_p);
rg_status_t rdma_write(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                       uint64_t raddr, uint32_t rkey, size_t len);
rg_status_t rdma_read(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                      uint64_t raddr, uint32_t rkey, size_t len);
/* Wait (lock held) until every send slot completed or deadline_ms passed. */
void rdma_drain_sends(struct rdma_conn *c, int timeout_ms);

/* rdma_cm.c: this thread's connect/listen failures logged at debug (the caller logs them). */
void rdma_set_quiet(bool quiet);
/* rdma_cm.c: wait for one cm event on ch, of type want; RG_OK or an error, logged. The event's
 * private data is copied to pdata (up to *pdata_len bytes; *pdata_len updated) when asked. */
rg_status_t rdma_cm_wait(const struct rdma_dl *dl, struct rdma_event_channel *ch,
                         enum rdma_cm_event_type want, int timeout_ms, const char *peer,
                         struct rdma_cm_id **id_p, void *pdata, size_t *pdata_len);

#endif
