/* One client session inside a worker process: the driver, the connection, and every object
 * the client created, by the id the client minted (proto/ops.h). */
#ifndef RGPU_SERVER_SESSION_H
#define RGPU_SERVER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/arena.h"
#include "proto/frame.h"
#include "proto/ops.h"
#include "server/component.h"
#include "server/driver.h"
#include "server/op_dispatch.h"
#include "server/quota.h"
#include "transport/rdma.h"

struct srv_handle {
    uint64_t id;      /* 0 = free slot */
    void *real;       /* CUcontext, CUmodule, CUstream, ... */
    uint32_t nparams; /* functions/kernels: cached parameter layout (0xffffffff = unknown) */
    uint32_t *layout; /* off0, size0, off1, size1, ... */
    bool borrowed;    /* owned by another object (a library's module, the driver's default
                       * pool): never destroyed alone */
    uint64_t size;    /* bytes charged to the quota (VMM memory, module globals, graph memory
                       * nodes, shadows: their length) */
};

#define SRV_MAX_DEVICES 16

/* What every component shares; each feature's own state is its component's (server/component.h,
 * server/components.def). */
struct srv_session {
    /* The driver and the devices the session sees (client ordinal -> driver ordinal) */
    struct srv_driver drv;
    int ndevices;
    CUdevice devices[SRV_MAX_DEVICES];
    CUcontext primary[SRV_MAX_DEVICES]; /* retained on first use, released by the contexts */
    uint64_t current_ctx;
    /* The connection and who is on it */
    struct transport_conn *conn;
    uint64_t id;
    char peer[128];
    char tenant[64];      /* "" when the server has no tenants */
    uint32_t proto_minor; /* the minor the session speaks (proto_version_accept) */
    /* The handle table: every object by the client's id */
    struct srv_handle *handles;
    size_t handle_cap, nhandles;
    /* The quota (server/quota.h) */
    uint64_t mem_quota; /* bytes of device memory this session may hold; 0 = no limit */
    uint64_t mem_used;  /* bytes it holds now: written only by server/quota.c */
    /* Session scratch (srv_scratch): launch parameters, reply bytes; valid until the next call */
    void *scratch;
    size_t scratch_len;
    struct srv_components comps;
    /* The call loop and handshake (server/worker.c), which every component's calls go through:
     * the handshake succeeded (the teardown logs what it freed), an op unknown to the
     * session's protocol was logged, the receive buffer and the arena unpacked calls live in
     * until the next one, why a call broke the session (srv_call.why, kept), */
    bool served;
    bool refused_logged;
    uint8_t *msg_buf;
    struct proto_arena arena;
    char end_reason[160];
    /* the TCP connection kept once frames flow over RDMA (it shows a dead peer), */
    struct transport_conn *tcp_ctl;
};

/* The private state of component id (server/component.h); each component's file wraps it in
 * a typed accessor. NULL for a component without state. */
static inline void *srv_component_state(const struct srv_session *s, enum srv_component_id id)
{
    return s->comps.state[id];
}

/* Per-session bounds on what a session makes the worker hold beyond its allocations
 * (server/session_limits.c; docs/tenants.md lists them all). */
#define SRV_MAX_CONTEXTS 64 /* contexts one session may create */
/* Contexts the session created (CTX_CREATE) and has not destroyed (server/handlers_ctx.c). */
unsigned srv_ctx_created(struct srv_session *s);
#define SRV_LAUNCH_PARAMS_MAX (1u << 20) /* a launch's parameter bytes (CUDA takes 32,764) */
/* cuCtxSetLimit with the device memory the limit makes the driver reserve charged to the
 * quota (the malloc heap, the printf FIFO, the stack of every resident thread); the charge
 * replaces the context's previous one for that limit. */
CUresult srv_ctx_set_limit(struct srv_session *s, CUlimit limit, uint64_t value);
/* The context (wire id) is destroyed: its limits' charges go back. */
void srv_ctx_limits_forget(struct srv_session *s, uint64_t ctx);

/* Pinned host memory of the client mirrored at the same address (handlers_host_mirror.c). */
#define SRV_MAX_HOST_MIRRORS 256               /* mirrors one session may hold */
#define SRV_HOST_MIRROR_MAX  ((size_t)1 << 30) /* their bytes together (and the quota) */

/* Session scratch memory of at least len bytes, 16-byte aligned (valid until the next call);
 * growing it keeps its contents. */
void *srv_scratch(struct srv_session *s, size_t len);

/* The call being executed and its reply. */
struct srv_call {
    const Rgpu__Call *msg;
    /* msg->args, at least the op's fixed argument count of words (optional ones absent from
     * the message read as 0): read them by name with SRV_ARGS. */
    const uint64_t *args;
    const struct proto_frame_hdr *hdr;
    bool noreply;
    uint64_t out[8];
    size_t nout;
    uint64_t *out_ext; /* when more than 8 outputs (parameter layouts); freed by the worker */
    const void *rdata; /* inline reply data */
    size_t rdata_len;
    bool replied;     /* the handler sent the reply itself (streamed DtoH) */
    bool bulk_taken;  /* the handler consumed the frame's bulk */
    CUresult ctx_res; /* making the call's context current; only lane copies run without it */
    char why[160];    /* reason for a protocol-level refusal (ends the session) */
};

/* Handle table. */
struct srv_handle *srv_handle_get(struct srv_session *s, uint64_t id, unsigned type);
rg_status_t srv_handle_put(struct srv_session *s, uint64_t id, void *real);
void srv_handle_del(struct srv_session *s, uint64_t id);
/* The real object of handle id of that type, NULL if there is none. */
void *srv_handle_real(struct srv_session *s, uint64_t id, unsigned type);
/* A function or a kernel id's handle (the driver takes a CUkernel wherever a CUfunction is
 * taken), NULL if it is neither or unknown. */
struct srv_handle *srv_func_handle(struct srv_session *s, uint64_t id);
/* Bind a new id of that type to real (CUDA_ERROR_INVALID_HANDLE: wrong type, or bound). */
CUresult srv_bind_new(struct srv_session *s, uint64_t id, unsigned type, void *real);
/* Drop the handle id of that type and destroy its object with the matching driver call
 * (CUDA_ERROR_INVALID_HANDLE if there is none). */
CUresult srv_handle_destroy(struct srv_session *s, uint64_t id, unsigned type);
/* At the session's end, from a component's teardown: destroy every object of that type the
 * session holds and does not borrow (the handles stay until the table goes). */
void srv_handles_destroy_all(struct srv_session *s, unsigned type);
/* After a driver call that made real for the client's id returned res: bind it (CUDA_SUCCESS),
 * or, when the id is not of that type or already bound, destroy it with the matching driver call
 * (CUDA_ERROR_INVALID_HANDLE); a failed res is returned as it is. */
CUresult srv_handle_adopt(struct srv_session *s, uint64_t id, unsigned type, CUresult res,
                          void *real);

/* Kernel parameters: the function or kernel func_id (its real handle in *f_p) and the packed
 * buffer pbuf of plen bytes (copied into session scratch) as a kernelParams array. */
CUresult srv_param_pointers(struct srv_session *s, uint64_t func_id, const void *pbuf, size_t plen,
                            void **f_p, void ***params_p);

/* Drop the node handles of a graph that is being destroyed (handlers_graph_nodes.c). */
void srv_graph_nodes_forget(struct srv_session *s, uint64_t graph);
/* The wire id of a driver node of graph id `graph`, minting a server id (PROTO_ID_SERVER) for
 * a node the client never named, e.g. a captured one; 0 when out of memory. */
uint64_t srv_graph_node_id(struct srv_session *s, CUgraphNode node, uint64_t graph);
/* Node ids (8 bytes each, n of them) -> driver nodes (handlers_graph_nodes.c). */
CUresult srv_graph_nodes_of(struct srv_session *s, const uint8_t *ids, size_t n, CUgraphNode *out);
/* Conditional nodes (handlers_graph_cond.c): GRAPH_COND_HANDLE_CREATE; a CONDITIONAL node of
 * GRAPH_ADD_NODE (type args p, body ids in the payload); and, for a graph being destroyed, drop
 * its node handles and its bodies' ids, recursively (the driver frees the bodies). */
CUresult srv_op_graph_cond_handle_create(struct srv_session *s, struct srv_call *call);
CUresult srv_graph_add_conditional(struct srv_session *s, const uint64_t *p, uint64_t graph,
                                   CUgraph g, CUgraphNode *deps, size_t ndeps,
                                   const uint8_t *payload, size_t plen, CUgraphNode *node);
void srv_graph_forget(struct srv_session *s, uint64_t graph);
/* The graph of a stream capture, seen while it captures (handlers_capture.c):
 * STREAM_GET_CAPTURE_INFO binds the driver's capturing graph to a client id, borrowed (the
 * capture owns it), and STREAM_UPDATE_CAPTURE_DEPS; at STREAM_END_CAPTURE, srv_capture_bound
 * says whether id is such a graph and srv_capture_end settles it after the driver's end
 * returned res and g: the id owns g, or, when the capture failed (the driver destroyed its
 * graph), the id, its nodes and bodies are dropped. */
CUresult srv_op_capture_info(struct srv_session *s, struct srv_call *call);
CUresult srv_op_capture_update_deps(struct srv_session *s, struct srv_call *call);
bool srv_capture_bound(struct srv_session *s, uint64_t id);
/* Whether g is a graph the session holds under some id. */
bool srv_graph_known(const struct srv_session *s, CUgraph g);
CUresult srv_capture_end(struct srv_session *s, uint64_t id, CUresult res, CUgraph g);
/* Before a stream is destroyed: drop the id of the capture it ends (see handlers_capture.c). */
void srv_capture_abandon(struct srv_session *s, CUstream st);

/* A do-nothing host node standing for a client host function (handlers_device.c). */
CUresult srv_add_host_placeholder(struct srv_session *s, CUgraphNode *node, CUgraph g,
                                  const CUgraphNode *deps, size_t ndeps);

/* End a JIT link (handlers_link.c). */
void srv_link_free(struct srv_session *s, void *real);
/* Arrays, texture and surface objects (handlers_array.c; one handle type, PROTO_H_IMAGE):
 * srv_array_object_destroy destroys one of them (the handle's real pointer) with the driver
 * call its kind needs. */
CUresult srv_array_object_destroy(struct srv_session *s, void *real);

/* CUDA IPC (handlers_ipc.c): memory the session opened from other sessions' handles is not
 * charged to its quota (the exporter's holds it), except: charge this session for the
 * IPC-opened memory whose exporter's session has ended (the driver keeps it alive while it is
 * open); srv_quota_allows calls it. */
void srv_ipc_charge_orphans(struct srv_session *s);

/* Make the call's context current (binding primary contexts lazily). */
CUresult srv_use_ctx(struct srv_session *s, uint64_t ctx_id);
/* The driver's context of the client's context id (a primary one is retained on first use). */
CUresult srv_ctx_real(struct srv_session *s, uint64_t ctx_id, CUcontext *ctx_p);
/* The driver stream for a wire stream id; false if unknown. */
bool srv_stream(struct srv_session *s, uint64_t id, CUstream *stream_p);

/* The arguments of the call, an OP of proto/ops.def (or one sharing its handler and so its
 * arguments), by name: SRV_ARGS(call, MEMCPY_HTOD)->stream. */
#define SRV_ARGS(call, OP) ((const struct proto_args_##OP *)(const void *)(call)->args)
/* The words of a variable-length op after its fixed arguments, and their number. */
#define SRV_ARGS_REST(call, OP)   ((call)->args + PROTO_NARGS_##OP)
#define SRV_ARGS_REST_N(call, OP) ((call)->msg->n_args - PROTO_NARGS_##OP)

/* Handlers (one per op of proto/ops.def, declared in the generated server/op_dispatch.h and
 * called through srv_dispatch): return the CUresult of the call; a call that breaks the session
 * (a protocol-level refusal) writes call->why, and the worker ends the session after it. */

/* The context ctx_id is about to be destroyed or reset: free the staging buffers if they
 * belong to it (they would go with it), so the next bulk copy allocates new ones. */
void srv_staging_release(struct srv_session *s, uint64_t ctx_id);
/* Allocate the staging buffers if they are not (CUDA_SUCCESS or the allocation's error). */
CUresult srv_staging_ready(struct srv_session *s);
/* The two pinned chunks that bulk copies go through (handlers_mem.c), portable, allocated by
 * srv_staging_ready (NULL and len 0 until then); the most the session held, for its log. */
struct srv_staging {
    void *buf[2];
    size_t len;
};
struct srv_staging *srv_staging_of(struct srv_session *s);
size_t srv_staging_most(struct srv_session *s);
/* One-sided copies (handlers_rdma_copy.c): drop the registrations with the connection, the
 * staging buffers' and the device allocations' (before the staging buffers, a context or the
 * session's allocations are freed). */
void srv_rdma_staging_release(struct srv_session *s);
/* GPUDirect RDMA: the allocation at dptr is about to be freed; deregister it (and close its
 * dmabuf) so that memory allocated there later is never reached through a stale
 * registration. */
void srv_rdma_direct_forget(struct srv_session *s, CUdeviceptr dptr);
/* Process-wide switch, from the config's rdma_direct (on | off) and RGPU_RDMA_DIRECT=0. */
void srv_rdma_direct_configure(const char *value);

/* Reply to the call now, successfully, with len bytes of bulk from buf (the handler's result;
 * CUDA_ERROR_DEVICE_UNAVAILABLE when the connection failed). With buf NULL only the reply goes
 * out, announcing len bytes that the handler then streams with transport_sendv (proto_send). */
CUresult srv_reply_bulk(struct srv_session *s, struct srv_call *call, const void *buf, size_t len);

/* Bulk input of a call: inline data or frame bulk received into dst (at most cap). */
rg_status_t srv_recv_input(struct srv_session *s, struct srv_call *call, void *dst, size_t len);
/* Kernel output (output.c): make stdout and stderr pipes; send what is in them to the client. */
void srv_output_capture(struct srv_session *s);
rg_status_t srv_output_forward(struct srv_session *s);

/* The session's components set up (zeroed state, server/components.def), first thing, before
 * the handshake; an error leaves nothing to tear down. */
rg_status_t srv_session_init(struct srv_session *s);
/* Free everything the session holds: every component's teardown in the table's order, then
 * the handle table. Once, at the session's end, whether or not its handshake succeeded. */
void srv_session_teardown(struct srv_session *s);

#endif
