/* The rdma backend's data path: credit-based SEND/RECV for the byte stream, one-sided RDMA
 * READ/WRITE, and the wait that turns completions, cm events and the watch fd into progress.
 * No allocation here: slots and regions are set up when the connection is made. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/rdma_conn.h"

#define RDMA_WR_ID(kind, slot) (((uint64_t)(kind) << 32) | (slot))
#define RDMA_ONESIDED_MAX      (1u << 30) /* one work request moves at most this much */

static int64_t rdma_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t rdma_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void rdma_wake(struct rdma_conn *c)
{
    uint64_t one = 1;

    if (c->sleepers > 0)
        pthread_cond_broadcast(&c->cond);
    if (c->polling && write(c->wake_fd, &one, sizeof(one)) < 0)
        rg_debug("rdma wake-up: %s", strerror(errno));
}

/* The first failure ends the connection; it is logged once, with what happened. */
void rdma_mark_broken(struct rdma_conn *c, rg_status_t status, const char *what)
{
    if (c->broken != RG_OK)
        return;
    c->broken = status;
    if (status == RG_ERR_CLOSED)
        rg_debug("rdma connection to %s: %s", c->peer, what);
    else
        rg_error("rdma connection to %s failed: %s; the connection is closed", c->peer, what);
    rdma_wake(c);
}

rg_status_t rdma_post_recv_slot(struct rdma_conn *c, unsigned slot)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->recv_buf + (size_t)slot * RDMA_SLOT_SIZE),
                          .length = RDMA_SLOT_SIZE,
                          .lkey = c->recv_mr->lkey};
    struct ibv_recv_wr wr = {
        .wr_id = RDMA_WR_ID(RDMA_WR_RECV, slot), .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    int rc = ibv_post_recv(c->id->qp, &wr, &bad);

    if (rc != 0) {
        rdma_mark_broken(c, RG_ERR_IO, "posting a receive buffer failed");
        return RG_ERR_IO;
    }
    return RG_OK;
}

/* What a failed completion means for the session. */
static void rdma_wc_failed(struct rdma_conn *c, const struct ibv_wc *wc)
{
    char what[160];

    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        rdma_mark_broken(c, RG_ERR_CLOSED, "the queue pair was flushed (peer gone)");
        return;
    }
    snprintf(what, sizeof(what), "%s (%s)", c->dl->wc_status_str(wc->status),
             wc->status == IBV_WC_RNR_RETRY_EXC_ERR ? "the peer had no receive buffer posted"
             : wc->status == IBV_WC_REM_ACCESS_ERR  ? "the peer refused the key, range or access"
                                                    : "queue pair in the error state");
    rdma_mark_broken(c, wc->status == IBV_WC_REM_ACCESS_ERR ? RG_ERR_INVALID : RG_ERR_IO, what);
}

static void rdma_take_recv(struct rdma_conn *c, const struct ibv_wc *wc)
{
    unsigned slot = (unsigned)(wc->wr_id & 0xffffffffu);

    if (wc->wc_flags & IBV_WC_WITH_IMM)
        c->credits += ntohl(wc->imm_data);
    if (wc->byte_len == 0) { /* a credit update only: the buffer goes straight back */
        if (rdma_post_recv_slot(c, slot) == RG_OK)
            c->unreturned++;
        return;
    }
    unsigned at = (c->ready_head + c->ready_count++) % RDMA_RECV_DEPTH;
    c->ready[at].slot = slot;
    c->ready[at].len = wc->byte_len;
}

/* Poll the completion queue (lock held); the number of completions handled. Whoever handles
 * completions wakes the other threads waiting on the connection: a completion one of them
 * waits for (credits, a free send slot, data) may be taken here by another thread, outside
 * rdma_wait, after the completion event that would have woken it was consumed too (both ends'
 * senders and receivers then slept for good: transport_rdma's test_both_directions hang,
 * issue 15 item 14). */
static int rdma_progress(struct rdma_conn *c)
{
    struct ibv_wc wc[16];
    int n, total = 0;

    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            enum rdma_wr_kind kind = (enum rdma_wr_kind)(wc[i].wr_id >> 32);
            if (kind == RDMA_WR_RECV) {
                if (wc[i].status == IBV_WC_SUCCESS)
                    rdma_take_recv(c, &wc[i]);
                else
                    rdma_wc_failed(c, &wc[i]);
                continue;
            }
            c->sq_used--;
            if (kind == RDMA_WR_SEND)
                c->send_busy--;
            if (kind == RDMA_WR_ONESIDED) {
                c->os_done = true;
                c->os_status = wc[i].status;
            }
            if (wc[i].status != IBV_WC_SUCCESS) /* before the flushes that follow it */
                rdma_wc_failed(c, &wc[i]);
        }
        total += n;
    }
    if (n < 0)
        rdma_mark_broken(c, RG_ERR_IO, "polling the completion queue failed");
    if (total > 0)
        rdma_wake(c);
    return total;
}

/* The peer's side of the session's TCP socket: closed means gone; data is a protocol error. */
static void rdma_check_watch(struct rdma_conn *c)
{
    char b;
    ssize_t n = recv(c->watch_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        rdma_mark_broken(c, RG_ERR_CLOSED, "the session's TCP connection closed (peer gone)");
    else if (n > 0)
        rdma_mark_broken(c, RG_ERR_PROTO, "unexpected data on the session's TCP connection");
}

static void rdma_take_cm_event(struct rdma_conn *c)
{
    struct rdma_cm_event *ev;

    while (c->dl->get_cm_event(c->ech, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        c->dl->ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            /* Flushes our queue pair: what already arrived is still read first. */
            c->dl->disconnect(c->id);
            rg_debug("rdma connection to %s: %s", c->peer, c->dl->event_str(type));
        }
    }
}

/* Spin on the completion queue for up to busy_poll_us (lock held, dropped while spinning). */
static int rdma_busy_poll(struct rdma_conn *c)
{
    uint64_t end = rdma_now_us() + c->busy_poll_us;
    int n = 0;

    while (n == 0 && c->broken == RG_OK && rdma_now_us() < end) {
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&c->lock);
        n = rdma_progress(c);
    }
    return n;
}

/* Sleep on the condition variable until a wake-up or the deadline (lock held). */
static rg_status_t rdma_sleep(struct rdma_conn *c, int64_t deadline_ms)
{
    struct timespec ts = {.tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000};
    int rc;

    c->sleepers++;
    rc = deadline_ms > 0 ? pthread_cond_timedwait(&c->cond, &c->lock, &ts)
                         : pthread_cond_wait(&c->cond, &c->lock);
    c->sleepers--;
    return rc == ETIMEDOUT ? RG_ERR_TIMEOUT : RG_OK;
}

/* Block until something may have changed or deadline_ms (absolute, 0: none) passed (lock
 * held, dropped while blocked). RG_ERR_TIMEOUT when the deadline passed. One thread at a time
 * polls the channels; the others sleep until it or another thread's progress wakes them. */
static rg_status_t rdma_wait(struct rdma_conn *c, int64_t deadline_ms)
{
    struct pollfd p[4] = {{.fd = c->cch->fd, .events = POLLIN},
                          {.fd = c->ech->fd, .events = POLLIN},
                          {.fd = c->wake_fd, .events = POLLIN},
                          {.fd = c->watch_fd, .events = POLLIN}};
    int timeout = -1, rc;
    struct ibv_cq *cq;
    void *ctx;
    uint64_t v;

    if ((c->busy_poll_us > 0 && rdma_busy_poll(c) > 0) || ibv_req_notify_cq(c->cq, 0) != 0 ||
        rdma_progress(c) > 0)
        return RG_OK;
    if (deadline_ms > 0 && (timeout = (int)(deadline_ms - rdma_now_ms())) <= 0)
        return RG_ERR_TIMEOUT;
    if (c->polling)
        return rdma_sleep(c, deadline_ms);
    c->polling = true;
    pthread_mutex_unlock(&c->lock);
    rc = poll(p, c->watch_fd >= 0 ? 4 : 3, timeout);
    pthread_mutex_lock(&c->lock);
    c->polling = false;
    if (rc > 0 && (p[0].revents & POLLIN) && c->dl->get_cq_event(c->cch, &cq, &ctx) == 0)
        c->dl->ack_cq_events(cq, 1);
    if (rc > 0 && (p[1].revents & POLLIN))
        rdma_take_cm_event(c);
    if (rc > 0 && (p[2].revents & POLLIN) && read(c->wake_fd, &v, sizeof(v)) < 0)
        v = 0;
    rdma_progress(c);
    if (rc > 0 && p[3].revents != 0 && c->ready_count == 0)
        rdma_check_watch(c);
    if (c->sleepers > 0) /* one of them polls next */
        pthread_cond_broadcast(&c->cond);
    return RG_OK;
}

/* Post one work request (lock held) taking a send-queue entry (already taken if reserved). */
static rg_status_t rdma_post_wr(struct rdma_conn *c, struct ibv_send_wr *wr, const char *what,
                                bool reserved)
{
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->id->qp, wr, &bad);
    char msg[96];

    if (rc != 0) {
        snprintf(msg, sizeof(msg), "posting %s failed: %s", what, strerror(rc));
        rdma_mark_broken(c, RG_ERR_IO, msg);
        return RG_ERR_IO;
    }
    if (!reserved)
        c->sq_used++;
    return RG_OK;
}

static rg_status_t rdma_post(struct rdma_conn *c, struct ibv_send_wr *wr, const char *what)
{
    return rdma_post_wr(c, wr, what, false);
}

/* Hand back the receive buffers freed so far once half the queue is waiting for it (a message
 * of length 0 whose immediate carries the count). It costs one credit; data needs two, so one
 * is always left for this. */
static void rdma_return_credits(struct rdma_conn *c)
{
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_CREDIT, 0),
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED};

    if (c->unreturned < RDMA_RECV_DEPTH / 2 || c->credits < 1 || c->sq_used >= RDMA_SQ_DEPTH ||
        c->broken != RG_OK)
        return;
    wr.imm_data = htonl(c->unreturned);
    if (rdma_post(c, &wr, "a credit update") == RG_OK) {
        c->credits--;
        c->unreturned = 0;
    }
}

/* Copy the next bytes of iov into dst (at most cap); advances (*idx, *off). */
static uint32_t rdma_gather(uint8_t *dst, size_t cap, const struct iovec *iov, int iovcnt, int *idx,
                            size_t *off)
{
    size_t n = 0;

    while (*idx < iovcnt && n < cap) {
        size_t left = iov[*idx].iov_len - *off, take = left < cap - n ? left : cap - n;
        memcpy(dst + n, (const uint8_t *)iov[*idx].iov_base + *off, take);
        n += take;
        *off += take;
        if (*off == iov[*idx].iov_len) {
            (*idx)++;
            *off = 0;
        }
    }
    return (uint32_t)n;
}

/* Wait (lock held) for a free send slot, two credits and send queue room. */
static rg_status_t rdma_wait_send_room(struct rdma_conn *c, int64_t deadline)
{
    rg_status_t st = RG_OK;

    while (st == RG_OK && c->broken == RG_OK && !c->shut &&
           (c->send_busy == RDMA_SEND_DEPTH || c->credits < 2 || c->sq_used >= RDMA_SQ_DEPTH))
        if (rdma_progress(c) == 0)
            st = rdma_wait(c, deadline);
    if (st == RG_ERR_TIMEOUT)
        rg_warn("send to %s timed out: the peer returns no receive credits", c->peer);
    return st != RG_OK ? st : c->shut ? RG_ERR_CLOSED : c->broken;
}

static rg_status_t rdma_send_slot(struct rdma_conn *c, unsigned slot, uint32_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(c->send_buf + (size_t)slot * RDMA_SLOT_SIZE),
                          .length = len,
                          .lkey = c->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_SEND, slot),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED};

    wr.imm_data = htonl(c->unreturned);
    if (len <= c->max_inline)
        wr.send_flags |= IBV_SEND_INLINE;
    if (rdma_post_wr(c, &wr, "a send", true) != RG_OK)
        return RG_ERR_IO;
    c->unreturned = 0;
    return RG_OK;
}

rg_status_t rdma_sendv(struct transport_conn *conn, const struct iovec *iov, int iovcnt)
{
    struct rdma_conn *c = rdma_conn_of(conn);
    int64_t deadline = c->io_timeout_ms > 0 ? rdma_now_ms() + c->io_timeout_ms : 0;
    rg_status_t st = RG_OK;
    size_t off = 0;
    int idx = 0;

    if (iovcnt < 0 || (iovcnt > 0 && iov == NULL))
        return RG_ERR_INVALID;
    while (idx < iovcnt && iov[idx].iov_len == 0)
        idx++;
    pthread_mutex_lock(&c->lock);
    while (st == RG_OK && idx < iovcnt) {
        if ((st = rdma_wait_send_room(c, deadline)) != RG_OK)
            break;
        unsigned slot = c->send_next;
        c->send_next = (c->send_next + 1) % RDMA_SEND_DEPTH;
        c->send_busy++;
        c->credits--; /* taken now: a credit update sent while we copy must not use them */
        c->sq_used++;
        /* The slot is ours until its completion: fill it without the lock. */
        pthread_mutex_unlock(&c->lock);
        uint32_t len = rdma_gather(c->send_buf + (size_t)slot * RDMA_SLOT_SIZE, RDMA_SLOT_SIZE, iov,
                                   iovcnt, &idx, &off);
        while (idx < iovcnt && iov[idx].iov_len == 0)
            idx++;
        pthread_mutex_lock(&c->lock);
        st = c->broken != RG_OK ? c->broken : rdma_send_slot(c, slot, len);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* The head slot is read: give it back to the receive queue. */
static void rdma_release_head(struct rdma_conn *c)
{
    unsigned slot = c->ready[c->ready_head].slot;

    c->ready_head = (c->ready_head + 1) % RDMA_RECV_DEPTH;
    c->ready_count--;
    c->ready_off = 0;
    if (rdma_post_recv_slot(c, slot) == RG_OK)
        c->unreturned++;
    rdma_return_credits(c);
}

rg_status_t rdma_recv(struct transport_conn *conn, void *buf, size_t len)
{
    struct rdma_conn *c = rdma_conn_of(conn);
    int idle = c->recv_idle_ms;
    int64_t deadline = idle > 0               ? rdma_now_ms() + idle
                       : c->io_timeout_ms > 0 ? rdma_now_ms() + c->io_timeout_ms
                                              : 0;
    rg_status_t st = RG_OK;
    size_t got = 0;

    pthread_mutex_lock(&c->lock);
    while (got < len && st == RG_OK) {
        if (c->ready_count > 0 && !c->shut) {
            uint32_t slot = c->ready[c->ready_head].slot, avail;
            avail = c->ready[c->ready_head].len - c->ready_off;
            size_t n = avail < len - got ? avail : len - got;
            const uint8_t *src = c->recv_buf + (size_t)slot * RDMA_SLOT_SIZE + c->ready_off;
            /* Only this receiver consumes the head slot: copy without the lock. */
            pthread_mutex_unlock(&c->lock);
            memcpy((uint8_t *)buf + got, src, n);
            pthread_mutex_lock(&c->lock);
            got += n;
            if (idle > 0) /* bytes came: the wait for the next starts again */
                deadline = rdma_now_ms() + idle;
            if ((c->ready_off += (uint32_t)n) == c->ready[c->ready_head].len)
                rdma_release_head(c);
        } else if (c->shut || c->broken != RG_OK) {
            st = c->shut ? RG_ERR_CLOSED : c->broken;
        } else if (rdma_progress(c) == 0) {
            st = rdma_wait(c, deadline);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (st == RG_ERR_TIMEOUT)
        rg_warn("recv from %s timed out", c->peer);
    return st;
}

/* Wait for all send slots to complete (lock held), so an orderly close delivers them. */
void rdma_drain_sends(struct rdma_conn *c, int timeout_ms)
{
    int64_t deadline = rdma_now_ms() + timeout_ms;

    while (c->send_busy > 0 && c->broken == RG_OK)
        if (rdma_progress(c) == 0 && rdma_wait(c, deadline) != RG_OK)
            break;
}

/* ---- one-sided -------------------------------------------------------------------------- */

static int rdma_access_flags(unsigned access)
{
    int flags = 0;

    if (access & TRANSPORT_ACCESS_LOCAL_WRITE)
        flags |= IBV_ACCESS_LOCAL_WRITE;
    if (access & TRANSPORT_ACCESS_REMOTE_READ)
        flags |= IBV_ACCESS_REMOTE_READ;
    if (access & TRANSPORT_ACCESS_REMOTE_WRITE) /* verbs requires local write with it */
        flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    return flags;
}

static void rdma_mr_init(struct rdma_mr *m, struct transport_conn *conn, void *addr, size_t len,
                         unsigned access)
{
    m->super =
        (struct transport_mr){.ops = conn->ops, .addr = addr, .len = len, .key = m->mr->rkey};
    m->access = access;
}

rg_status_t rdma_mem_reg(struct transport_conn *conn, void *addr, size_t len, unsigned access,
                         struct transport_mr **mr_p)
{
    struct rdma_conn *c = rdma_conn_of(conn);
    struct rdma_mr *m;

    if (addr == NULL || len == 0)
        return RG_ERR_INVALID;
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return RG_ERR_NOMEM;
    if ((m->mr = c->dl->reg_mr(c->pd, addr, len, rdma_access_flags(access))) == NULL) {
        rg_error("registering %zu bytes at %p for rdma failed: %s", len, addr, strerror(errno));
        free(m);
        return RG_ERR_IO;
    }
    rdma_mr_init(m, conn, addr, len, access);
    *mr_p = &m->super;
    return RG_OK;
}

/* GPUDirect RDMA: the region's addresses are the iova the caller chose (the device address),
 * which the adapter translates through the dmabuf's pages; nothing here dereferences them. */
rg_status_t rdma_mem_reg_dmabuf(struct transport_conn *conn, int fd, uint64_t offset, size_t len,
                                uint64_t iova, unsigned access, struct transport_mr **mr_p)
{
    struct rdma_conn *c = rdma_conn_of(conn);
    struct rdma_mr *m;
    int err;

    if (fd < 0 || len == 0 || iova == 0 || iova + len < iova)
        return RG_ERR_INVALID;
    if (c->dl->reg_dmabuf_mr == NULL)
        return RG_ERR_UNSUPPORTED;
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return RG_ERR_NOMEM;
    m->mr = c->dl->reg_dmabuf_mr(c->pd, offset, len, iova, fd, rdma_access_flags(access));
    if (m->mr == NULL) {
        err = errno;
        free(m);
        errno = err;
        return RG_ERR_IO;
    }
    rdma_mr_init(m, conn, (void *)(uintptr_t)iova, len, access);
    *mr_p = &m->super;
    return RG_OK;
}

void rdma_mem_dereg(struct transport_mr *mr)
{
    struct rdma_mr *m;
    char why[8];

    if (mr == NULL)
        return;
    m = (struct rdma_mr *)((char *)mr - offsetof(struct rdma_mr, super));
    rdma_dl_get(why, sizeof(why))->dereg_mr(m->mr);
    free(m);
}

/* One work request of a one-sided operation, waited for (lock held). */
static rg_status_t rdma_onesided_one(struct rdma_conn *c, enum ibv_wr_opcode op,
                                     struct ibv_sge *sge, uint64_t raddr, uint32_t rkey)
{
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_ONESIDED, 0),
                             .sg_list = sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED};
    rg_status_t st = RG_OK;

    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    while (c->broken == RG_OK && c->sq_used >= RDMA_SQ_DEPTH && st == RG_OK)
        if (rdma_progress(c) == 0)
            st = rdma_wait(c, 0);
    if (st != RG_OK || c->broken != RG_OK)
        return c->broken != RG_OK ? c->broken : st;
    c->os_done = false;
    if ((st = rdma_post(c, &wr, op == IBV_WR_RDMA_READ ? "an rdma read" : "an rdma write")))
        return st;
    while (!c->os_done && st == RG_OK)
        if (rdma_progress(c) == 0 && !c->os_done)
            st = rdma_wait(c, 0);
    if (st == RG_OK && c->os_status != IBV_WC_SUCCESS)
        st = c->broken;
    return st;
}

static rg_status_t rdma_onesided(struct transport_conn *conn, enum ibv_wr_opcode op,
                                 struct transport_mr *local, void *laddr, uint64_t raddr,
                                 uint32_t rkey, size_t len)
{
    struct rdma_conn *c = rdma_conn_of(conn);
    struct rdma_mr *m =
        local != NULL ? (struct rdma_mr *)((char *)local - offsetof(struct rdma_mr, super)) : NULL;
    uintptr_t la = (uintptr_t)laddr, base = m != NULL ? (uintptr_t)local->addr : 0;
    rg_status_t st = RG_OK;

    /* Local checks first: they fail the call, not the connection. */
    if (m == NULL || la < base || len > local->len || la - base > local->len - len ||
        raddr + len < raddr ||
        (op == IBV_WR_RDMA_READ && !(m->access & TRANSPORT_ACCESS_LOCAL_WRITE)))
        return RG_ERR_INVALID;
    pthread_mutex_lock(&c->lock);
    for (size_t done = 0; done < len && st == RG_OK;) {
        uint32_t n = len - done < RDMA_ONESIDED_MAX ? (uint32_t)(len - done) : RDMA_ONESIDED_MAX;
        struct ibv_sge sge = {.addr = la + done, .length = n, .lkey = m->mr->lkey};
        st = rdma_onesided_one(c, op, &sge, raddr + done, rkey);
        done += n;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

rg_status_t rdma_write(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                       uint64_t raddr, uint32_t rkey, size_t len)
{
    return rdma_onesided(conn, IBV_WR_RDMA_WRITE, local, laddr, raddr, rkey, len);
}

rg_status_t rdma_read(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                      uint64_t raddr, uint32_t rkey, size_t len)
{
    return rdma_onesided(conn, IBV_WR_RDMA_READ, local, laddr, raddr, rkey, len);
}
