/* NCCL on the worker, shared by its parts (server/nccl.h is the rest of the server's view):
 *   nccl_lib.c          the GPU host's NCCL: loading it, its entry points, what it offers
 *   nccl_id.c           unique ids bound to the tenant (the MAC in their last 32 bytes)
 *   nccl_state.c        the session's communicators: records, creation (on a thread of its own
 *                       when asked), quota charges, teardown
 *   nccl_watchdog.c     the watchdog thread: async errors, nccl_timeout, dead peers (liveness
 *                       files), a client gone
 *   handlers_nccl.c     communicator operations (version, ids, init, split, shrink, end, ...)
 *   handlers_nccl_coll.c  collectives, point-to-point and groups
 *   handlers_nccl_mem.c   NCCL memory, buffer registration, windows, PreMulSum ops
 * docs/nccl.md says what they do for the application. */
#ifndef RGPU_SERVER_NCCL_INTERNAL_H
#define RGPU_SERVER_NCCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sha256.h"
#include "nccl/nccl_abi.h"
#include "nccl/nccl_wire.h"
#include "server/nccl.h"
#include "server/tenancy.h"

/* ---- the library (nccl_lib.c) ----------------------------------------------------------- */

struct nccl_lib {
    nccl_get_version_fn GetVersion;
    nccl_get_unique_id_fn GetUniqueId;
    nccl_init_rank_config_fn CommInitRankConfig;
    nccl_split_fn CommSplit;
    nccl_comm_fn CommFinalize, CommDestroy, CommAbort;
    nccl_async_error_fn CommGetAsyncError;
    nccl_comm_int_fn CommCount, CommUserRank;
    nccl_all_reduce_fn AllReduce;
    nccl_broadcast_fn Broadcast;
    nccl_reduce_fn Reduce;
    nccl_all_gather_fn AllGather;
    nccl_reduce_scatter_fn ReduceScatter;
    nccl_send_fn Send;
    nccl_recv_fn Recv;
    nccl_group_fn GroupStart, GroupEnd;
    nccl_mem_alloc_fn MemAlloc;
    nccl_mem_free_fn MemFree;
    nccl_register_fn CommRegister;
    nccl_deregister_fn CommDeregister;
    nccl_premulsum_fn RedOpCreatePreMulSum;
    nccl_redop_destroy_fn RedOpDestroy;
    /* Optional (NULL when the host's NCCL is older): features says which are there. */
    nccl_alltoall_fn AlltoAll;
    nccl_rooted_fn Gather, Scatter;
    nccl_simulate_fn GroupSimulateEnd;
    nccl_win_register_fn CommWindowRegister;
    nccl_win_deregister_fn CommWindowDeregister;
    nccl_shrink_fn CommShrink;
    nccl_revoke_fn CommRevoke;
    nccl_init_scalable_fn CommInitRankScalable;
    nccl_team_fn TeamLsa, TeamRail;
    int (*TeamRankToLsa)(ncclComm_t comm, ncclTeam_t team, int rank);
    int version;
    uint64_t features; /* NCCL_FEAT_* */
};
extern struct nccl_lib nccl_lib;
extern char nccl_lib_path[256];
extern unsigned nccl_timeout_ms;
extern bool nccl_connect_pairs; /* nccl_connect_pairs (handlers_nccl_coll.c, "Pairs") */
/* Load the host's NCCL once per worker (logged); false when it cannot be used. The session's
 * devices decide how it connects (nccl_lib.c: several devices -> eagerly at creation). */
bool nccl_lib_ready(struct srv_session *s);

/* ---- unique ids (nccl_id.c) -------------------------------------------------------------- */

void nccl_id_configure(const struct srv_config *cfg);
/* Write the MAC binding id (its first NCCL_WIRE_MAC_OFFSET bytes) to the session's tenant. */
void nccl_id_mac(const struct srv_session *s, const uint8_t *id, uint8_t mac[RG_SHA256_LEN]);
/* Check and clear the MAC of id; false when it was not made for this tenant and secret. */
bool nccl_id_check(const struct srv_session *s, ncclUniqueId *id);

/* ---- the session's communicators (nccl_state.c) ----------------------------------------- */

/* A registration (ncclCommRegister) or window (ncclCommWindowRegister) of a communicator: the
 * handle NCCL gave, checked when it comes back, and the device memory it took (charged). */
struct nccl_reg {
    void *handle;
    uint64_t charged;
    bool window;
};

struct nccl_make; /* a creation running on its own thread (nccl_state.c) */

struct nccl_rec {
    uint64_t id;
    ncclComm_t comm;      /* NULL once aborted, or while `make` runs */
    CUcontext ctx;        /* the context it was created in */
    CUevent done;         /* recorded after its latest collective (NULL: could not create) */
    CUstream done_stream; /* where `done` was last recorded */
    uint64_t charged;     /* bytes of the quota it holds (creation and later growth) */
    ncclResult_t error;   /* sticky: a collective's failure, or why it was aborted */
    uint64_t in_call_ms;  /* a collective call has been running since (0: none) */
    uint64_t recorded_ms; /* when `done` was last recorded (0: nothing pending) */
    CUstream grouped;     /* a stream it has work on inside the open group (launched at its end) */
    bool in_group;
    bool group_made; /* created inside the open group: measured and charged at its end */
    bool used;       /* an operation named it, or its pairs were connected (nccl_comm_of) */
    struct nccl_make *make;
    int nranks, rank;
    uint32_t splits;              /* splits and shrinks made from it (they name the children) */
    uint8_t ident[RG_SHA256_LEN]; /* the communicator across its ranks (liveness files) */
    int live_fd;                  /* this rank's liveness file, flock held (-1: none) */
    uint64_t peer_gone_ms;        /* a peer's worker was seen gone at (0: none) */
    bool stale;                   /* collectives issued on done_stream after `done` was recorded */
    uint64_t seen[NCCL_WIRE_COLL_COUNT]; /* (kind, log2 bytes or peer) already measured */
    struct nccl_reg *regs;
    size_t nregs, reg_cap;
};

struct nccl_mem {
    void *ptr;
    size_t size;
};

struct srv_nccl {
    pthread_mutex_t lock; /* recs against the watchdog */
    struct nccl_rec *recs;
    size_t nrecs, rec_cap;
    struct nccl_mem *mems;
    size_t nmems, mem_cap;
    struct srv_session *s;
    uint64_t group_end_ms; /* an ncclGroupEnd has been running since (0: none) */
    int group_depth;       /* ncclGroupStart calls not yet ended */
    bool group_grows;      /* an op of the open group may make NCCL allocate (measured at end) */
    pthread_t watchdog;
    bool watching, stop;
    atomic_bool stale; /* some record is stale (srv_nccl_before_wait has work) */
};

/* The session's NCCL state: the private state of its component (never NULL once the session
 * is set up). */
struct srv_nccl *nccl_state(struct srv_session *s);
/* The record of comm id (under n->lock), or NULL. */
struct nccl_rec *nccl_rec_find(struct srv_nccl *n, uint64_t id);
/* Abort r's communicator (under n->lock): NCCL frees it and its kernels stop waiting. */
void nccl_rec_abort(struct srv_nccl *n, struct nccl_rec *r, ncclResult_t why);
/* Abort r's and every other rank of its communicator this session holds (under n->lock): a rank
 * aborted alone leaves the others waiting for it until nccl_timeout. */
void nccl_rec_abort_clique(struct srv_nccl *n, struct nccl_rec *r, ncclResult_t why);
/* A new record for comm id (its creation charged `charged` bytes; comm may be NULL while a
 * creation thread runs); starts the watchdog. NULL (and the charge given back) without memory. */
struct nccl_rec *nccl_rec_add(struct srv_session *s, uint64_t id, ncclComm_t comm,
                              uint64_t charged);
/* Forget r (under n->lock): its event, registrations, liveness file and charge. */
void nccl_rec_drop(struct srv_nccl *n, struct nccl_rec *r, bool graceful);
/* The live communicator of id, else NULL with out[0] its sticky error (ncclInvalidArgument for
 * none). A creation still running is waited for first. */
ncclComm_t nccl_comm_of(struct srv_session *s, struct srv_call *call, uint64_t id);
/* Charge `took` bytes more to r (under n->lock); over the quota r is aborted with
 * ncclUnhandledCudaError (logged with what). */
void nccl_rec_grow(struct srv_session *s, struct nccl_rec *r, uint64_t took, const char *what);
/* The device's free memory in context ctx (the current context is kept). */
size_t nccl_free_in(struct srv_session *s, CUcontext ctx);

/* How a communicator is made (NCCL_COMM_INIT, _INIT_SCALABLE, _SPLIT, _SHRINK). */
struct nccl_make_args {
    enum { NCCL_MAKE_INIT, NCCL_MAKE_SPLIT, NCCL_MAKE_SHRINK } how;
    int nranks, rank, nids;
    ncclUniqueId *ids; /* init: nids ids, MACs checked and cleared */
    ncclComm_t parent; /* split, shrink */
    int color, key, flags;
    int *exclude, nexclude; /* shrink */
    ncclConfig_t config, *configp;
    uint8_t ident[RG_SHA256_LEN];
};
/* Make communicator id: now (answer its result in out[0]; out[1..2] nranks and rank for a
 * split or shrink), or on a thread of its own when async (answer ncclInProgress at once;
 * NCCL_ASYNC_ERROR finishes it). Inside an open group NCCL defers the work to the group's end:
 * made now, charged then. */
CUresult nccl_make(struct srv_session *s, struct srv_call *call, uint64_t id,
                   struct nccl_make_args *a, bool async);
/* For NCCL_ASYNC_ERROR: when r's creation is done, adopt it (under n->lock, released around the
 * join); true when it still runs. */
bool nccl_make_poll(struct srv_session *s, struct nccl_rec *r);
/* After record id adopted its communicator (lock not held, no group open): connect the pairs
 * of that communicator if the session now holds all of it, none of it used yet (handlers_nccl_
 * coll.c, "Pairs"). */
void nccl_pairs_adopted(struct srv_session *s, uint64_t id);

/* Liveness files: rank r of the communicator ident on this host holds an flock on
 * <dir>/<ident>.<r> while its worker lives (nccl_watchdog.c). */
int nccl_live_open(const uint8_t ident[RG_SHA256_LEN], int rank);
void nccl_live_close(int fd, const uint8_t ident[RG_SHA256_LEN], int rank, bool graceful);

/* ---- the watchdog (nccl_watchdog.c) ------------------------------------------------------ */

void *nccl_watchdog_main(void *arg);
/* Whether st is capturing a graph. */
bool nccl_capturing(struct srv_session *s, CUstream st);
/* After r's latest work on st, for the watchdog (under n->lock). */
void nccl_rec_mark(struct srv_session *s, struct nccl_rec *r, CUstream st);

uint64_t nccl_now_ms(void);

#endif
