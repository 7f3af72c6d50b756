/* What a stream capture is building, while it captures: cuStreamGetCaptureInfo's graph and
 * dependency nodes, and cuStreamUpdateCaptureDependencies. The capturing graph belongs to the
 * capture until cuStreamEndCapture, so the client id it is bound to here is borrowed (a
 * destroy is refused) and recorded as a capture's graph; its end makes the id the graph's
 * owner, or drops it with its nodes and bodies when the capture failed. */
#include <stdlib.h>
#include <string.h>

#include "server/session.h"

#define MAX_CAPTURE_DEPS 256
#define MAX_CAPTURES     64

_Static_assert(sizeof(CUgraphEdgeData) == 8, "edge data travels as one word");

/* The captures component's state: graph ids bound to capturing graphs, with the stream they
 * were bound through. */
struct captures_state {
    struct bound_capture {
        uint64_t id;
        CUstream stream;
    } bound[MAX_CAPTURES];
    size_t n;
};

static struct captures_state *captures_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_CAPTURES);
}

/* No teardown: the ids are handles, which the session's handle table drops; the state goes
 * with the session (6e04a81: an id bound to a capture outlived the graph its stream took). */
const struct srv_component srv_captures_component = {.name = "captures",
                                                     .state_size = sizeof(struct captures_state)};

bool srv_capture_bound(struct srv_session *s, uint64_t id)
{
    const struct captures_state *c = captures_of(s);

    for (size_t i = 0; i < c->n; i++)
        if (c->bound[i].id == id)
            return true;
    return false;
}

bool srv_graph_known(const struct srv_session *s, CUgraph g)
{
    for (size_t i = 0; i < s->handle_cap; i++)
        if (s->handles[i].id != 0 && PROTO_ID_TYPE(s->handles[i].id) == PROTO_H_GRAPH &&
            s->handles[i].real == (void *)g)
            return true;
    return false;
}

/* Bind the capturing graph g to the new id: a graph id not bound yet, and g known under no
 * other id (a capture into a graph, or a second binding of the same capture, is refused). */
static CUresult capture_bind(struct srv_session *s, uint64_t id, CUgraph g, CUstream st)
{
    struct captures_state *c = captures_of(s);

    if (PROTO_ID_TYPE(id) != PROTO_H_GRAPH || srv_handle_get(s, id, PROTO_H_GRAPH) != NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (srv_graph_known(s, g))
        return CUDA_ERROR_INVALID_VALUE;
    if (c->n == MAX_CAPTURES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (srv_handle_put(s, id, g) != RG_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    srv_handle_get(s, id, PROTO_H_GRAPH)->borrowed = true;
    c->bound[c->n++] = (struct bound_capture){id, st};
    return CUDA_SUCCESS;
}

CUresult srv_capture_end(struct srv_session *s, uint64_t id, CUresult res, CUgraph g)
{
    struct srv_handle *h = srv_handle_get(s, id, PROTO_H_GRAPH);
    struct captures_state *c = captures_of(s);

    for (size_t i = 0; i < c->n; i++)
        if (c->bound[i].id == id)
            c->bound[i] = c->bound[--c->n];
    if (h == NULL)
        return res == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : res;
    if (res == CUDA_SUCCESS && h->real == (void *)g) {
        h->borrowed = false; /* the application's graph from now on */
        return CUDA_SUCCESS;
    }
    if (res == CUDA_SUCCESS) /* not the graph it captured into: keep the id, leak nothing */
        s->drv.cuGraphDestroy(g), res = CUDA_ERROR_UNKNOWN;
    /* memory nodes added to it while it captured; read before srv_graph_forget deletes other
     * handles, which may move h's entry in the table */
    srv_quota_release(s, h->size);
    srv_graph_forget(s, id);
    srv_handle_del(s, id);
    return res;
}

/* A stream destroyed while it captures ends its capture: the ids bound to that graph, with
 * their nodes, go first (the one seen through this stream, or, while the capture is active,
 * any bound to the graph it reports: a stream joined into another's capture sees the same
 * graph; should that capture live on, its end adopts the graph under the id anew). Then the
 * worker ends the capture itself and destroys a plain capture's graph, so that nothing is
 * left to what the driver does with a capture whose stream goes (the fake driver frees it). */
void srv_capture_abandon(struct srv_session *s, CUstream st)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    struct captures_state *c = captures_of(s);
    CUgraph g = NULL, ended = NULL;

    if (s->drv.cuStreamGetCaptureInfo(st, &status, NULL, &g, NULL, NULL, NULL) != CUDA_SUCCESS ||
        status == CU_STREAM_CAPTURE_STATUS_NONE)
        return;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        g = NULL; /* not reported: the stream alone tells */
    for (size_t i = 0; i < c->n;) {
        struct srv_handle *h = srv_handle_get(s, c->bound[i].id, PROTO_H_GRAPH);
        if (c->bound[i].stream == st || (g != NULL && h != NULL && h->real == (void *)g))
            srv_capture_end(s, c->bound[i].id, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, NULL);
        else
            i++; /* an end moves the last entry into slot i: look at it again */
    }
    if (s->drv.cuStreamEndCapture(st, &ended) == CUDA_SUCCESS && ended != NULL &&
        !srv_graph_known(s, ended)) /* a capture into a graph leaves the session's graph */
        s->drv.cuGraphDestroy(ended);
}

/* Answer the dependencies deps[n] (and their edge data) as [n, id, type, edge, ...] from
 * out_ext[1], node ids of graph id `graph`. */
static CUresult answer_deps(struct srv_session *s, struct srv_call *call, uint64_t graph,
                            const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n)
{
    call->out_ext[1] = n;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
        uint64_t *o = &call->out_ext[2 + 3 * i];
        if ((o[0] = srv_graph_node_id(s, deps[i], graph)) == 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->drv.cuGraphNodeGetType(deps[i], &type);
        o[1] = type;
        if (edges != NULL)
            memcpy(&o[2], &edges[i], sizeof(edges[i]));
    }
    call->nout = 2 + 3 * n;
    return CUDA_SUCCESS;
}

/* [stream, graph, bind] -> out[status, n, (id, type, edge) x n]; see proto/ops.h. */
CUresult srv_op_capture_info(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_GET_CAPTURE_INFO *a = SRV_ARGS(call, STREAM_GET_CAPTURE_INFO);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL;
    struct srv_handle *h;
    cuuint64_t capture_id;
    size_t n = 0;
    CUstream st;
    CUgraph g = NULL;
    CUresult res;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuStreamGetCaptureInfo(st, &status, &capture_id, &g, &deps, &edges, &n);
    if (res != CUDA_SUCCESS)
        return res;
    if (n > MAX_CAPTURE_DEPS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((call->out_ext = calloc(2 + 3 * n, sizeof(uint64_t))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call->out_ext[0] = status;
    call->nout = 2;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_SUCCESS;
    if (a->bind == 0) {
        if ((h = srv_handle_get(s, a->graph, PROTO_H_GRAPH)) == NULL || h->real != (void *)g)
            return CUDA_ERROR_INVALID_VALUE; /* not the graph this stream captures into */
        return answer_deps(s, call, a->graph, deps, edges, n);
    }
    if ((res = capture_bind(s, a->graph, g, st)) != CUDA_SUCCESS)
        return res;
    if ((res = answer_deps(s, call, a->graph, deps, edges, n)) != CUDA_SUCCESS)
        srv_capture_end(s, a->graph, res, NULL); /* unbound again: the client was told it failed */
    return res;
}

/* [stream, flags, n, has edges]; data: n node ids, then n CUgraphEdgeData if has edges. */
CUresult srv_op_capture_update_deps(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_UPDATE_CAPTURE_DEPS *a =
        SRV_ARGS(call, STREAM_UPDATE_CAPTURE_DEPS);
    const ProtobufCBinaryData *d = &call->msg->data;
    size_t n = a->n, len = (a->has_edges ? 16 : 8) * n;
    CUgraphNode nodes[MAX_CAPTURE_DEPS];
    CUgraphEdgeData edges[MAX_CAPTURE_DEPS];
    CUstream st;
    CUresult res;

    if (n > MAX_CAPTURE_DEPS || d->len != len)
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = srv_graph_nodes_of(s, d->data, n, nodes)) != CUDA_SUCCESS)
        return res;
    if (a->has_edges)
        memcpy(edges, d->data + 8 * n, 8 * n);
    return s->drv.cuStreamUpdateCaptureDependencies(st, nodes, a->has_edges ? edges : NULL, n,
                                                    (unsigned)a->flags);
}
