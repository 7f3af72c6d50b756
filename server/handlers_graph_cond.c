/* Conditional graph nodes: handles (the driver's values, which kernels take by value), and
 * conditional nodes, whose body graphs the driver makes and owns. Each body is bound to the
 * graph id the client minted for it, borrowed (never destroyed on its own: the driver frees
 * it with its node's graph) and recorded with its parent graph, so that destroying the parent
 * drops the ids of its bodies, their nodes and the bodies nested in them. */
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "server/session.h"

#define MAX_BODIES 256

/* The component's state: body graph id -> the graph holding its conditional node. */
struct graph_cond_state {
    struct body_rec {
        uint64_t id, parent;
    } * bodies;
    size_t n, cap;
};

static struct graph_cond_state *cond_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_GRAPH_COND);
}

/* The records only: the bodies' ids are handles, their graphs the driver's. */
static void graph_cond_teardown(struct srv_session *s, void *state)
{
    struct graph_cond_state *c = state;

    free(c->bodies);
    c->bodies = NULL;
    c->n = c->cap = 0;
}

const struct srv_component srv_graph_cond_component = {.name = "graph_cond",
                                                       .state_size =
                                                           sizeof(struct graph_cond_state),
                                                       .teardown = graph_cond_teardown};

/* [graph, default value, flags] -> out[handle]; in the call's context. */
CUresult srv_op_graph_cond_handle_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_COND_HANDLE_CREATE *a = SRV_ARGS(call, GRAPH_COND_HANDLE_CREATE);
    struct srv_handle *g;
    CUgraphConditionalHandle handle;
    CUcontext ctx;
    CUresult res;

    if (call->msg->n_args < 3)
        return CUDA_ERROR_INVALID_VALUE;
    if ((g = srv_handle_get(s, a->graph, PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    s->drv.cuCtxGetCurrent(&ctx);
    res = s->drv.cuGraphConditionalHandleCreate(&handle, g->real, ctx, (unsigned)a->value,
                                                (unsigned)a->flags);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = handle;
    return res;
}

/* The body ids of a new node: graph ids, none bound yet, no two the same. */
static bool body_ids_fresh(struct srv_session *s, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (PROTO_ID_TYPE(ids[i]) != PROTO_H_GRAPH || srv_handle_get(s, ids[i], PROTO_H_GRAPH))
            return false;
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return false;
    }
    return true;
}

static bool body_bind(struct srv_session *s, uint64_t id, CUgraph real, uint64_t parent)
{
    struct graph_cond_state *c = cond_of(s);

    if (!rg_array_grow((void **)&c->bodies, &c->cap, c->n, sizeof(*c->bodies), 16))
        return false;
    if (srv_handle_put(s, id, real) != RG_OK)
        return false;
    srv_handle_get(s, id, PROTO_H_GRAPH)->borrowed = true;
    c->bodies[c->n++] = (struct body_rec){id, parent};
    return true;
}

/* CONDITIONAL node of graph id `graph` (real g): p = [handle, type, size]; payload: size new
 * graph ids for the bodies. */
CUresult srv_graph_add_conditional(struct srv_session *s, const uint64_t *p, uint64_t graph,
                                   CUgraph g, CUgraphNode *deps, size_t ndeps,
                                   const uint8_t *payload, size_t plen, CUgraphNode *node)
{
    CUgraphNodeParams np = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
    uint64_t ids[MAX_BODIES];
    CUresult res;

    if (p[2] == 0 || p[2] > MAX_BODIES || plen != 8 * p[2])
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(ids, payload, plen);
    if (!body_ids_fresh(s, ids, p[2]))
        return CUDA_ERROR_INVALID_HANDLE;
    np.conditional.handle = p[0];
    np.conditional.type = (CUgraphConditionalNodeType)p[1];
    np.conditional.size = (unsigned)p[2];
    s->drv.cuCtxGetCurrent(&np.conditional.ctx);
    res = s->drv.cuGraphAddNode(node, g, deps, NULL, ndeps, &np);
    for (size_t i = 0; res == CUDA_SUCCESS && i < p[2]; i++)
        if (!body_bind(s, ids[i], np.conditional.phGraph_out[i], graph))
            res = CUDA_ERROR_OUT_OF_MEMORY; /* the node stays; its bodies go with the graph */
    return res;
}

void srv_graph_forget(struct srv_session *s, uint64_t graph)
{
    struct graph_cond_state *c = cond_of(s);

    srv_graph_nodes_forget(s, graph);
    for (size_t i = 0; i < c->n;) {
        if (c->bodies[i].parent != graph) {
            i++;
            continue;
        }
        uint64_t id = c->bodies[i].id;
        c->bodies[i] = c->bodies[--c->n];
        srv_graph_forget(s, id); /* the body's nodes and nested bodies */
        srv_handle_del(s, id);
        i = 0; /* the recursion may have moved entries */
    }
}
