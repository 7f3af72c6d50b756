/* cuGraphAddNode, the one entry point for every node type (each type goes through its own
 * cuGraphAdd*Node code in graph_nodes.c), and conditional nodes: their handles, and the body
 * graphs the driver makes for each conditional node. A body is a client graph mapped to the
 * server's driver-owned body graph; it belongs to its node (phGraph_out points into the node
 * object), cannot be destroyed on its own and goes when its graph is destroyed. */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

#define MAX_BODIES 256
#define MAX_EDGES  64 /* as GRAPH_ADD_DEPS takes */

_Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS),
               "the v3 kernel node parameters are the v2 ones");

/* The handle value is the driver's own: kernels take it by value and set it on the device. */
CLI_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *handle, CUgraph graph,
                                                   CUcontext ctx, unsigned int default_value,
                                                   unsigned int flags)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    struct cli_ctx *c = ctx != NULL ? cli_handle_check(ctx, PROTO_H_CTX) : NULL;
    uint64_t out[1] = {0};
    struct cli_call call = {
        CLI_ARGS(GRAPH_COND_HANDLE_CREATE, .value = default_value, .flags = flags), .out = out,
        .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (g == NULL || (ctx != NULL && c == NULL))
        return CUDA_ERROR_INVALID_HANDLE;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.GRAPH_COND_HANDLE_CREATE.graph = g->h.id;
    cli_call_in(&call, c);
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout < 1)
        res = CUDA_ERROR_UNKNOWN;
    if (res == CUDA_SUCCESS)
        *handle = (CUgraphConditionalHandle)out[0];
    return res;
}

/* New client graphs for a conditional node's bodies, owned by g; NULL when out of memory. */
static CUgraph *bodies_new(struct cli_graph *g, unsigned n, uint64_t *ids)
{
    CUgraph *bodies = calloc(n, sizeof(*bodies));

    for (unsigned i = 0; bodies != NULL && i < n; i++) {
        struct cli_graph *b = cli_graph_new(PROTO_H_GRAPH);
        if (b == NULL) {
            while (i-- > 0)
                cli_graph_free((struct cli_graph *)bodies[i]);
            free(bodies);
            return NULL;
        }
        b->owner = g;
        ids[i] = b->h.id;
        bodies[i] = (CUgraph)b;
    }
    return bodies;
}

static CUresult add_conditional(CUgraphNode *node_p, CUgraph graph, const CUgraphNode *deps,
                                size_t ndeps, CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL,
                             .targ = {p->handle, p->type, p->size}};
    uint64_t ids[MAX_BODIES];
    struct cli_node *n;
    CUgraph *bodies;
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (p->size == 0 || p->size > MAX_BODIES)
        return p->size == 0 ? CUDA_ERROR_INVALID_VALUE : cli_unsupported("switch nodes of 256+");
    if ((bodies = bodies_new(g, p->size, ids)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    spec.payload = ids;
    spec.payload_len = 8 * p->size;
    res = cli_graph_add_node(node_p, graph, deps, ndeps, &spec);
    n = res == CUDA_SUCCESS ? cli_handle_check(*node_p, PROTO_H_GRAPH_NODE) : NULL;
    if (n == NULL) {
        for (unsigned i = 0; i < p->size; i++)
            cli_graph_free((struct cli_graph *)bodies[i]);
        free(bodies);
        return res != CUDA_SUCCESS ? res : CUDA_ERROR_UNKNOWN;
    }
    pthread_mutex_lock(&g->lock);
    n->bodies = bodies;
    n->nbodies = p->size;
    pthread_mutex_unlock(&g->lock);
    p->phGraph_out = bodies;
    return CUDA_SUCCESS;
}

static CUresult add_memset(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                           const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    CUDA_MEMSET_NODE_PARAMS mp = {.dst = p->dst,
                                  .pitch = p->pitch,
                                  .value = p->value,
                                  .elementSize = p->elementSize,
                                  .width = p->width,
                                  .height = p->height};

    return cuGraphAddMemsetNode(node, graph, deps, ndeps, &mp, p->ctx);
}

static CUresult add_mem_alloc(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                              size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS_v2 *p)
{
    CUDA_MEM_ALLOC_NODE_PARAMS ap = {.poolProps = p->poolProps,
                                     .accessDescs = p->accessDescs,
                                     .accessDescCount = p->accessDescCount,
                                     .bytesize = p->bytesize};
    CUresult res = cuGraphAddMemAllocNode(node, graph, deps, ndeps, &ap);

    if (res == CUDA_SUCCESS)
        p->dptr = ap.dptr;
    return res;
}

static CUresult add_any(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                        CUgraphNodeParams *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return cuGraphAddKernelNode(node, graph, deps, ndeps,
                                    (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphAddMemcpyNode(node, graph, deps, ndeps, &p->memcpy.copyParams,
                                    p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return add_memset(node, graph, deps, ndeps, &p->memset);
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS hp = {.fn = p->host.fn, .userData = p->host.userData};
        return cuGraphAddHostNode(node, graph, deps, ndeps, &hp);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return cli_unsupported("child graph nodes that take their graph (ownership move)");
        return cuGraphAddChildGraphNode(node, graph, deps, ndeps, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(node, graph, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(node, graph, deps, ndeps, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(node, graph, deps, ndeps, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return add_mem_alloc(node, graph, deps, ndeps, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(node, graph, deps, ndeps, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return add_conditional(node, graph, deps, ndeps, &p->conditional);
    default:
        return cli_unsupported("graph nodes of this type (semaphores, batch memory ops)");
    }
}

CLI_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                      const CUgraphEdgeData *edges, size_t ndeps,
                                      CUgraphNodeParams *params)
{
    CUgraphNode to[MAX_EDGES];
    CUresult res;

    if (params == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (cli_graph_edges_plain(edges, ndeps))
        return add_any(node, graph, deps, ndeps, params);
    /* Programmatic edges (XLA's command buffers): the node, then its edges with their data,
     * which the driver takes alike; checked first so that a refusal leaves no node behind. */
    if (ndeps > MAX_EDGES || deps == NULL || node == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        struct cli_node *d = cli_handle_check(deps[i], PROTO_H_GRAPH_NODE);
        if (d == NULL || !cli_graph_edge_valid(&edges[i], d->type, params->type))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if ((res = add_any(node, graph, NULL, 0, params)) != CUDA_SUCCESS)
        return res;
    for (size_t i = 0; i < ndeps; i++)
        to[i] = *node;
    return cuGraphAddDependencies_v2(graph, deps, to, edges, ndeps);
}

/* CUDA 12.2's form, without edge data. */
CLI_EXPORT CUresult cli_graph_add_node_v1(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                          size_t ndeps,
                                          CUgraphNodeParams *params) __asm__("cuGraphAddNode");
CLI_EXPORT CUresult cli_graph_add_node_v1(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                          size_t ndeps, CUgraphNodeParams *params)
{
    return cuGraphAddNode_v2(node, graph, deps, NULL, ndeps, params);
}
