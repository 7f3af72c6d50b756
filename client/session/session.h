/* The session's private state and the functions its files share (session.c: opening and
 * state: one session per server listed, or the one server a pool's placement picks;
 * handshake.c: the handshake and the transport choice; call_stream.c: the ordered call stream
 * and its batching; synced.c: the post-reply hooks; fork_exit.c: fork and exit). The
 * configuration (config.c) and the pool (pool.c) have public headers, shared with the rgpu
 * tool. Nothing outside these files includes it: the layers above use call.h. */
#ifndef RGPU_CLIENT_SESSION_H
#define RGPU_CLIENT_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/session/call.h"
#include "client/session/config.h"
#include "common/log.h"
#include "common/status.h"
#include "proto/arena.h"
#include "proto/frame.h"
#include "transport/transport.h"

#define RECV_BUF_SIZE (256u << 10) /* replies are read into cli_session.recv_buf */

/* A DtoH reply still to come, written to dst when it does. */
struct deferred {
    uint64_t id;
    void *dst;
    size_t len;
};

/* A session with one gpu-server (one per server the configuration names); its lock
 * serializes its call stream. */
#define CLI_MAX_SESSIONS 8
struct cli_session {
    pthread_mutex_t lock;
    int index; /* in cli_proc.sessions: 0 is the first server (data lanes, RDMA copies) */
    struct transport_conn *conn;
    struct transport_conn *tcp_ctl; /* the TCP connection kept once frames moved to RDMA */
    char transport[8];              /* what the Hello asks for: tcp | rdma | auto */
    bool dead;
    bool said_bye; /* the exit-time goodbye went: no more calls */
    char server[256];
    uint64_t next_call_id;
    CUresult async_error;      /* first failure of an asynchronous call not yet reported */
    struct deferred *deferred; /* FIFO of DtoH replies still to come */
    size_t ndeferred, deferred_cap;
    size_t deferred_bytes; /* data those replies still carry */
    pid_t pid;             /* the process that opened the session (a forked child may not use it) */
    bool forked;           /* set in a forked child: cheaper than a getpid() per call */
    uint8_t *recv_buf;
    struct proto_arena arena; /* replies are unpacked here, reset after each */
    bool trace_calls;
    uint8_t *batch; /* coalesced asynchronous frames not yet written */
    size_t batch_len;
    pthread_cond_t batch_cond;  /* signalled when the batch becomes non-empty */
    struct cli_device *devices; /* the server's, in its ordinals (its Welcome) */
    int ndevices;
    uint32_t proto_minor;   /* the minor the session speaks: the older of ours and the server's */
    int session_timeout_ms; /* a reply waited for this long without a frame: the session is
                             * gone (0: not armed; handshake.c session_deadline) */
    int retry_ms; /* the handshake failed for load (server full, busy, closed before a word):
                   * worth another try after about this long (0: not worth one) */
    bool op_refused[PROTO_OP_COUNT]; /* ops refused as unknown to the server (said once each) */
    /* NCCL ranks of several contexts in this session (call_stream.c, "Waits"): the first
     * context an NCCL communicator was made in, and whether another one has been since. */
    uint64_t nccl_ctx;
    bool poll_waits;
};

/* The process: its sessions, opened together on first use, and the devices it presents
 * (every server's, in the order of the configuration, less those CUDA_VISIBLE_DEVICES hides). */
struct cli_process {
    pthread_mutex_t lock;
    bool tried;
    CUresult init_result;
    struct cli_session *sessions[CLI_MAX_SESSIONS];
    int nsessions;
    struct cli_device *devices;
    int ndevices;
    int want_gpus;                         /* `gpus = N` (0: all the sessions' devices) */
    const struct cli_session_hooks *hooks; /* of the layers above (never NULL) */
};
extern struct cli_process cli_proc;

/* What to ask the server for (transport = auto | rdma | tcp). */
CUresult cli_transport_choose(struct cli_session *s, const char *want);
/* Hello -> Welcome on the connected session (bounded by a receive timeout: a server that
 * accepts and never answers), then the move to RDMA if offered. On failure why says what
 * happened (the pool names every server it tried in one error), and s->retry_ms whether the
 * failure was one of load that a later try may not meet. */
CUresult cli_handshake(struct cli_session *s, const struct cli_conf *conf,
                       const struct transport_opts *opts, char *why, size_t why_len);

/* The call stream (call_stream.c): start the batch flusher; write the coalesced frames (lock
 * held); the connection is gone (said once; every call then fails). */
CUresult cli_batch_start(struct cli_session *s);
CUresult cli_batch_flush(struct cli_session *s);
CUresult cli_session_lost(struct cli_session *s, const char *what, rg_status_t status);

/* synced.c: run the post-reply hooks (call.h) for a call that was sent and waited for, if its
 * op synchronizes (lock not held; lost: the session was lost waiting); returns res or the first
 * error of a hook. */
CUresult cli_session_synced(struct cli_session *s, const struct cli_call *call, CUresult res,
                            bool lost);

/* fork_exit.c: a forked child's view of the session (pthread_atfork child handler). */
void cli_session_atfork_child(void);

#endif
