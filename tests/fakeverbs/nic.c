/* The fake NIC: the process's device context, its service thread, and the queue pair wire
 * protocol (requests executed by the target against its registered regions; ACK/NAK back). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakeverbs.h"

#define FV_MAX_POLL 1024

static pthread_mutex_t fv_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fv_once = PTHREAD_ONCE_INIT;
static struct ibv_context fv_ctx;
static int fv_have_ctx;
static int fv_wake[2] = {-1, -1};
static struct fv_cm_id *fv_ids;
static uint64_t fv_next_serial = 1;
static char fv_dirname[108];

FV_EXPORT void fv_lock(void)
{
    pthread_mutex_lock(&fv_mutex);
}
FV_EXPORT void fv_unlock(void)
{
    pthread_mutex_unlock(&fv_mutex);
}
FV_EXPORT const char *fv_dir(void)
{
    return fv_dirname;
}

FV_EXPORT uint64_t fv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

FV_EXPORT void fv_kick(void)
{
    char c = 1;
    if (write(fv_wake[1], &c, 1) < 0 && errno != EAGAIN)
        fprintf(stderr, "fakeverbs: wake-up lost: %s\n", strerror(errno));
}

/* ---- byte queues ------------------------------------------------------------------------ */

static int fv_buf_reserve(struct fv_buf *b, size_t more)
{
    if (b->off > 0 && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + more <= b->cap)
        return 0;
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + more > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + more)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    return 0;
}

static int fv_buf_append(struct fv_buf *b, const void *p, size_t n)
{
    if (fv_buf_reserve(b, n) != 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

FV_EXPORT void fv_flush(struct fv_cm_id *cid)
{
    struct fv_buf *b = &cid->out;

    while (cid->fd >= 0 && b->off < b->len) {
        ssize_t n = send(cid->fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0)
            break; /* EAGAIN: the service thread writes the rest; errors show up as EOF there */
        b->off += (size_t)n;
    }
}

FV_EXPORT int fv_queue_pkt(struct fv_cm_id *cid, const struct fv_hdr *h, const void *payload)
{
    if (fv_buf_append(&cid->out, h, sizeof(*h)) != 0 ||
        (h->len > 0 && fv_buf_append(&cid->out, payload, h->len) != 0))
        return -1;
    fv_flush(cid);
    return 0;
}

/* ---- events and errors ------------------------------------------------------------------ */

FV_EXPORT void fv_post_event(struct fv_cm_id *cid, enum rdma_cm_event_type type, int status,
                             const void *pdata, size_t pdata_len)
{
    struct fv_event_channel *ch = (struct fv_event_channel *)cid->id.channel;
    struct fv_event *e;

    if (ch == NULL || (e = calloc(1, sizeof(*e))) == NULL)
        return;
    e->ev.id = &cid->id;
    e->ev.listen_id = cid->listen_id != NULL ? &cid->listen_id->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (pdata_len > FV_PDATA_MAX)
        pdata_len = FV_PDATA_MAX;
    if (pdata_len > 0)
        memcpy(e->pdata, pdata, pdata_len);
    e->ev.param.conn.private_data = e->pdata;
    e->ev.param.conn.private_data_len = (uint8_t)pdata_len;
    if (write(ch->wfd, &e, sizeof(e)) != (ssize_t)sizeof(e))
        free(e);
}

FV_EXPORT void fv_qp_error(struct fv_qp *qp)
{
    if (qp == NULL || qp->ibv.state == IBV_QPS_ERR)
        return;
    qp->ibv.state = IBV_QPS_ERR;
    qp->rnr_deadline_ms = 0;
    for (; qp->sq_count > 0; qp->sq_count--, qp->sq_head = (qp->sq_head + 1) % qp->sq_cap) {
        struct fv_send_wr *w = &qp->sq[qp->sq_head];
        fv_complete(qp->ibv.send_cq, qp, w->wr_id, w->opcode, IBV_WC_WR_FLUSH_ERR, 0);
    }
    for (; qp->rq_count > 0; qp->rq_count--, qp->rq_head = (qp->rq_head + 1) % qp->rq_cap)
        fv_complete(qp->ibv.recv_cq, qp, qp->rq[qp->rq_head].wr_id, IBV_WC_RECV,
                    IBV_WC_WR_FLUSH_ERR, 0);
}

FV_EXPORT void fv_link_down(struct fv_cm_id *cid)
{
    enum fv_link_state was = cid->state;

    if (was == FV_L_DOWN)
        return;
    cid->state = FV_L_DOWN;
    if (cid->fd >= 0)
        shutdown(cid->fd, SHUT_RDWR);
    if (was == FV_L_UP) {
        fv_qp_error(cid->qp);
        fv_post_event(cid, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
    } else if (was == FV_L_CONNECTING) {
        fv_post_event(cid, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET, NULL, 0);
    }
}

/* ---- ids -------------------------------------------------------------------------------- */

FV_EXPORT void fv_id_add(struct fv_cm_id *cid)
{
    cid->serial = fv_next_serial++;
    cid->next = fv_ids;
    fv_ids = cid;
}

FV_EXPORT void fv_id_remove(struct fv_cm_id *cid)
{
    for (struct fv_cm_id **p = &fv_ids; *p != NULL; p = &(*p)->next)
        if (*p == cid) {
            *p = cid->next;
            break;
        }
    if (cid->qp != NULL)
        cid->qp->cm = NULL;
    if (cid->fd >= 0)
        close(cid->fd);
    cid->fd = -1;
    free(cid->in.data);
    free(cid->out.data);
}

static struct fv_cm_id *fv_id_find(struct fv_cm_id *cid, uint64_t serial)
{
    for (struct fv_cm_id *p = fv_ids; p != NULL; p = p->next)
        if (p == cid && p->serial == serial)
            return p;
    return NULL;
}

/* ---- requests (we are the target) ------------------------------------------------------- */

static void fv_answer(struct fv_cm_id *cid, enum fv_pkt_type type, enum ibv_wc_status status,
                      const void *data, uint32_t len)
{
    struct fv_hdr h = {.type = (uint8_t)type, .status = (uint8_t)status, .len = len};
    fv_queue_pkt(cid, &h, data);
}

/* Scatter len bytes into a posted receive's buffers; an ibv_wc_status. */
static enum ibv_wc_status fv_scatter(struct fv_qp *qp, const struct ibv_sge *sge, int n,
                                     const uint8_t *src, uint32_t len)
{
    for (int i = 0; i < n && len > 0; i++) {
        uint32_t take = sge[i].length < len ? sge[i].length : len;
        struct ibv_mr *mr =
            fv_mr_check(qp->ibv.pd, sge[i].lkey, 0, sge[i].addr, take, IBV_ACCESS_LOCAL_WRITE);
        if (mr == NULL)
            return IBV_WC_LOC_PROT_ERR;
        memcpy(fv_mr_ptr(mr, sge[i].addr), src, take);
        src += take;
        len -= take;
    }
    return len == 0 ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

/* The oldest posted receive consumed by a SEND or WRITE with immediate. */
static int fv_take_recv(struct fv_cm_id *cid, const struct fv_hdr *h, const uint8_t *data)
{
    struct fv_qp *qp = cid->qp;
    struct fv_recv_wr *r = &qp->rq[qp->rq_head];
    struct ibv_wc wc = {.wr_id = r->wr_id, .qp_num = qp->ibv.qp_num, .byte_len = h->len};
    int is_send = h->type == FV_SEND;

    wc.opcode = is_send ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
    wc.status = is_send ? fv_scatter(qp, r->sge, r->num_sge, data, h->len) : IBV_WC_SUCCESS;
    if (h->has_imm) {
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = h->imm;
    }
    qp->rq_head = (qp->rq_head + 1) % qp->rq_cap;
    qp->rq_count--;
    fv_cq_push(qp->ibv.recv_cq, &wc);
    if (wc.status != IBV_WC_SUCCESS) {
        fv_answer(cid, FV_ACK, IBV_WC_REM_INV_REQ_ERR, NULL, 0);
        fv_qp_error(qp);
        return -1;
    }
    return 0;
}

/* Refuse a request: NAK to the requester, our queue pair to the error state (RC semantics). */
static void fv_refuse(struct fv_cm_id *cid, const struct fv_hdr *h, enum ibv_wc_status status)
{
    fv_answer(cid, h->type == FV_READ ? FV_READ_RESP : FV_ACK, status, NULL, 0);
    fv_qp_error(cid->qp);
}

/* 0: done, 1: wait for a posted receive (RNR) and try again later. */
static int fv_request(struct fv_cm_id *cid, const struct fv_hdr *h, const uint8_t *data)
{
    struct fv_qp *qp = cid->qp;
    int needs_recv = h->type == FV_SEND || (h->type == FV_WRITE && h->has_imm);
    int access = h->type == FV_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    struct ibv_mr *mr = NULL;

    if (needs_recv && qp->rq_count == 0) {
        uint64_t now = fv_now_ms();
        if (qp->rnr_deadline_ms == 0)
            qp->rnr_deadline_ms = cid->peer_rnr_retry >= 7
                                      ? UINT64_MAX
                                      : now + FV_RNR_STEP_MS * (1 + (uint64_t)cid->peer_rnr_retry);
        if (now < qp->rnr_deadline_ms)
            return 1;
        qp->rnr_deadline_ms = 0;
        fv_answer(cid, FV_ACK, IBV_WC_RNR_RETRY_EXC_ERR, NULL, 0);
        return 0; /* the requester's queue pair goes to error; ours stays */
    }
    qp->rnr_deadline_ms = 0;
    if (++qp->reqs == qp->access_error || (h->type == FV_READ && ++qp->reads == qp->read_error) ||
        (h->type == FV_WRITE && !h->has_imm && ++qp->writes == qp->write_error)) {
        fv_refuse(cid, h, IBV_WC_REM_ACCESS_ERR);
        return 0;
    }
    if (h->type != FV_SEND &&
        (mr = fv_mr_check(qp->ibv.pd, h->rkey, 1, h->raddr, h->type == FV_READ ? h->rlen : h->len,
                          access)) == NULL) {
        fv_refuse(cid, h, IBV_WC_REM_ACCESS_ERR);
        return 0;
    }
    if (h->type == FV_READ) {
        fv_answer(cid, FV_READ_RESP, IBV_WC_SUCCESS, fv_mr_ptr(mr, h->raddr), h->rlen);
        return 0;
    }
    if (h->type == FV_WRITE && h->len > 0)
        memcpy(fv_mr_ptr(mr, h->raddr), data, h->len);
    if (needs_recv && fv_take_recv(cid, h, data) != 0)
        return 0;
    fv_answer(cid, FV_ACK, IBV_WC_SUCCESS, NULL, 0);
    return 0;
}

/* ---- responses (we are the requester) --------------------------------------------------- */

static void fv_response(struct fv_cm_id *cid, const struct fv_hdr *h, const uint8_t *data)
{
    struct fv_qp *qp = cid->qp;
    enum ibv_wc_status status = (enum ibv_wc_status)h->status;
    struct fv_send_wr *w;

    if (qp->sq_count == 0 || qp->ibv.state == IBV_QPS_ERR)
        return;
    w = &qp->sq[qp->sq_head];
    if (status == IBV_WC_SUCCESS && w->opcode == IBV_WC_RDMA_READ)
        status = fv_scatter(qp, w->sge, w->num_sge, data, h->len);
    if (status != IBV_WC_SUCCESS || w->signaled)
        fv_complete(qp->ibv.send_cq, qp, w->wr_id, w->opcode, status, w->len);
    qp->sq_head = (qp->sq_head + 1) % qp->sq_cap;
    qp->sq_count--;
    if (status != IBV_WC_SUCCESS)
        fv_qp_error(qp);
}

/* ---- connection management packets ------------------------------------------------------ */

static void fv_cm_packet(struct fv_cm_id *cid, const struct fv_hdr *h, const uint8_t *data)
{
    if (cid->state == FV_L_REQ_WAIT && h->type == FV_CONN_REQ) {
        cid->pdata_len = (uint8_t)(h->len < FV_PDATA_MAX ? h->len : FV_PDATA_MAX);
        memcpy(cid->pdata, data, cid->pdata_len);
        cid->peer_rnr_retry = h->status;
        cid->id.route.addr.dst_sin.sin_family = AF_INET;
        cid->id.route.addr.dst_sin.sin_addr.s_addr = (uint32_t)h->raddr;
        cid->id.route.addr.dst_sin.sin_port = (uint16_t)h->rkey;
        cid->state = FV_L_REQ_PENDING;
        fv_post_event(cid, RDMA_CM_EVENT_CONNECT_REQUEST, 0, cid->pdata, cid->pdata_len);
    } else if (cid->state == FV_L_CONNECTING && h->type == FV_CONN_ACC) {
        cid->state = FV_L_UP;
        cid->peer_rnr_retry = h->status;
        if (cid->qp != NULL)
            cid->qp->ibv.state = IBV_QPS_RTS;
        fv_post_event(cid, RDMA_CM_EVENT_ESTABLISHED, 0, data, h->len);
    } else if (cid->state == FV_L_CONNECTING && h->type == FV_CONN_REJ) {
        cid->state = FV_L_DOWN;
        fv_post_event(cid, RDMA_CM_EVENT_REJECTED, 28, data, h->len);
    } else {
        fprintf(stderr, "fakeverbs: unexpected packet type %u in link state %d\n", h->type,
                cid->state);
        fv_link_down(cid);
    }
}

/* Handle every complete packet in the input buffer (stops at an RNR wait). */
static void fv_process_input(struct fv_cm_id *cid)
{
    struct fv_buf *b = &cid->in;

    while (cid->state != FV_L_DOWN && b->len - b->off >= sizeof(struct fv_hdr)) {
        struct fv_hdr h;
        memcpy(&h, b->data + b->off, sizeof(h));
        if (b->len - b->off < sizeof(h) + h.len)
            return;
        const uint8_t *data = b->data + b->off + sizeof(h);
        if (cid->state != FV_L_UP) {
            fv_cm_packet(cid, &h, data);
        } else if (cid->qp != NULL) {
            if (cid->qp->delay_us > 0)
                usleep(cid->qp->delay_us);
            if (h.type == FV_ACK || h.type == FV_READ_RESP)
                fv_response(cid, &h, data);
            else if (cid->qp->ibv.state != IBV_QPS_ERR && fv_request(cid, &h, data) != 0)
                return;
        }
        b->off += sizeof(h) + h.len;
    }
}

/* ---- posting sends ---------------------------------------------------------------------- */

static enum fv_pkt_type fv_pkt_of(enum ibv_wr_opcode op, enum ibv_wc_opcode *wc_op)
{
    switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        *wc_op = IBV_WC_SEND;
        return FV_SEND;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        *wc_op = IBV_WC_RDMA_WRITE;
        return FV_WRITE;
    case IBV_WR_RDMA_READ:
        *wc_op = IBV_WC_RDMA_READ;
        return FV_READ;
    default:
        return 0;
    }
}

/* Gather a SEND/WRITE's data into the link's output after its header. */
static enum ibv_wc_status fv_gather(struct fv_qp *qp, const struct ibv_send_wr *wr,
                                    struct fv_hdr *h)
{
    struct fv_buf *out = &qp->cm->out;
    size_t at = out->len;

    if (fv_buf_reserve(out, sizeof(*h) + h->len) != 0)
        return IBV_WC_LOC_LEN_ERR;
    at = out->len;
    out->len += sizeof(*h);
    for (int i = 0; h->type != FV_READ && i < wr->num_sge; i++) {
        const struct ibv_sge *s = &wr->sg_list[i];
        const void *from = (const void *)(uintptr_t)s->addr; /* inline: the caller's memory */
        struct ibv_mr *mr = NULL;
        if (!(wr->send_flags & IBV_SEND_INLINE) &&
            (mr = fv_mr_check(qp->ibv.pd, s->lkey, 0, s->addr, s->length, 0)) == NULL) {
            out->len = at;
            return IBV_WC_LOC_PROT_ERR;
        }
        if (mr != NULL)
            from = fv_mr_ptr(mr, s->addr);
        memcpy(out->data + out->len, from, s->length);
        out->len += s->length;
    }
    memcpy(out->data + at, h, sizeof(*h));
    return IBV_WC_SUCCESS;
}

/* One work request of a post (fv_lock held): 0 or an errno for *bad. */
static int fv_post_one(struct fv_qp *qp, struct ibv_send_wr *wr)
{
    struct fv_hdr h = {.has_imm = wr->opcode == IBV_WR_SEND_WITH_IMM ||
                                  wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM,
                       .imm = wr->imm_data};
    enum ibv_wc_opcode wc_op = IBV_WC_SEND;
    struct fv_send_wr *w;
    enum ibv_wc_status st;

    if (++qp->posts == qp->fail_post || qp->sq_count == qp->sq_cap || wr->num_sge > 4)
        return ENOMEM;
    if ((h.type = (uint8_t)fv_pkt_of(wr->opcode, &wc_op)) == 0)
        return EINVAL;
    if (qp->ibv.state == IBV_QPS_ERR || qp->cm == NULL) {
        fv_complete(qp->ibv.send_cq, qp, wr->wr_id, wc_op, IBV_WC_WR_FLUSH_ERR, 0);
        return 0;
    }
    if (qp->ibv.state != IBV_QPS_RTS)
        return EINVAL;
    for (int i = 0; i < wr->num_sge; i++)
        h.len += wr->sg_list[i].length;
    if (h.type == FV_READ) {
        h.rlen = h.len;
        h.len = 0;
    }
    if (h.type != FV_SEND) {
        h.raddr = wr->wr.rdma.remote_addr;
        h.rkey = wr->wr.rdma.rkey;
    }
    w = &qp->sq[(qp->sq_head + qp->sq_count) % qp->sq_cap];
    *w = (struct fv_send_wr){.wr_id = wr->wr_id,
                             .opcode = wc_op,
                             .len = h.len + h.rlen,
                             .num_sge = wr->num_sge,
                             .signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)};
    if (wr->num_sge > 0) /* a zero-length SEND (credit update) may have no list */
        memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
    if ((st = fv_gather(qp, wr, &h)) != IBV_WC_SUCCESS) {
        fv_complete(qp->ibv.send_cq, qp, wr->wr_id, wc_op, st, 0);
        fv_qp_error(qp);
        return 0;
    }
    qp->sq_count++;
    if (++qp->sent == qp->drop_after)
        fv_link_down(qp->cm); /* fault injection: the link is cut */
    return 0;
}

FV_EXPORT int fv_post_send(struct ibv_qp *ibv, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct fv_qp *qp = (struct fv_qp *)ibv;
    uint64_t t0 = fv_thread_ns();
    int rc = 0;

    fv_lock();
    for (; wr != NULL && rc == 0; wr = wr->next)
        if ((rc = fv_post_one(qp, wr)) != 0)
            *bad = wr;
    if (qp->cm != NULL)
        fv_flush(qp->cm);
    fv_unlock();
    fv_kick();
    fv_thread_ns_add(t0);
    return rc;
}

/* ---- the service thread ----------------------------------------------------------------- */

static void fv_accept_one(struct fv_cm_id *l)
{
    struct fv_cm_id *cid;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0)
        return;
    if ((cid = calloc(1, sizeof(*cid))) == NULL) {
        close(fd);
        return;
    }
    cid->id = (struct rdma_cm_id){.verbs = l->id.verbs,
                                  .channel = l->id.channel,
                                  .context = l->id.context,
                                  .ps = l->id.ps,
                                  .port_num = 1,
                                  .qp_type = IBV_QPT_RC,
                                  .route = l->id.route};
    cid->listen_id = l;
    cid->fd = fd;
    cid->state = FV_L_REQ_WAIT;
    fv_id_add(cid);
}

static void fv_readable(struct fv_cm_id *cid)
{
    if (cid->state == FV_L_LISTEN) {
        fv_accept_one(cid);
        return;
    }
    int gone = 0;

    while (!gone) {
        if (fv_buf_reserve(&cid->in, 65536) != 0)
            return;
        ssize_t n =
            recv(cid->fd, cid->in.data + cid->in.len, cid->in.cap - cid->in.len, MSG_DONTWAIT);
        if (n > 0)
            cid->in.len += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            gone = 1;
        else
            break;
    }
    /* What arrived before the end is delivered first, as on a fabric. */
    fv_process_input(cid);
    if (gone)
        fv_link_down(cid);
}

static int fv_wants_input(const struct fv_cm_id *cid)
{
    if (cid->state == FV_L_UP)
        return cid->qp == NULL || cid->qp->rnr_deadline_ms == 0;
    return cid->state == FV_L_LISTEN || cid->state == FV_L_REQ_WAIT ||
           cid->state == FV_L_CONNECTING;
}

/* Build the poll set (lock held); returns the count and the timeout for RNR waits. */
static int fv_poll_set(struct pollfd *pfd, struct fv_cm_id **who, uint64_t *serial, int *timeout)
{
    uint64_t now = fv_now_ms();
    int n = 1;

    pfd[0] = (struct pollfd){.fd = fv_wake[0], .events = POLLIN};
    *timeout = 1000;
    for (struct fv_cm_id *c = fv_ids; c != NULL && n < FV_MAX_POLL; c = c->next) {
        if (c->state == FV_L_UP && c->qp != NULL && c->qp->rnr_deadline_ms != 0) {
            fv_process_input(c); /* a receive may have been posted since */
            uint64_t d = c->qp->rnr_deadline_ms;
            if (d != 0)
                *timeout =
                    d <= now ? 0 : (d - now < (uint64_t)*timeout ? (int)(d - now) : *timeout);
        }
        if (c->fd < 0 || c->state == FV_L_DOWN || c->state == FV_L_IDLE)
            continue;
        short ev =
            (short)((fv_wants_input(c) ? POLLIN : 0) | (c->out.off < c->out.len ? POLLOUT : 0));
        who[n] = c;
        serial[n] = c->serial;
        pfd[n++] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    return n;
}

static void *fv_service(void *arg)
{
    static struct pollfd pfd[FV_MAX_POLL];
    static struct fv_cm_id *who[FV_MAX_POLL];
    static uint64_t serial[FV_MAX_POLL];
    char drain[256];

    for (;;) {
        int timeout, n;
        fv_lock();
        n = fv_poll_set(pfd, who, serial, &timeout);
        fv_unlock();
        if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR)
            continue;
        fv_lock();
        while (read(fv_wake[0], drain, sizeof(drain)) > 0)
            ;
        for (int i = 1; i < n; i++) {
            struct fv_cm_id *c = fv_id_find(who[i], serial[i]);
            if (c == NULL || pfd[i].revents == 0 || c->fd != pfd[i].fd)
                continue;
            if (pfd[i].revents & POLLOUT)
                fv_flush(c);
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                fv_readable(c);
        }
        fv_unlock();
    }
    return NULL;
}

static void fv_init(void)
{
    const char *dir = getenv("FAKEVERBS_DIR");
    struct stat st;
    pthread_t tid;

    if (dir == NULL || dir[0] == '\0' || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        strlen(dir) > sizeof(fv_dirname) - 24)
        return;
    snprintf(fv_dirname, sizeof(fv_dirname), "%s", dir);
    if (pipe2(fv_wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return;
    fv_ctx.device = &fv_device;
    fv_ctx.ops = fv_ops;
    fv_ctx.cmd_fd = -1;
    fv_ctx.async_fd = -1;
    fv_ctx.num_comp_vectors = 1;
    pthread_mutex_init(&fv_ctx.mutex, NULL);
    if (pthread_create(&tid, NULL, fv_service, NULL) != 0)
        return;
    pthread_detach(tid);
    fv_have_ctx = 1;
}

FV_EXPORT struct ibv_context *fv_context(void)
{
    pthread_once(&fv_once, fv_init);
    return fv_have_ctx ? &fv_ctx : NULL;
}
