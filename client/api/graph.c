/* Stream capture and CUDA graphs. The real driver captures on the server (so kernels, memsets
 * and device copies are recorded exactly as locally); the client mints graph and executable
 * graph ids, keeps each stream's capture state to answer capture queries locally, and keeps
 * each graph's host part (graph.h). */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

static __thread CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static uint64_t next_capture_id = 1;

struct cli_graph *cli_graph_new(enum proto_handle_type type)
{
    struct cli_graph *g = calloc(1, sizeof(*g));

    if (g != NULL) {
        cli_handle_init(&g->h, type);
        g->ctx = cli_ctx_current();
        pthread_mutex_init(&g->lock, NULL);
    }
    return g;
}

/* Free the client object and what it holds (not the server's graph). */
void cli_graph_free(struct cli_graph *g)
{
    graph_host_clear(&g->host);
    for (size_t i = 0; i < g->nnodes; i++) {
        struct cli_node *n = g->nodes[i];
        for (unsigned b = 0; b < n->nbodies; b++) /* a conditional node's bodies go with it */
            cli_graph_free((struct cli_graph *)n->bodies[b]);
        free(n->bodies);
        cli_handle_kill(&n->h);
        free(n);
    }
    free(g->nodes);
    pthread_mutex_destroy(&g->lock);
    cli_handle_kill(&g->h);
    free(g);
}

bool graph_host_collect(struct graph_host *dst, struct cli_graph *src)
{
    bool ok = true;

    pthread_mutex_lock(&src->lock);
    for (size_t i = 0; ok && i < src->host.nuses; i++)
        ok = graph_host_add_use(dst, &src->host.uses[i]);
    for (size_t i = 0; ok && i < src->host.nfns; i++)
        ok = graph_host_add_fn(dst, src->host.fns[i].fn, src->host.fns[i].data);
    for (size_t i = 0; ok && i < src->nnodes; i++)
        for (unsigned b = 0; ok && b < src->nodes[i]->nbodies; b++)
            ok = graph_host_collect(dst, (struct cli_graph *)src->nodes[i]->bodies[b]);
    pthread_mutex_unlock(&src->lock);
    return ok;
}

struct cli_node *cli_graph_node(struct cli_graph *g, uint64_t id, CUgraphNodeType type)
{
    struct cli_node *n = NULL;

    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->nnodes && n == NULL; i++)
        if (g->nodes[i]->h.id == id)
            n = g->nodes[i];
    if (n == NULL && g->nnodes == g->node_cap) {
        size_t cap = g->node_cap ? 2 * g->node_cap : 16;
        struct cli_node **p = realloc(g->nodes, cap * sizeof(*p));
        if (p != NULL) {
            g->nodes = p;
            g->node_cap = cap;
        }
    }
    if (n == NULL && g->nnodes < g->node_cap && (n = calloc(1, sizeof(*n))) != NULL) {
        n->h = (struct cli_handle){id, PROTO_H_GRAPH_NODE, CLI_HANDLE_MAGIC};
        n->graph = g;
        n->type = type;
        g->nodes[g->nnodes++] = n;
    }
    pthread_mutex_unlock(&g->lock);
    return n;
}

/* into: the graph to capture into (its dependency nodes in deps), or NULL for a new one. */
static CUresult begin_capture_into(CUstream stream, struct cli_graph *into, const CUgraphNode *deps,
                                   size_t ndeps, CUstreamCaptureMode mode, bool per_thread)
{
    uint64_t ids[64], capture = __atomic_fetch_add(&next_capture_id, 1, __ATOMIC_RELAXED);
    struct cli_call call = {CLI_ARGS(STREAM_BEGIN_CAPTURE, .stream = 0, .mode = mode)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_BEGIN_CAPTURE.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (cli_stream_capture_id(stream) != 0)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (into != NULL) {
        if (ndeps > 64 || (res = cli_graph_dep_ids(into, deps, ndeps, ids)) != CUDA_SUCCESS)
            return ndeps > 64 ? CUDA_ERROR_INVALID_VALUE : res;
        call.op = PROTO_OP_STREAM_BEGIN_CAPTURE_TO_GRAPH;
        call.nargs = PROTO_NARGS_STREAM_BEGIN_CAPTURE_TO_GRAPH; /* BEGIN_CAPTURE's, and more */
        call.a.STREAM_BEGIN_CAPTURE_TO_GRAPH.graph = into->h.id;
        call.a.STREAM_BEGIN_CAPTURE_TO_GRAPH.ndeps = ndeps;
        call.data = ids, call.data_len = 8 * ndeps;
        if (!cli_capture_target_set(capture, into))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && !cli_stream_set_capture(stream, capture))
        res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* only created streams are tracked */
    if (res != CUDA_SUCCESS && into != NULL)
        cli_capture_target_take(capture, &(bool){false});
    return res;
}

static CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode, bool per_thread)
{
    return begin_capture_into(stream, NULL, NULL, 0, mode, per_thread);
}

static CUresult begin_capture_to_graph(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                       const CUgraphEdgeData *edges, size_t ndeps,
                                       CUstreamCaptureMode mode, bool per_thread)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; edges != NULL && i < ndeps; i++)
        if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port != 0)
            return cli_unsupported("programmatic edges at the start of a capture into a graph");
    return begin_capture_into(stream, g, deps, ndeps, mode, per_thread);
}

/* The end of a capture whose graph the client already has: the application's (minted false;
 * the worker is told graph id 0) or one minted while it captured, which the worker bound to
 * the capturing graph (or adopts now if it never did). The captured host part joins the
 * graph's; a minted graph goes if the capture failed. */
static CUresult end_capture_into(struct cli_graph *into, bool minted, CUstream stream, uint64_t sid,
                                 CUgraph *graph)
{
    struct cli_call call = {
        CLI_ARGS(STREAM_END_CAPTURE, .stream = sid, .graph = minted ? into->h.id : 0)};
    struct graph_host host;
    CUresult res = cli_call_sync(&call);
    bool ok = true;

    cli_capture_take(cli_stream_capture_id(stream), &host);
    cli_stream_set_capture(stream, 0);
    pthread_mutex_lock(&into->lock);
    for (size_t i = 0; ok && i < host.nuses; i++)
        ok = graph_host_add_use(&into->host, &host.uses[i]);
    for (size_t i = 0; ok && i < host.nfns; i++)
        ok = graph_host_add_fn(&into->host, host.fns[i].fn, host.fns[i].data);
    pthread_mutex_unlock(&into->lock);
    graph_host_clear(&host);
    if (res == CUDA_SUCCESS && !ok)
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res != CUDA_SUCCESS && minted)
        cli_graph_free(into); /* the driver destroyed it (or it is an orphan on the server) */
    if (res == CUDA_SUCCESS && graph != NULL)
        *graph = (CUgraph)into;
    return res;
}

static CUresult end_capture(CUstream stream, CUgraph *graph, bool per_thread)
{
    struct cli_call call = {CLI_ARGS(STREAM_END_CAPTURE)};
    uint64_t capture = cli_stream_capture_id(stream);
    struct cli_graph *g, *into;
    bool minted;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_END_CAPTURE.stream);

    if (res != CUDA_SUCCESS)
        return res;
    into = cli_capture_target_peek(capture, &minted);
    if (graph == NULL && (into == NULL || minted))
        return CUDA_ERROR_INVALID_VALUE;
    if ((into = cli_capture_target_take(capture, &minted)) != NULL)
        return end_capture_into(into, minted, stream, call.a.STREAM_END_CAPTURE.stream, graph);
    if ((g = cli_graph_new(PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.STREAM_END_CAPTURE.graph = g->h.id;
    res = cli_call_sync(&call);
    cli_capture_take(capture, &g->host);
    cli_stream_set_capture(stream, 0); /* capture ends either way, as in CUDA */
    if (res != CUDA_SUCCESS) {
        cli_graph_free(g);
        return res;
    }
    *graph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CLI_PTSZ_PAIR(cuStreamBeginCapture_v2, begin_capture, (CUstream s, CUstreamCaptureMode m), s, m)
CLI_PTSZ_PAIR(cuStreamEndCapture, end_capture, (CUstream s, CUgraph *g), s, g)
CLI_PTSZ_PAIR(cuStreamBeginCaptureToGraph, begin_capture_to_graph,
              (CUstream s, CUgraph g, const CUgraphNode *d, const CUgraphEdgeData *e, size_t n,
               CUstreamCaptureMode m),
              s, g, d, e, n, m)

/* v1 (CUDA 10.0) had no mode argument. */
CLI_EXPORT CUresult cli_begin_capture_v1(CUstream s) __asm__("cuStreamBeginCapture");
CLI_EXPORT CUresult cli_begin_capture_v1(CUstream s)
{
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CLI_EXPORT CUresult cli_begin_capture_v1_ptsz(CUstream s) __asm__("cuStreamBeginCapture_ptsz");
CLI_EXPORT CUresult cli_begin_capture_v1_ptsz(CUstream s)
{
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

CLI_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode old;

    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    if (cli_initialized() && thread_capture_mode != old) {
        struct cli_call call = {CLI_ARGS(THREAD_CAPTURE_MODE, .mode = thread_capture_mode)};
        return cli_call_async(&call);
    }
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                                unsigned long long flags)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH), *e;
    struct cli_call call = {CLI_ARGS(GRAPH_INSTANTIATE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (exec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((e = cli_graph_new(PROTO_H_GRAPH_EXEC)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.GRAPH_INSTANTIATE.id = e->h.id;
    call.a.GRAPH_INSTANTIATE.graph = g->h.id;
    call.a.GRAPH_INSTANTIATE.flags = flags;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && !graph_host_collect(&e->host, g))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res != CUDA_SUCCESS) {
        cli_graph_free(e);
        return res;
    }
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

/* The older ABI (error node and log buffer): the same instantiation, nothing to report. */
static CUresult instantiate_v1(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node, char *log,
                               size_t log_size)
{
    if (err_node != NULL)
        *err_node = NULL;
    if (log != NULL && log_size > 0)
        log[0] = '\0';
    return cuGraphInstantiateWithFlags(exec, graph, 0);
}

CLI_EXPORT CUresult cli_instantiate_v1(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s) __asm__("cuGraphInstantiate");
CLI_EXPORT CUresult cli_instantiate_v1(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l, size_t s)
{
    return instantiate_v1(e, g, n, l, s);
}
CLI_EXPORT CUresult cli_instantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s) __asm__("cuGraphInstantiate_v2");
CLI_EXPORT CUresult cli_instantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l, size_t s)
{
    return instantiate_v1(e, g, n, l, s);
}

static CUresult exec_on_stream(unsigned op, CUgraphExec exec, CUstream stream, bool per_thread)
{
    struct cli_graph *e = cli_handle_check(exec, PROTO_H_GRAPH_EXEC);
    struct cli_call call = {CLI_ARGS_AS(op, GRAPH_LAUNCH)};
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.GRAPH_LAUNCH.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.GRAPH_LAUNCH.exec = e->h.id;
    if (op == PROTO_OP_GRAPH_UPLOAD)
        return cli_call_async(&call);
    if ((res = graph_host_before(&e->host, call.a.GRAPH_LAUNCH.stream)) != CUDA_SUCCESS ||
        (res = cli_call_async(&call)) != CUDA_SUCCESS)
        return res;
    return graph_host_after(&e->host, call.a.GRAPH_LAUNCH.stream);
}

static CUresult graph_launch(CUgraphExec e, CUstream s, bool per_thread)
{
    return exec_on_stream(PROTO_OP_GRAPH_LAUNCH, e, s, per_thread);
}

static CUresult graph_upload(CUgraphExec e, CUstream s, bool per_thread)
{
    return exec_on_stream(PROTO_OP_GRAPH_UPLOAD, e, s, per_thread);
}

CLI_PTSZ_PAIR(cuGraphLaunch, graph_launch, (CUgraphExec e, CUstream s), e, s)
CLI_PTSZ_PAIR(cuGraphUpload, graph_upload, (CUgraphExec e, CUstream s), e, s)

static CUresult graph_destroy(void *handle, enum proto_handle_type type, unsigned op)
{
    struct cli_graph *g = cli_handle_check(handle, type);

    struct cli_call call = {CLI_ARGS_AS(op, GRAPH_DESTROY, .handle = g ? g->h.id : 0)};
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (g->owner != NULL) /* a conditional node's body: it goes with its graph */
        return CUDA_ERROR_INVALID_VALUE;
    if (type == PROTO_H_GRAPH && cli_capture_target_busy(g)) /* a capture's graph, until its end */
        return CUDA_ERROR_INVALID_VALUE;
    cli_call_in(&call, g->ctx);
    res = cli_call_async(&call);
    cli_graph_free(g);
    return res;
}

CLI_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    return graph_destroy(exec, PROTO_H_GRAPH_EXEC, PROTO_OP_GRAPH_EXEC_DESTROY);
}

CLI_EXPORT CUresult cuGraphDestroy(CUgraph graph)
{
    return graph_destroy(graph, PROTO_H_GRAPH, PROTO_OP_GRAPH_DESTROY);
}

/* Node handles: the server lists the graph's nodes (with ids it mints for nodes the client
 * never named, e.g. captured ones); counting alone is one small call. */
CLI_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *num)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    uint64_t *out;
    struct cli_call call = {CLI_ARGS(GRAPH_NODE_COUNT)};
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (num == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.GRAPH_NODE_COUNT.graph = g->h.id;
    call.out_cap = nodes == NULL ? 1 : 1 + 2 * 1024;
    if ((out = calloc(call.out_cap, sizeof(*out))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.out = out;
    if (nodes != NULL)
        call.op = PROTO_OP_GRAPH_GET_NODES;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && (call.nout < 1 || (nodes != NULL && call.nout < 1 + 2 * out[0])))
        res = CUDA_ERROR_UNKNOWN;
    for (size_t i = 0; res == CUDA_SUCCESS && nodes != NULL && i < out[0] && i < *num; i++)
        if ((nodes[i] = (CUgraphNode)cli_graph_node(g, out[1 + 2 * i],
                                                    (CUgraphNodeType)out[2 + 2 * i])) == NULL)
            res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS)
        *num = (size_t)out[0];
    free(out);
    return res;
}

CLI_EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph graph)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH), *c;
    struct cli_call call = {CLI_ARGS(GRAPH_CLONE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (clone == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((c = cli_graph_new(PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.GRAPH_CLONE.id = c->h.id;
    call.a.GRAPH_CLONE.graph = g->h.id;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && !graph_host_copy(&c->host, &g->host))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res != CUDA_SUCCESS) {
        cli_graph_free(c);
        return res;
    }
    *clone = (CUgraph)c;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph,
                                         CUgraphExecUpdateResultInfo *info)
{
    struct cli_graph *e = cli_handle_check(exec, PROTO_H_GRAPH_EXEC);
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    uint64_t out[1] = {CU_GRAPH_EXEC_UPDATE_ERROR};
    struct cli_call call = {CLI_ARGS(GRAPH_EXEC_UPDATE), .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (e == NULL || g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (info == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.GRAPH_EXEC_UPDATE.exec = e->h.id;
    call.a.GRAPH_EXEC_UPDATE.graph = g->h.id;
    res = cli_call_sync(&call);
    memset(info, 0, sizeof(*info));
    info->result = (CUgraphExecUpdateResult)out[0];
    if (res == CUDA_SUCCESS) {
        struct graph_host host = {0};
        if (!graph_host_collect(&host, g)) {
            graph_host_clear(&host);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        graph_host_clear(&e->host);
        e->host = host;
    }
    return res;
}

CLI_EXPORT CUresult
cli_exec_update_v1(CUgraphExec e, CUgraph g, CUgraphNode *err_node,
                   CUgraphExecUpdateResult *result) __asm__("cuGraphExecUpdate");
CLI_EXPORT CUresult cli_exec_update_v1(CUgraphExec e, CUgraph g, CUgraphNode *err_node,
                                       CUgraphExecUpdateResult *result)
{
    CUgraphExecUpdateResultInfo info;
    CUresult res = cuGraphExecUpdate_v2(e, g, &info);

    if (err_node != NULL)
        *err_node = NULL;
    if (result != NULL)
        *result = info.result;
    return res;
}

/* ---- graph memory of a device (what graphs' memory nodes hold) -------------------------- */

static CUresult graph_mem_call(unsigned op, CUdevice dev, uint64_t attr, bool set, uint64_t *v)
{
    uint64_t out[1] = {0};
    /* GRAPH_MEM_TRIM [dev] is GRAPH_MEM_ATTR's first argument alone */
    struct cli_call call = {CLI_ARGS_AS(op, GRAPH_MEM_ATTR, .dev = (uint64_t)cli_device_remote(dev),
                                        .attr = attr, .set = set, .value = v ? *v : 0),
                            .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (dev < 0 || dev >= cli_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (op == PROTO_OP_GRAPH_MEM_TRIM)
        call.nargs = PROTO_NARGS_GRAPH_MEM_TRIM;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && v != NULL && !set)
        *v = out[0];
    return res;
}

CLI_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                                 void *value)
{
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return graph_mem_call(PROTO_OP_GRAPH_MEM_ATTR, dev, attr, false, value);
}

CLI_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                                 void *value)
{
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return graph_mem_call(PROTO_OP_GRAPH_MEM_ATTR, dev, attr, true, value);
}

CLI_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    return graph_mem_call(PROTO_OP_GRAPH_MEM_TRIM, dev, 0, false, NULL);
}
