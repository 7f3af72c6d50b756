/* tests/fakeverbs: a userspace stand-in for libibverbs.so.1 and librdmacm.so.1 (test double,
 * never installed), shared by the two fake libraries.
 *
 * Every process that loads the fake runs one "fake NIC" service thread. A connected queue pair
 * is a unix stream socket between two such threads; connection management meets in a
 * rendezvous directory ($FAKEVERBS_DIR) of unix sockets named "ip:port". The target's thread
 * executes SEND (into the oldest posted receive, RNR error after rnr_retry_count retries when
 * there is none), RDMA WRITE (with or without immediate) and RDMA READ against its own
 * registered regions, checking the rkey, the protection domain, the bounds and the access flags,
 * and answers with an ACK or a NAK that becomes the requester's completion, as on hardware.
 * Service threads never block on a socket: each link has an output queue written when the
 * socket can take it.
 *
 * With FAKEVERBS_DIR unset the fake reports no device, like a host without RDMA hardware.
 *
 * Fault injection, read when a queue pair is created and counted per queue pair:
 *   FAKEVERBS_FAIL_POST=N            the Nth ibv_post_send returns ENOMEM
 *   FAKEVERBS_DROP_AFTER=N           the link is cut after N packets were sent (peer "dies")
 *   FAKEVERBS_DELAY_US=N             every incoming packet is processed N us late
 *   FAKEVERBS_REMOTE_ACCESS_ERROR=N  the Nth request received is refused with a remote access
 *                                    error (requester: IBV_WC_REM_ACCESS_ERR; both QPs to error)
 *   FAKEVERBS_READ_ACCESS_ERROR=N    the same for the Nth RDMA READ request received (a bulk
 *                                    read of this process's registered memory)
 *   FAKEVERBS_WRITE_ACCESS_ERROR=N   the same for the Nth RDMA WRITE without immediate
 *   FAKEVERBS_LOSE_RECV=N            from the Nth ibv_post_recv on, receives are accepted but
 *                                    lost, so a sender soon finds no posted buffer (RNR)
 * and, read at each call, FAKEVERBS_NO_DMABUF=1: ibv_reg_dmabuf_mr fails with EOPNOTSUPP (a
 * provider or kernel without dmabuf support). Otherwise it maps the dmabuf fd (any fd that mmap
 * takes: tests/fakecuda's memfds) and its region's addresses are the iova it was given.
 */
#ifndef RGPU_FAKEVERBS_H
#define RGPU_FAKEVERBS_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>

#define FV_EXPORT      __attribute__((visibility("default")))
#define FV_PDATA_MAX   196
#define FV_RNR_STEP_MS 20 /* one RNR retry; rnr_retry_count 7 means retry forever */

enum fv_pkt_type {
    FV_CONN_REQ = 1, /* payload: private data; status: rnr_retry_count */
    FV_CONN_ACC,     /* payload: private data */
    FV_CONN_REJ,     /* payload: private data */
    FV_SEND,
    FV_WRITE,
    FV_READ,      /* len: bytes wanted */
    FV_ACK,       /* status: ibv_wc_status of the oldest outstanding request */
    FV_READ_RESP, /* status, then len bytes of data */
};

struct fv_hdr {
    uint8_t type, status, has_imm, pad;
    uint32_t imm; /* network order, as in ibv_send_wr */
    uint64_t raddr;
    uint32_t rkey, len;  /* len: payload bytes that follow this header */
    uint32_t rlen, pad2; /* READ: bytes wanted */
};

struct fv_buf { /* a growable byte queue */
    uint8_t *data;
    size_t off, len, cap;
};

struct fv_recv_wr {
    uint64_t wr_id;
    struct ibv_sge sge[4];
    int num_sge;
};

struct fv_send_wr { /* an outstanding request, waiting for its ACK / READ_RESP */
    uint64_t wr_id;
    enum ibv_wc_opcode opcode;
    int signaled;
    uint32_t len;
    struct ibv_sge sge[4]; /* READ: where the data lands */
    int num_sge;
};

enum fv_link_state {
    FV_L_IDLE,        /* created, not yet listening or connecting */
    FV_L_LISTEN,      /* a listening cm id */
    FV_L_REQ_WAIT,    /* accepted socket, waiting for CONN_REQ */
    FV_L_REQ_PENDING, /* CONNECT_REQUEST delivered, waiting for rdma_accept/reject */
    FV_L_CONNECTING,  /* connector, waiting for CONN_ACC/REJ */
    FV_L_UP,          /* queue pair traffic */
    FV_L_DOWN,        /* peer gone or cut; nothing more is read or written */
};

struct fv_qp;

struct fv_cm_id {
    struct rdma_cm_id id;
    struct fv_cm_id *next;      /* every id of the process */
    struct fv_cm_id *listen_id; /* for a request: the listener it came through */
    uint64_t serial;            /* tells a reused address from the same id */
    int fd;                     /* the link's socket, -1 when none */
    enum fv_link_state state;
    struct fv_buf in, out;
    struct fv_qp *qp;
    int peer_rnr_retry;          /* how long a SEND from the peer may wait for a receive */
    uint8_t pdata[FV_PDATA_MAX]; /* CONN_REQ private data until the event is built */
    uint8_t pdata_len;
};

struct fv_qp {
    struct ibv_qp ibv;
    struct fv_cm_id *cm;
    int sq_sig_all;
    struct fv_recv_wr *rq; /* posted receives, FIFO ring */
    unsigned rq_cap, rq_head, rq_count;
    struct fv_send_wr *sq; /* outstanding requests, FIFO ring */
    unsigned sq_cap, sq_head, sq_count;
    uint64_t rnr_deadline_ms; /* a SEND waits for a receive until then; 0: not waiting */
    /* fault injection */
    unsigned long posts, fail_post, sent, drop_after, reqs, access_error, recvs, lose_recv;
    unsigned long reads, read_error, writes, write_error;
    unsigned delay_us;
};

struct fv_cq {
    struct ibv_cq ibv;
    struct ibv_wc *ring;
    unsigned cap, head, count;
    int armed;
};

struct fv_comp_channel {
    struct ibv_comp_channel ibv;
    int wfd;
};

struct fv_event_channel {
    struct rdma_event_channel ch;
    int wfd;
};

struct fv_event {
    struct rdma_cm_event ev;
    uint8_t pdata[FV_PDATA_MAX];
};

/* Everything below runs under fv_lock (one process-wide lock; this is a test double). */
FV_EXPORT void fv_lock(void);
FV_EXPORT void fv_unlock(void);
/* The process's one fake device context; NULL when FAKEVERBS_DIR is unset. */
FV_EXPORT struct ibv_context *fv_context(void);
FV_EXPORT const char *fv_dir(void);
/* Register/forget a cm id with the service thread (it polls ids that have an fd). */
FV_EXPORT void fv_id_add(struct fv_cm_id *cid);
FV_EXPORT void fv_id_remove(struct fv_cm_id *cid);
/* Wake the service thread (new fd, new output). */
FV_EXPORT void fv_kick(void);
/* Queue a packet on an id's link. */
FV_EXPORT int fv_queue_pkt(struct fv_cm_id *cid, const struct fv_hdr *h, const void *payload);
/* Deliver a cm event to the id's channel. */
FV_EXPORT void fv_post_event(struct fv_cm_id *cid, enum rdma_cm_event_type type, int status,
                             const void *pdata, size_t pdata_len);
/* Move a queue pair to the error state, flushing its work requests. */
FV_EXPORT void fv_qp_error(struct fv_qp *qp);
/* The link is gone: queue pair to error and DISCONNECTED to the owner (once). */
FV_EXPORT void fv_link_down(struct fv_cm_id *cid);
FV_EXPORT uint64_t fv_now_ms(void);
/* Queue the output of an id and write what the socket takes now. */
FV_EXPORT void fv_flush(struct fv_cm_id *cid);
/* CPU time this thread spent inside the fake's data-path entry points (post_send, post_recv,
 * poll_cq, req_notify_cq, get_cq_event), in ns: lets a measurement tell the provider's share
 * from the caller's (tests/transport/rdma_cost.c finds it with dlsym). */
FV_EXPORT uint64_t fv_thread_ns_spent(void);
FV_EXPORT uint64_t fv_thread_ns(void);
FV_EXPORT void fv_thread_ns_add(uint64_t start);
/* From verbs.c. */
FV_EXPORT extern struct ibv_device fv_device;
FV_EXPORT extern struct ibv_context_ops fv_ops;
FV_EXPORT struct ibv_mr *fv_mr_check(struct ibv_pd *pd, uint32_t key, int remote, uint64_t addr,
                                     uint64_t len, int access);
/* Where a checked address of a region is in this process (a dmabuf region's iova differs). */
FV_EXPORT void *fv_mr_ptr(struct ibv_mr *mr, uint64_t addr);
FV_EXPORT void fv_cq_push(struct ibv_cq *cq, const struct ibv_wc *wc);
FV_EXPORT void fv_complete(struct ibv_cq *cq, struct fv_qp *qp, uint64_t wr_id,
                           enum ibv_wc_opcode opcode, enum ibv_wc_status status, uint32_t len);

#endif
