/* Stream capture and CUDA graphs: captured and instantiated by the real driver in the worker,
 * so every kernel, memset and device copy of the captured stream is recorded as it would be
 * locally; the client names graphs and executable graphs by ids it minted. */
#include "server/session.h"
#include "server/tenancy.h"

CUresult srv_op_stream_begin_capture(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_BEGIN_CAPTURE *a = SRV_ARGS(call, STREAM_BEGIN_CAPTURE);
    CUstream st;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuStreamBeginCapture(st, (CUstreamCaptureMode)a->mode);
}

/* [stream, mode, graph, ndeps]; data: ndeps node ids of that graph. */
CUresult srv_op_stream_begin_capture_to_graph(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_BEGIN_CAPTURE_TO_GRAPH *a =
        SRV_ARGS(call, STREAM_BEGIN_CAPTURE_TO_GRAPH);
    struct srv_handle *g;
    CUgraphNode deps[64];
    CUstream st;
    CUresult res;

    if (call->msg->n_args < 4 || a->ndeps > 64 || call->msg->data.len != 8 * a->ndeps)
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_stream(s, a->stream, &st) || (g = srv_handle_get(s, a->graph, PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = srv_graph_nodes_of(s, call->msg->data.data, a->ndeps, deps);
    if (res != CUDA_SUCCESS)
        return res;
    return s->drv.cuStreamBeginCaptureToGraph(st, g->real, deps, NULL, a->ndeps,
                                              (CUstreamCaptureMode)a->mode);
}

/* [stream, graph id]: a new id, the id STREAM_GET_CAPTURE_INFO bound to the capturing graph,
 * or 0 when the capture went into an existing graph. */
CUresult srv_op_stream_end_capture(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_END_CAPTURE *a = SRV_ARGS(call, STREAM_END_CAPTURE);
    CUstream st;
    CUgraph g = NULL;
    CUresult res;

    if (!srv_stream(s, a->stream, &st) ||
        (a->graph != 0 && PROTO_ID_TYPE(a->graph) != PROTO_H_GRAPH))
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuStreamEndCapture(st, &g);
    if (a->graph == 0) {
        /* Only a capture into a graph the session holds ends without a new id; the graph of
         * a plain capture would have no owner: it is destroyed and the call refused. */
        if (res == CUDA_SUCCESS && g != NULL && !srv_graph_known(s, g)) {
            s->drv.cuGraphDestroy(g);
            return CUDA_ERROR_INVALID_VALUE;
        }
        return res;
    }
    if (srv_capture_bound(s, a->graph))
        return srv_capture_end(s, a->graph, res, g);
    return srv_handle_adopt(s, a->graph, PROTO_H_GRAPH, res, g);
}

CUresult srv_op_graph_instantiate(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_INSTANTIATE *a = SRV_ARGS(call, GRAPH_INSTANTIATE);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    CUgraphExec exec;
    CUresult res;

    if (g == NULL || PROTO_ID_TYPE(a->id) != PROTO_H_GRAPH_EXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphInstantiateWithFlags(&exec, g->real, a->flags);
    return srv_handle_adopt(s, a->id, PROTO_H_GRAPH_EXEC, res, exec);
}

CUresult srv_op_graph_launch_upload(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_LAUNCH *a = SRV_ARGS(call, GRAPH_LAUNCH);
    struct srv_handle *e = srv_handle_get(s, a->exec, PROTO_H_GRAPH_EXEC);
    struct srv_gate_ticket tk;
    CUstream st;
    CUresult res;

    if (e == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (call->msg->op == PROTO_OP_GRAPH_UPLOAD)
        return s->drv.cuGraphUpload(e->real, st);
    srv_gate_begin(s, st, &tk); /* a graph's kernels count like launches */
    res = s->drv.cuGraphLaunch(e->real, st);
    srv_gate_end(s, st, &tk, res);
    return res;
}

CUresult srv_op_graph_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_EXEC_DESTROY *a = SRV_ARGS(call, GRAPH_EXEC_DESTROY);
    unsigned type = call->msg->op == PROTO_OP_GRAPH_DESTROY ? PROTO_H_GRAPH : PROTO_H_GRAPH_EXEC;

    struct srv_handle *h = srv_handle_get(s, a->handle, type);

    if (h != NULL && h->borrowed) /* a conditional node's body: it goes with its graph */
        return CUDA_ERROR_INVALID_VALUE;
    if (type == PROTO_H_GRAPH)
        srv_graph_forget(s, a->handle); /* its nodes and conditional bodies go with it */
    return srv_handle_destroy(s, a->handle, type);
}

CUresult srv_op_graph_node_count(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_NODE_COUNT *a = SRV_ARGS(call, GRAPH_NODE_COUNT);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    size_t n = 0;
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphGetNodes(g->real, NULL, &n);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = n;
    return res;
}

/* The client thread's capture mode (e.g. PyTorch relaxes it around allocations it makes while
 * another stream captures), applied to the worker's one thread. */
CUresult srv_op_thread_capture_mode(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_THREAD_CAPTURE_MODE *a = SRV_ARGS(call, THREAD_CAPTURE_MODE);
    CUstreamCaptureMode mode = (CUstreamCaptureMode)a->mode;

    return s->drv.cuThreadExchangeStreamCaptureMode(&mode);
}

/* Executable graphs, then graphs (before the streams and modules they use). */
static void graphs_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_GRAPH_EXEC);
    srv_handles_destroy_all(s, PROTO_H_GRAPH);
}

const struct srv_component srv_graphs_component = {.name = "graphs", .teardown = graphs_teardown};
