/* A graph's structure as the driver knows it: its root nodes, a node's dependencies and its
 * dependent nodes, with edge data (GRAPH_NODE_QUERY). The server keeps the edges, captured ones
 * included, so the client asks rather than keeping a second copy. XLA counts a traced command
 * buffer's roots to tell it is not empty. */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

enum { QUERY_ROOTS, QUERY_DEPENDENCIES, QUERY_DEPENDENTS };
#define QUERY_MAX 1024 /* as the server lists */

/* With nodes, *num in is their room, out what was filled (the rest set to NULL); without,
 * out is how many there are. Edge data comes with them when edges is not NULL; without it,
 * an edge that is not a default one makes the query lossy, as natively. */
static CUresult node_query(struct cli_graph *g, uint64_t node, unsigned what, CUgraphNode *nodes,
                           CUgraphEdgeData *edges, size_t *num)
{
    size_t room = nodes == NULL ? 0 : (*num < QUERY_MAX ? *num : QUERY_MAX);
    struct cli_call call = {
        CLI_ARGS(GRAPH_NODE_QUERY, .graph = g->h.id, .node = node, .what = what, .max = room)};
    uint64_t *out = calloc(1 + 3 * room, sizeof(*out));
    bool lossy = false;
    CUresult res;

    if (out == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.out = out;
    call.out_cap = 1 + 3 * room;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout < 1 + 3 * (out[0] < room ? out[0] : room))
        res = CUDA_ERROR_UNKNOWN;
    for (size_t i = 0; res == CUDA_SUCCESS && i < room; i++) {
        CUgraphNode n = NULL;
        CUgraphEdgeData e = {0};
        if (i < out[0]) {
            n = (CUgraphNode)cli_graph_node(g, out[1 + 3 * i], (CUgraphNodeType)out[2 + 3 * i]);
            memcpy(&e, &out[3 + 3 * i], sizeof(e));
            lossy |= !cli_graph_edges_plain(&e, 1);
            if (n == NULL)
                res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        nodes[i] = n;
        if (edges != NULL)
            edges[i] = e;
    }
    if (res == CUDA_SUCCESS && lossy && edges == NULL)
        res = CUDA_ERROR_LOSSY_QUERY; /* as the driver: edge data asked without room for it */
    if (res == CUDA_SUCCESS)
        *num = nodes == NULL || out[0] < room ? (size_t)out[0] : room;
    free(out);
    return res;
}

CLI_EXPORT CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode *roots, size_t *num)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (num == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return node_query(g, 0, QUERY_ROOTS, roots, NULL, num);
}

static CUresult node_neighbours(CUgraphNode node, unsigned what, CUgraphNode *nodes,
                                CUgraphEdgeData *edges, size_t *num)
{
    struct cli_node *n = cli_handle_check(node, PROTO_H_GRAPH_NODE);

    if (n == NULL || num == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return node_query(n->graph, n->h.id, what, nodes, edges, num);
}

CLI_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode *deps,
                                                  CUgraphEdgeData *edges, size_t *num)
{
    return node_neighbours(node, QUERY_DEPENDENCIES, deps, edges, num);
}

CLI_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode *dependents,
                                                    CUgraphEdgeData *edges, size_t *num)
{
    return node_neighbours(node, QUERY_DEPENDENTS, dependents, edges, num);
}

/* CUDA 12's forms, without edge data. */
CLI_EXPORT CUresult cli_node_deps_v1(CUgraphNode node, CUgraphNode *deps,
                                     size_t *num) __asm__("cuGraphNodeGetDependencies");
CLI_EXPORT CUresult cli_node_deps_v1(CUgraphNode node, CUgraphNode *deps, size_t *num)
{
    return node_neighbours(node, QUERY_DEPENDENCIES, deps, NULL, num);
}

CLI_EXPORT CUresult cli_node_dependents_v1(CUgraphNode node, CUgraphNode *dependents,
                                           size_t *num) __asm__("cuGraphNodeGetDependentNodes");
CLI_EXPORT CUresult cli_node_dependents_v1(CUgraphNode node, CUgraphNode *dependents, size_t *num)
{
    return node_neighbours(node, QUERY_DEPENDENTS, dependents, NULL, num);
}
