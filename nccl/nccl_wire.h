/* What the NCCL shim (nccl/) and the worker (server/handlers_nccl.c) agree on beyond
 * proto/ops.def: the kinds of NCCL_COLL, the ends of NCCL_COMM_END, where the tenant's MAC sits in
 * a unique id, and the order of the config words. */
#ifndef RGPU_NCCL_WIRE_H
#define RGPU_NCCL_WIRE_H

enum nccl_wire_coll {
    NCCL_WIRE_ALL_REDUCE = 0,
    NCCL_WIRE_BROADCAST = 1,
    NCCL_WIRE_REDUCE = 2,
    NCCL_WIRE_ALL_GATHER = 3,
    NCCL_WIRE_REDUCE_SCATTER = 4,
    NCCL_WIRE_SEND = 5,
    NCCL_WIRE_RECV = 6,
    NCCL_WIRE_ALLTOALL = 7, /* NCCL 2.28's, sent as NCCL_COLL_EXT (protocol 1.3) */
    NCCL_WIRE_GATHER = 8,
    NCCL_WIRE_SCATTER = 9,
    NCCL_WIRE_COLL_COUNT
};
#define NCCL_WIRE_COLL_V1_COUNT 7 /* the kinds NCCL_COLL takes; the rest go as NCCL_COLL_EXT */

/* NCCL_GET_VERSION's out[2]: the entry points the worker's NCCL has beyond those every NCCL
 * rgpu runs has (an older NCCL lacks them; the shim then answers as that NCCL would not offer
 * them: ncclInvalidUsage, said once). 0 from a worker older than protocol 1.3. */
enum nccl_wire_feature {
    NCCL_FEAT_ALLTOALL = 1u << 0,
    NCCL_FEAT_GATHER = 1u << 1,
    NCCL_FEAT_SCATTER = 1u << 2,
    NCCL_FEAT_SIMULATE = 1u << 3,  /* ncclGroupSimulateEnd */
    NCCL_FEAT_WINDOW = 1u << 4,    /* ncclCommWindowRegister / Deregister */
    NCCL_FEAT_SHRINK = 1u << 5,    /* ncclCommShrink */
    NCCL_FEAT_REVOKE = 1u << 6,    /* ncclCommRevoke */
    NCCL_FEAT_SCALABLE = 1u << 7,  /* ncclCommInitRankScalable */
    NCCL_FEAT_TEAMS = 1u << 8,     /* ncclTeamLsa / ncclTeamRail / ncclTeamRankToLsa */
    NCCL_FEAT_ASYNC_INIT = 1u << 9 /* NCCL_COMM_INIT/SPLIT/SHRINK take `async` (this worker) */
};

/* NCCL_COMM_QUERY's `what`. */
enum nccl_wire_query {
    NCCL_WIRE_TEAM_LSA = 0,   /* out: nRanks rank stride of ncclTeamLsa */
    NCCL_WIRE_TEAM_RAIL = 1,  /* ncclTeamRail */
    NCCL_WIRE_RANK_TO_LSA = 2 /* a = team nRanks, b = team rank, c = team stride, d = rank */
};

enum nccl_wire_end { NCCL_WIRE_FINALIZE = 0, NCCL_WIRE_DESTROY = 1, NCCL_WIRE_ABORT = 2 };

/* NCCL's own bootstrap handle (a magic and a socket address) fills the first bytes of the 128;
 * the worker that made the id writes its MAC into the last NCCL_WIRE_MAC_LEN, which NCCL leaves
 * zero, and every worker checks and clears it before NCCL sees the id. */
#define NCCL_WIRE_MAC_OFFSET 96
#define NCCL_WIRE_MAC_LEN    32

/* Unique ids and excluded ranks travel inline in Call.data: at most this many bytes
 * (PROTO_INLINE_MAX), so at most 32 ids and 1024 ranks. */
#define NCCL_WIRE_DATA_MAX 4096

/* ncclConfig_t members on the wire, in this order (NCCL_CONFIG_UNDEF_INT when unset). */
#define NCCL_WIRE_CONFIG_WORDS 5

#endif
