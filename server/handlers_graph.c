/* Stream capture and CUDA graphs: captured and instantiated by the real driver in the worker,
 * so every kernel, memset and device copy of the captured stream is recorded as it would be
 * locally; the client names graphs and executable graphs by ids it minted. */
#include "server/session.h"
#include "server/tenancy.h"

#define ARG(i) (call->msg->args[i])

static CUresult h_begin_capture(struct srv_session *s, struct srv_call *call)
{
    CUstream st;

    if (!srv_stream(s, ARG(0), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuStreamBeginCapture(st, (CUstreamCaptureMode)ARG(1));
}

/* [stream, mode, graph, ndeps]; data: ndeps node ids of that graph. */
static CUresult h_begin_capture_to_graph(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *g;
    CUgraphNode deps[64];
    CUstream st;
    CUresult res;

    if (call->msg->n_args < 4 || ARG(3) > 64 || call->msg->data.len != 8 * ARG(3))
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_stream(s, ARG(0), &st) || (g = srv_handle_get(s, ARG(2), PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = srv_graph_nodes_of(s, call->msg->data.data, ARG(3), deps);
    if (res != CUDA_SUCCESS)
        return res;
    return s->drv.cuStreamBeginCaptureToGraph(st, g->real, deps, NULL, ARG(3),
                                              (CUstreamCaptureMode)ARG(1));
}

/* [stream, graph id]: a new id, the id STREAM_GET_CAPTURE_INFO bound to the capturing graph,
 * or 0 when the capture went into an existing graph. */
static CUresult h_end_capture(struct srv_session *s, struct srv_call *call)
{
    CUstream st;
    CUgraph g = NULL;
    CUresult res;

    if (!srv_stream(s, ARG(0), &st) || (ARG(1) != 0 && PROTO_ID_TYPE(ARG(1)) != PROTO_H_GRAPH))
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuStreamEndCapture(st, &g);
    if (ARG(1) == 0)
        return res;
    if (srv_capture_bound(ARG(1)))
        return srv_capture_end(s, ARG(1), res, g);
    return srv_handle_adopt(s, ARG(1), PROTO_H_GRAPH, res, g);
}

static CUresult h_instantiate(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *g = srv_handle_get(s, ARG(1), PROTO_H_GRAPH);
    CUgraphExec exec;
    CUresult res;

    if (g == NULL || PROTO_ID_TYPE(ARG(0)) != PROTO_H_GRAPH_EXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphInstantiateWithFlags(&exec, g->real, ARG(2));
    return srv_handle_adopt(s, ARG(0), PROTO_H_GRAPH_EXEC, res, exec);
}

static CUresult h_launch_upload(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *e = srv_handle_get(s, ARG(0), PROTO_H_GRAPH_EXEC);
    struct srv_gate_ticket tk;
    CUstream st;
    CUresult res;

    if (e == NULL || !srv_stream(s, ARG(1), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if (call->msg->op == PROTO_OP_GRAPH_UPLOAD)
        return s->drv.cuGraphUpload(e->real, st);
    srv_gate_begin(s, st, &tk); /* a graph's kernels count like launches */
    res = s->drv.cuGraphLaunch(e->real, st);
    srv_gate_end(s, st, &tk, res);
    return res;
}

static CUresult h_destroy(struct srv_session *s, struct srv_call *call)
{
    unsigned type = call->msg->op == PROTO_OP_GRAPH_DESTROY ? PROTO_H_GRAPH : PROTO_H_GRAPH_EXEC;

    struct srv_handle *h = srv_handle_get(s, ARG(0), type);

    if (h != NULL && h->borrowed) /* a conditional node's body: it goes with its graph */
        return CUDA_ERROR_INVALID_VALUE;
    if (type == PROTO_H_GRAPH)
        srv_graph_forget(s, ARG(0)); /* its nodes and conditional bodies go with it */
    return srv_handle_destroy(s, ARG(0), type);
}

static CUresult h_node_count(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *g = srv_handle_get(s, ARG(0), PROTO_H_GRAPH);
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
static CUresult h_capture_mode(struct srv_session *s, struct srv_call *call)
{
    CUstreamCaptureMode mode = (CUstreamCaptureMode)ARG(0);

    return s->drv.cuThreadExchangeStreamCaptureMode(&mode);
}

const srv_handler_fn srv_graph_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_STREAM_BEGIN_CAPTURE] = h_begin_capture,
    [PROTO_OP_STREAM_END_CAPTURE] = h_end_capture,
    [PROTO_OP_GRAPH_INSTANTIATE] = h_instantiate,
    [PROTO_OP_GRAPH_LAUNCH] = h_launch_upload,
    [PROTO_OP_GRAPH_UPLOAD] = h_launch_upload,
    [PROTO_OP_GRAPH_EXEC_DESTROY] = h_destroy,
    [PROTO_OP_GRAPH_DESTROY] = h_destroy,
    [PROTO_OP_THREAD_CAPTURE_MODE] = h_capture_mode,
    [PROTO_OP_GRAPH_NODE_COUNT] = h_node_count,
    [PROTO_OP_STREAM_BEGIN_CAPTURE_TO_GRAPH] = h_begin_capture_to_graph,
    [PROTO_OP_STREAM_GET_CAPTURE_INFO] = srv_capture_info,          /* handlers_capture.c */
    [PROTO_OP_STREAM_UPDATE_CAPTURE_DEPS] = srv_capture_update_deps,
};
