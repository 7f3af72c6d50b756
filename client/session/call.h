/* The session layer's API (the wire: session.c, call_stream.c, handshake.c...) for the layers
 * above it: a driver call on the wire (struct cli_call, its arguments by name), the ways to send
 * one whose context is filled in, the devices and sessions, and the hooks through which the
 * session tells the layers above what they must know (it never calls up into them). Sending a
 * call in the current context is the objects layer's (objects.h: cli_call_sync...). */
#ifndef RGPU_CLIENT_CALL_H
#define RGPU_CLIENT_CALL_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/ops.h"

struct cli_session;

/* A device of a server, as its Welcome described it. */
struct cli_device {
    int ordinal;
    char name[256];
    CUuuid uuid;
    size_t total_mem;
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    char pci_bus_id[32];
    int pci_domain, pci_bus, pci_device;
    struct cli_session *sess; /* the session of its server */
    int remote;               /* its ordinal on that server (what the wire carries) */
};

/* One driver call on the wire (proto/ops.def says what each op's arguments and data mean). */
#define CLI_CALL_MAX_ARGS PROTO_CALL_MAX_ARGS
struct cli_call {
    unsigned op;
    unsigned nargs;
    union proto_args a; /* Call.args by name: a.MEMCPY_HTOD.dst (proto/ops.def) */
    uint64_t ctx;       /* Call.ctx; cli_call_* fill it from the current context if 0 */
    const void *data;   /* input bytes: inline up to PROTO_INLINE_MAX, else frame bulk */
    size_t data_len;
    /* Reply (synchronous calls): out[] values and data, copied into the caller's buffers. */
    uint64_t *out; /* may be NULL */
    unsigned out_cap;
    unsigned nout;
    void *rdata; /* reply data/bulk goes straight here (may be NULL) */
    size_t rdata_cap;
    size_t rdata_len;
    /* Called with the session's lock held just before the call is queued or written, only if
     * it is, its wire id already in `id` (data lanes start their job here: it is then on the
     * wire before any later call). */
    void (*on_send)(void *arg);
    uint64_t id; /* its wire id once sent: ids of one session grow in the order calls go out */
    void *on_send_arg;
    /* The session (server) that gets it: its context's (cli_call_* fill it from the current
     * context, cli_call_in from a given one, cli_device_session for device calls); NULL: the
     * first. */
    struct cli_session *sess;
};

/* The session (session.c), the wire layer under the call API: the same three ways of sending,
 * for a call whose ctx is filled in (0: none). */
CUresult cli_session_call(struct cli_call *call);
CUresult cli_session_send(struct cli_call *call);
CUresult cli_session_call_deferred(struct cli_call *call, void *dst, size_t len);

/* A call's op and its arguments by name, in a designated initializer:
 *     struct cli_call call = {CLI_ARGS(MEMCPY_DTOD, .dst = d, .src = s, .size = n, ...)};
 * A name the op does not have does not compile; the op_table test (tools/gen_ops.py --check)
 * fails when a required one is neither given here nor assigned (call.a.OP.name = v) later. */
#define CLI_ARGS(OP, ...) .op = PROTO_OP_##OP, .nargs = PROTO_NARGS_##OP, .a.OP = {__VA_ARGS__}
/* The same where the op is chosen at run time among ops that share OP's arguments (one
 * handler serves them all, so their argument lists agree: ops.def checks it). */
#define CLI_ARGS_AS(op_expr, OP, ...)                                                              \
    .op = (op_expr), .nargs = PROTO_NARGS_##OP, .a.OP = {__VA_ARGS__}

/* RGPU_STATS=1 (client/session/call_stats.c): calls on the wire per operation, printed at exit.
 * cli_stats_now_us is 0 when the statistics are off. */
double cli_stats_now_us(void);
void cli_stats_count(unsigned op, bool sync, double since_us);
void cli_stats_note_compute_cache(bool hit); /* NVRTC compile cache lookups (RGPU_STATS) */
/* What the session (the wire layer: handshake, call stream) tells the layers above it, through
 * functions they register (it never calls up into them). Every slot is filled: the defaults do
 * nothing. Registered from constructors, before any session opens. */
struct cli_session_hooks {
    /* The Welcome of a TCP session offered data lanes (addr, secret); want: lanes configured. */
    void (*lanes_offered)(const char *addr, const void *secret, size_t secret_len, int want);
};
void cli_session_set_hooks(const struct cli_session_hooks *hooks);

/* After the reply of a synchronizing op (flagged `synchronizing` in proto/ops.def: when it
 * succeeds, the GPU work sent before it is done), whoever sent it and on every session, the
 * layers above finish their part: the data lanes settle the copies sent before it, the host
 * mirrors are read back. Hooks run in the calling thread once the session's lock is released,
 * in increasing `order`, each given the outcome so far (the call's result, a pending
 * asynchronous error, or CUDA_ERROR_DEVICE_UNAVAILABLE) and returning it or its own first
 * error. Registered from constructors, before any session opens (at most CLI_SYNCED_HOOKS). */
struct cli_synced {
    struct cli_session *sess;    /* the session that replied (never NULL) */
    const struct cli_call *call; /* the synchronizing call: its op, its wire id */
    bool lost;                   /* the session was lost waiting for the reply */
};
typedef CUresult (*cli_synced_fn)(const struct cli_synced *sync, CUresult res);
#define CLI_SYNCED_HOOKS 4
void cli_session_on_synced(unsigned order, cli_synced_fn fn);

/* Ensure the session exists (connect + handshake on first use). CUDA_SUCCESS or the error that
 * every call returns while there is no session. */
CUresult cli_ensure_init(void);
bool cli_initialized(void);
int cli_device_count(void);
const struct cli_device *cli_device(int ordinal); /* NULL if out of range */

/* Wait until the server (sess; NULL: the first) has executed every call sent so far (deferred
 * replies read), with a NOP in context ctx (the caller's current one: cli_ctx_current_id()); a
 * pending asynchronous error stays for the next synchronous call. */
CUresult cli_session_fence(struct cli_session *sess, uint64_t ctx);
/* Several servers (client/session/session.c): the session of a device (NULL if out of range), its
 * ordinal on its server, and whether it is the first session (sess NULL counts as the first). */
struct cli_session *cli_device_session(int dev);
int cli_device_remote(int dev);
bool cli_session_is_first(const struct cli_session *sess);
int cli_session_count(void);
struct cli_session *cli_session_at(int i);                      /* NULL past the last */
int cli_session_index(const struct cli_session *sess);          /* NULL counts as the first (0) */
const char *cli_session_server(const struct cli_session *sess); /* its host:port */
/* The session's connection when it runs on RDMA (for registering memory with it), else NULL.
 * It stays valid for the life of the process. */
struct transport_conn;
struct transport_conn *cli_session_rdma_conn(void);
#endif
