/* Fake libibverbs.so.1: device, protection domains, memory regions, completion queues and
 * channels, queue pairs and the data-path ops that verbs.h's inline functions call through
 * ibv_context.ops. The wire side lives in nic.c. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakeverbs.h"

struct fv_mr {
    struct ibv_mr ibv;
    struct fv_mr *next;
    int access;
    uint8_t *host; /* where ibv.addr's bytes are in this process (the iova's translation) */
    void *map;     /* a dmabuf region's own mapping of the fd, else NULL */
    size_t map_len;
};

static struct fv_mr *fv_mrs; /* under fv_lock */
static __thread uint64_t fv_spent_ns;

FV_EXPORT uint64_t fv_thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

FV_EXPORT void fv_thread_ns_add(uint64_t start)
{
    fv_spent_ns += fv_thread_ns() - start;
}
FV_EXPORT uint64_t fv_thread_ns_spent(void)
{
    return fv_spent_ns;
}
static uint32_t fv_next_key;

/* ---- device and context ----------------------------------------------------------------- */

FV_EXPORT struct ibv_device fv_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "fakeverbs0",
    .dev_name = "uverbs0",
};

FV_EXPORT struct ibv_device **(ibv_get_device_list)(int *num_devices)
{
    struct ibv_device **list = calloc(2, sizeof(*list));
    int n = fv_context() != NULL ? 1 : 0;

    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (n == 1)
        list[0] = &fv_device;
    if (num_devices != NULL)
        *num_devices = n;
    return list;
}

FV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

FV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

FV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct ibv_context *ctx = fv_context();

    if (ctx == NULL)
        errno = ENODEV;
    return ctx;
}

FV_EXPORT int ibv_close_device(struct ibv_context *context)
{
    return 0;
}

/* The fake moves no memory by DMA: fork needs nothing. */
FV_EXPORT int ibv_fork_init(void)
{
    return 0;
}

FV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const names[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
    };

    if ((unsigned)status < sizeof(names) / sizeof(names[0]) && names[status] != NULL)
        return names[status];
    return "unknown";
}

FV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));

    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->context = context;
    return pd;
}

FV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

/* ---- memory regions --------------------------------------------------------------------- */

/* A new region (its keys, on the process's list); host is where its bytes are. */
static struct ibv_mr *fv_mr_add(struct fv_mr *mr, struct ibv_pd *pd, uint64_t iova, size_t length,
                                unsigned int access, uint8_t *host)
{
    fv_lock();
    if (fv_next_key == 0)
        fv_next_key = ((uint32_t)getpid() * 2654435761u) | 1u;
    mr->ibv.lkey = fv_next_key;
    mr->ibv.rkey = fv_next_key ^ 0x5a5a0000u;
    fv_next_key += 2;
    mr->ibv.context = pd->context;
    mr->ibv.pd = pd;
    mr->ibv.addr = (void *)(uintptr_t)iova;
    mr->ibv.length = length;
    mr->access = (int)access;
    mr->host = host;
    mr->next = fv_mrs;
    fv_mrs = mr;
    fv_unlock();
    return &mr->ibv;
}

/* As on hardware: remote write or atomic access needs local write. */
static int fv_access_ok(unsigned int access)
{
    return !((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
             !(access & IBV_ACCESS_LOCAL_WRITE));
}

FV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                          uint64_t iova, unsigned int access)
{
    struct fv_mr *mr;

    if (pd == NULL || addr == NULL || length == 0 || iova != (uintptr_t)addr ||
        !fv_access_ok(access)) {
        errno = EINVAL;
        return NULL;
    }
    if ((mr = calloc(1, sizeof(*mr))) == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    return fv_mr_add(mr, pd, iova, length, access, addr);
}

FV_EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

/* The dmabuf's pages are whatever the fd maps (tests/fakecuda hands out a memfd aliasing a fake
 * device allocation): mapped shared here, so the NIC thread reads and writes the same memory.
 * FAKEVERBS_NO_DMABUF=1: a provider or kernel without dmabuf support (EOPNOTSUPP). */
FV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                           uint64_t iova, int fd, int access)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t skip = offset % (uint64_t)page;
    struct fv_mr *mr;
    struct stat st;
    void *map;

    if (getenv("FAKEVERBS_NO_DMABUF") != NULL && atoi(getenv("FAKEVERBS_NO_DMABUF")) != 0) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (pd == NULL || length == 0 || iova + length < iova || !fv_access_ok((unsigned)access) ||
        fstat(fd, &st) != 0 || offset > (uint64_t)st.st_size ||
        length > (uint64_t)st.st_size - offset) {
        errno = errno == EBADF ? EBADF : EINVAL;
        return NULL;
    }
    map = mmap(NULL, skip + length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(offset - skip));
    if (map == MAP_FAILED)
        return NULL;
    if ((mr = calloc(1, sizeof(*mr))) == NULL) {
        munmap(map, skip + length);
        errno = ENOMEM;
        return NULL;
    }
    mr->map = map;
    mr->map_len = skip + length;
    return fv_mr_add(mr, pd, iova, length, (unsigned)access, (uint8_t *)map + skip);
}

FV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibv)
{
    fv_lock();
    for (struct fv_mr **p = &fv_mrs; *p != NULL; p = &(*p)->next)
        if (&(*p)->ibv == ibv) {
            struct fv_mr *mr = *p;
            *p = mr->next;
            if (mr->map != NULL)
                munmap(mr->map, mr->map_len);
            free(mr);
            break;
        }
    fv_unlock();
    return 0;
}

/* Caller holds fv_lock. The region behind a key if [addr, addr+len) lies inside it, it belongs
 * to pd and allows access; NULL otherwise. remote: key is an rkey, else an lkey. */
FV_EXPORT struct ibv_mr *fv_mr_check(struct ibv_pd *pd, uint32_t key, int remote, uint64_t addr,
                                     uint64_t len, int access)
{
    for (struct fv_mr *mr = fv_mrs; mr != NULL; mr = mr->next) {
        uint64_t base = (uintptr_t)mr->ibv.addr;
        if ((remote ? mr->ibv.rkey : mr->ibv.lkey) != key)
            continue;
        if (mr->ibv.pd != pd || (mr->access & access) != access || addr < base ||
            len > mr->ibv.length || addr - base > mr->ibv.length - len)
            return NULL;
        return &mr->ibv;
    }
    return NULL;
}

/* Caller holds fv_lock. Where addr (inside mr, as fv_mr_check found it) is in this process. */
FV_EXPORT void *fv_mr_ptr(struct ibv_mr *ibv, uint64_t addr)
{
    struct fv_mr *mr = (struct fv_mr *)ibv;

    return mr->host + (addr - (uintptr_t)mr->ibv.addr);
}

/* ---- completion channels and queues ----------------------------------------------------- */

FV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct fv_comp_channel *ch = calloc(1, sizeof(*ch));
    int fds[2];

    if (ch == NULL || pipe2(fds, O_CLOEXEC) != 0) {
        free(ch);
        return NULL;
    }
    ch->ibv.context = context;
    ch->ibv.fd = fds[0];
    ch->wfd = fds[1];
    return &ch->ibv;
}

FV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct fv_comp_channel *ch = (struct fv_comp_channel *)channel;

    close(ch->ibv.fd);
    close(ch->wfd);
    free(ch);
    return 0;
}

FV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                               void **cq_context)
{
    uint64_t t0 = fv_thread_ns();
    struct ibv_cq *got;
    ssize_t n = read(channel->fd, &got, sizeof(got));

    fv_thread_ns_add(t0);
    if (n != (ssize_t)sizeof(got))
        return -1;
    *cq = got;
    *cq_context = got->cq_context;
    return 0;
}

FV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {}

/* Caller holds fv_lock. */
FV_EXPORT void fv_cq_push(struct ibv_cq *ibv, const struct ibv_wc *wc)
{
    struct fv_cq *cq = (struct fv_cq *)ibv;

    if (cq->count == cq->cap) {
        fprintf(stderr, "fakeverbs: completion queue overrun (%u entries)\n", cq->cap);
        abort(); /* hardware would raise IBV_EVENT_CQ_ERR; a transport bug either way */
    }
    cq->ring[(cq->head + cq->count++) % cq->cap] = *wc;
    if (cq->armed && ibv->channel != NULL) {
        struct fv_comp_channel *ch = (struct fv_comp_channel *)ibv->channel;
        cq->armed = 0;
        if (write(ch->wfd, &ibv, sizeof(ibv)) != (ssize_t)sizeof(ibv))
            fprintf(stderr, "fakeverbs: completion event lost\n");
    }
}

static int fv_poll_cq(struct ibv_cq *ibv, int num_entries, struct ibv_wc *wc)
{
    struct fv_cq *cq = (struct fv_cq *)ibv;
    uint64_t t0 = fv_thread_ns();
    int n = 0;

    fv_lock();
    for (; n < num_entries && cq->count > 0; n++, cq->count--) {
        wc[n] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
    }
    fv_unlock();
    fv_thread_ns_add(t0);
    return n;
}

static int fv_req_notify_cq(struct ibv_cq *ibv, int solicited_only)
{
    uint64_t t0 = fv_thread_ns();

    fv_lock();
    ((struct fv_cq *)ibv)->armed = 1;
    fv_unlock();
    fv_thread_ns_add(t0);
    return 0;
}

FV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                       struct ibv_comp_channel *channel, int comp_vector)
{
    struct fv_cq *cq = calloc(1, sizeof(*cq));

    if (cq == NULL || cqe <= 0 || (cq->ring = calloc((size_t)cqe, sizeof(*cq->ring))) == NULL) {
        free(cq);
        errno = cqe <= 0 ? EINVAL : ENOMEM;
        return NULL;
    }
    cq->cap = (unsigned)cqe;
    cq->ibv.context = context;
    cq->ibv.channel = channel;
    cq->ibv.cq_context = cq_context;
    cq->ibv.cqe = cqe;
    return &cq->ibv;
}

FV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibv)
{
    struct fv_cq *cq = (struct fv_cq *)ibv;

    free(cq->ring);
    free(cq);
    return 0;
}

/* ---- queue pairs ------------------------------------------------------------------------ */

static unsigned long fv_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strtoul(v, NULL, 10) : 0;
}

FV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    static uint32_t next_qpn = 0x100;
    struct fv_qp *qp;

    if (attr->qp_type != IBV_QPT_RC || attr->send_cq == NULL || attr->recv_cq == NULL ||
        attr->cap.max_send_wr == 0 || attr->cap.max_recv_wr == 0) {
        errno = EINVAL;
        return NULL;
    }
    if ((qp = calloc(1, sizeof(*qp))) == NULL ||
        (qp->rq = calloc(attr->cap.max_recv_wr, sizeof(*qp->rq))) == NULL ||
        (qp->sq = calloc(attr->cap.max_send_wr, sizeof(*qp->sq))) == NULL) {
        if (qp != NULL)
            free(qp->rq);
        free(qp);
        errno = ENOMEM;
        return NULL;
    }
    qp->rq_cap = attr->cap.max_recv_wr;
    qp->sq_cap = attr->cap.max_send_wr;
    qp->sq_sig_all = attr->sq_sig_all;
    qp->ibv.context = pd->context;
    qp->ibv.qp_context = attr->qp_context;
    qp->ibv.pd = pd;
    qp->ibv.send_cq = attr->send_cq;
    qp->ibv.recv_cq = attr->recv_cq;
    qp->ibv.qp_type = IBV_QPT_RC;
    qp->ibv.state = IBV_QPS_INIT;
    qp->fail_post = fv_env("FAKEVERBS_FAIL_POST");
    qp->drop_after = fv_env("FAKEVERBS_DROP_AFTER");
    qp->delay_us = (unsigned)fv_env("FAKEVERBS_DELAY_US");
    qp->access_error = fv_env("FAKEVERBS_REMOTE_ACCESS_ERROR");
    qp->read_error = fv_env("FAKEVERBS_READ_ACCESS_ERROR");
    qp->write_error = fv_env("FAKEVERBS_WRITE_ACCESS_ERROR");
    qp->lose_recv = fv_env("FAKEVERBS_LOSE_RECV");
    fv_lock();
    qp->ibv.qp_num = next_qpn++;
    fv_unlock();
    return &qp->ibv;
}

FV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibv)
{
    struct fv_qp *qp = (struct fv_qp *)ibv;

    fv_lock();
    if (qp->cm != NULL)
        qp->cm->qp = NULL;
    fv_unlock();
    free(qp->rq);
    free(qp->sq);
    free(qp);
    return 0;
}

/* Caller holds fv_lock. A completion for a work request that did not execute. */
FV_EXPORT void fv_complete(struct ibv_cq *cq, struct fv_qp *qp, uint64_t wr_id,
                           enum ibv_wc_opcode opcode, enum ibv_wc_status status, uint32_t len)
{
    struct ibv_wc wc = {.wr_id = wr_id,
                        .status = status,
                        .opcode = opcode,
                        .byte_len = len,
                        .qp_num = qp->ibv.qp_num};
    fv_cq_push(cq, &wc);
}

static int fv_post_recv(struct ibv_qp *ibv, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct fv_qp *qp = (struct fv_qp *)ibv;
    uint64_t t0 = fv_thread_ns();
    int rc = 0;

    fv_lock();
    for (; wr != NULL; wr = wr->next) {
        if (wr->num_sge > 4 || qp->rq_count == qp->rq_cap) {
            rc = ENOMEM;
            *bad = wr;
            break;
        }
        if (qp->ibv.state == IBV_QPS_ERR) {
            fv_complete(ibv->recv_cq, qp, wr->wr_id, IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR, 0);
            continue;
        }
        if (qp->lose_recv != 0 && ++qp->recvs >= qp->lose_recv)
            continue; /* fault injection: from the Nth on, buffers never reach the queue */
        struct fv_recv_wr *r = &qp->rq[(qp->rq_head + qp->rq_count++) % qp->rq_cap];
        r->wr_id = wr->wr_id;
        r->num_sge = wr->num_sge;
        memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
    }
    fv_unlock();
    fv_kick(); /* a SEND may be waiting for this buffer */
    fv_thread_ns_add(t0);
    return rc;
}

FV_EXPORT int fv_post_send(struct ibv_qp *ibv, struct ibv_send_wr *wr, struct ibv_send_wr **bad);

FV_EXPORT struct ibv_context_ops fv_ops = {
    .poll_cq = fv_poll_cq,
    .req_notify_cq = fv_req_notify_cq,
    .post_send = fv_post_send,
    .post_recv = fv_post_recv,
};
