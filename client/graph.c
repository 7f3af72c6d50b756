/* Stream capture and CUDA graphs. The real driver captures on the server (so kernels, memsets
 * and device copies are recorded exactly as locally); the client mints graph and executable
 * graph ids and keeps each stream's capture state to answer capture queries locally. */
#include <stdlib.h>

#include "client.h"

struct cli_graph {
    struct cli_handle h; /* PROTO_H_GRAPH or PROTO_H_GRAPH_EXEC */
    struct cli_ctx *ctx;
};

static __thread CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static uint64_t next_capture_id = 1;

static struct cli_graph *graph_new(enum proto_handle_type type)
{
    struct cli_graph *g = calloc(1, sizeof(*g));

    if (g != NULL) {
        cli_handle_init(&g->h, type);
        g->ctx = cli_ctx_current();
    }
    return g;
}

static CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode, bool per_thread)
{
    struct cli_call call = {.op = PROTO_OP_STREAM_BEGIN_CAPTURE, .nargs = 2, .args = {0, mode}};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (!cli_stream_id(stream, per_thread, &call.args[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    if (cli_stream_capture_id(stream) != 0)
        return CUDA_ERROR_ILLEGAL_STATE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS &&
        !cli_stream_set_capture(stream, __atomic_fetch_add(&next_capture_id, 1, __ATOMIC_RELAXED)))
        res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* only created streams are tracked */
    return res;
}

static CUresult end_capture(CUstream stream, CUgraph *graph, bool per_thread)
{
    struct cli_call call = {.op = PROTO_OP_STREAM_END_CAPTURE, .nargs = 2};
    struct cli_graph *g;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cli_stream_id(stream, per_thread, &call.args[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((g = graph_new(PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.args[1] = g->h.id;
    res = cli_call_sync(&call);
    cli_stream_set_capture(stream, 0); /* capture ends either way, as in CUDA */
    if (res != CUDA_SUCCESS) {
        free(g);
        return res;
    }
    *graph = (CUgraph)g;
    return CUDA_SUCCESS;
}

#define CAPTURE_PAIR(name, impl, params, ...)                                                   \
    CLI_EXPORT CUresult name params { return impl(__VA_ARGS__, false); }                        \
    CLI_EXPORT CUresult name##_ptsz params { return impl(__VA_ARGS__, true); }

CAPTURE_PAIR(cuStreamBeginCapture_v2, begin_capture, (CUstream s, CUstreamCaptureMode m), s, m)
CAPTURE_PAIR(cuStreamEndCapture, end_capture, (CUstream s, CUgraph *g), s, g)

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
        struct cli_call call = {.op = PROTO_OP_THREAD_CAPTURE_MODE, .nargs = 1,
                                .args = {thread_capture_mode}};
        return cli_call_async(&call);
    }
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                                unsigned long long flags)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH), *e;
    struct cli_call call = {.op = PROTO_OP_GRAPH_INSTANTIATE, .nargs = 3};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (exec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((e = graph_new(PROTO_H_GRAPH_EXEC)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.args[0] = e->h.id;
    call.args[1] = g->h.id;
    call.args[2] = flags;
    res = cli_call_sync(&call);
    if (res != CUDA_SUCCESS) {
        free(e);
        return res;
    }
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

/* The older ABI (error node and log buffer): the same instantiation, nothing to report. */
static CUresult instantiate_v1(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node,
                               char *log, size_t log_size)
{
    if (err_node != NULL)
        *err_node = NULL;
    if (log != NULL && log_size > 0)
        log[0] = '\0';
    return cuGraphInstantiateWithFlags(exec, graph, 0);
}

CLI_EXPORT CUresult cli_instantiate_v1(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s) __asm__("cuGraphInstantiate");
CLI_EXPORT CUresult cli_instantiate_v1(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s)
{
    return instantiate_v1(e, g, n, l, s);
}
CLI_EXPORT CUresult cli_instantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s) __asm__("cuGraphInstantiate_v2");
CLI_EXPORT CUresult cli_instantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *n, char *l,
                                       size_t s)
{
    return instantiate_v1(e, g, n, l, s);
}

static CUresult exec_on_stream(unsigned op, CUgraphExec exec, CUstream stream, bool per_thread)
{
    struct cli_graph *e = cli_handle_check(exec, PROTO_H_GRAPH_EXEC);
    struct cli_call call = {.op = op, .nargs = 2};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (e == NULL || !cli_stream_id(stream, per_thread, &call.args[1]))
        return CUDA_ERROR_INVALID_HANDLE;
    call.args[0] = e->h.id;
    return cli_call_async(&call);
}

static CUresult graph_launch(CUgraphExec e, CUstream s, bool per_thread)
{
    return exec_on_stream(PROTO_OP_GRAPH_LAUNCH, e, s, per_thread);
}

static CUresult graph_upload(CUgraphExec e, CUstream s, bool per_thread)
{
    return exec_on_stream(PROTO_OP_GRAPH_UPLOAD, e, s, per_thread);
}

CAPTURE_PAIR(cuGraphLaunch, graph_launch, (CUgraphExec e, CUstream s), e, s)
CAPTURE_PAIR(cuGraphUpload, graph_upload, (CUgraphExec e, CUstream s), e, s)

static CUresult graph_destroy(void *handle, enum proto_handle_type type, unsigned op)
{
    struct cli_graph *g = cli_handle_check(handle, type);

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return cli_handle_destroy(&g->h, op, g->ctx);
}

CLI_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    return graph_destroy(exec, PROTO_H_GRAPH_EXEC, PROTO_OP_GRAPH_EXEC_DESTROY);
}

CLI_EXPORT CUresult cuGraphDestroy(CUgraph graph)
{
    return graph_destroy(graph, PROTO_H_GRAPH, PROTO_OP_GRAPH_DESTROY);
}

/* Counting nodes (what frameworks ask, e.g. to warn about an empty capture) is answered; the
 * node handles themselves are not offered yet. */
CLI_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *num)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    uint64_t out[1];
    struct cli_call call = {.op = PROTO_OP_GRAPH_NODE_COUNT, .nargs = 1, .out = out,
                            .out_cap = 1};
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (num == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes != NULL)
        return cli_unsupported("cuGraphGetNodes (node handles)");
    call.args[0] = g->h.id;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout >= 1)
        *num = (size_t)out[0];
    return res;
}
