/* The call API of the client (client.h includes it): a driver call on the wire (struct
 * cli_call, its arguments by name), the ways to send it, and the session under it. */
#ifndef RGPU_CLIENT_CALL_H
#define RGPU_CLIENT_CALL_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/ops.h"

struct cli_session;

/* One driver call on the wire (proto/ops.def says what each op's arguments and data mean). */
#define CLI_CALL_MAX_ARGS PROTO_CALL_MAX_ARGS
struct cli_call {
    unsigned op;
    unsigned nargs;
    union proto_args a;    /* Call.args by name: a.MEMCPY_HTOD.dst (proto/ops.def) */
    uint64_t ctx;          /* Call.ctx; cli_call_* fill it from the current context if 0 */
    const void *data;      /* input bytes: inline up to PROTO_INLINE_MAX, else frame bulk */
    size_t data_len;
    /* Reply (synchronous calls): out[] values and data, copied into the caller's buffers. */
    uint64_t *out;         /* may be NULL */
    unsigned out_cap;
    unsigned nout;
    void *rdata;           /* reply data/bulk goes straight here (may be NULL) */
    size_t rdata_cap;
    size_t rdata_len;
    /* Called with the session's lock held just before the call is queued or written, only if
     * it is (data lanes start their job here: it is then on the wire before any later call). */
    void (*on_send)(void *arg);
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

/* The call goes to context ctx (its id in Call.ctx, to its server); NULL: none. */
struct cli_ctx;
void cli_call_in(struct cli_call *call, const struct cli_ctx *ctx);
/* Send and wait for the reply; returns the call's CUresult, or a pending asynchronous error,
 * or CUDA_ERROR_DEVICE_UNAVAILABLE when the server is gone. */
CUresult cli_call_sync(struct cli_call *call);
/* RGPU_STATS=1 (client/call_stats.c): calls on the wire per operation, printed at exit.
 * cli_stats_now_us is 0 when the statistics are off. */
double cli_stats_now_us(void);
void cli_stats_count(unsigned op, bool sync, double since_us);
void cli_stats_note_compute_cache(bool hit); /* NVRTC compile cache lookups (RGPU_STATS) */
/* A synchronous call in the current context with at most one output value (out may be NULL;
 * CUDA_ERROR_UNKNOWN when the reply lacks it). */
CUresult cli_call_simple(struct cli_call *call, uint64_t *out);
/* The same for calls about a device that need no current context (cuMemCreate...). */
CUresult cli_call_device(struct cli_call *call, uint64_t *out);
/* Send without waiting (PROTO_FLAG_NOREPLY); failures come back at the next synchronous call. */
CUresult cli_call_async(struct cli_call *call);
/* Send a call whose reply data (len bytes) is written to dst when it arrives, later, while the
 * session waits for some other reply. Used by DtoH copies into pinned memory. */
CUresult cli_call_deferred(struct cli_call *call, void *dst, size_t len);

/* What the session (the wire layer: handshake, call stream) tells the layers above it, through
 * functions they register (it never calls up into them). Every slot is filled: the defaults do
 * nothing. Registered from constructors, before any session opens. */
struct cli_session_hooks {
    /* The Welcome of a TCP session offered data lanes (addr, secret); want: lanes configured. */
    void (*lanes_offered)(const char *addr, const void *secret, size_t secret_len, int want);
    /* A synchronous call's reply came (session lock held since it was sent; res: its outcome
     * so far): what was sent before it is done on the server, so finish the client's part;
     * returns res, or the first error of that. */
    CUresult (*after_reply)(CUresult res);
};
void cli_session_set_hooks(const struct cli_session_hooks *hooks);

/* Ensure the session exists (connect + handshake on first use). CUDA_SUCCESS or the error that
 * every call returns while there is no session. */
CUresult cli_ensure_init(void);
bool cli_initialized(void);
int cli_device_count(void);
const struct cli_device *cli_device(int ordinal); /* NULL if out of range */

/* Wait until the server (sess; NULL: the first) has executed every call sent so far (deferred replies read), with a NOP
 * in context ctx (the caller's current one: cli_ctx_current_id()); a
 * pending asynchronous error stays for the next synchronous call. */
CUresult cli_session_fence(struct cli_session *sess, uint64_t ctx);
/* Several servers (client/session.c): the session of a device (NULL if out of range), its
 * ordinal on its server, and whether it is the first session (sess NULL counts as the first). */
struct cli_session *cli_device_session(int dev);
int cli_device_remote(int dev);
bool cli_session_is_first(const struct cli_session *sess);
int cli_session_count(void);
struct cli_session *cli_session_at(int i);            /* NULL past the last */
int cli_session_index(const struct cli_session *sess); /* NULL counts as the first (0) */
const char *cli_session_server(const struct cli_session *sess); /* its host:port */
/* The session's connection when it runs on RDMA (for registering memory with it), else NULL.
 * It stays valid for the life of the process. */
struct transport_conn;
struct transport_conn *cli_session_rdma_conn(void);
/* Log an unsupported entry point once by name; returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult cli_unsupported(const char *name);
/* The same for a probe, whose refusal the caller handles: said at info level. */
CUresult cli_unsupported_probe(const char *name);

#endif
