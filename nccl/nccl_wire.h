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
    NCCL_WIRE_COLL_COUNT
};

enum nccl_wire_end { NCCL_WIRE_FINALIZE = 0, NCCL_WIRE_DESTROY = 1, NCCL_WIRE_ABORT = 2 };

/* NCCL's own bootstrap handle (a magic and a socket address) fills the first bytes of the 128;
 * the worker that made the id writes its MAC into the last NCCL_WIRE_MAC_LEN, which NCCL leaves
 * zero, and every worker checks and clears it before NCCL sees the id. */
#define NCCL_WIRE_MAC_OFFSET 96
#define NCCL_WIRE_MAC_LEN 32

/* ncclConfig_t members on the wire, in this order (NCCL_CONFIG_UNDEF_INT when unset). */
#define NCCL_WIRE_CONFIG_WORDS 5

#endif
