/* Graphs built node by node: every node is created on the server at once (so the driver checks
 * it and a memory node's address is known), with node ids minted here. Copies that touch
 * client host memory go through shadows, and host nodes keep their function on the client
 * (a placeholder node holds their place in the server's graph); see graph.h. */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"
#include "client/objects/address_ranges.h"
#include "client/api/module.h"

#define MAX_DEPS 64

CLI_EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    struct cli_graph *g;
    struct cli_call call = {CLI_ARGS(GRAPH_CREATE)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((g = cli_graph_new(PROTO_H_GRAPH)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.GRAPH_CREATE.id = g->h.id;
    call.a.GRAPH_CREATE.flags = flags;
    if ((res = cli_call_sync(&call)) != CUDA_SUCCESS) {
        cli_graph_free(g);
        return res;
    }
    *graph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult cli_graph_dep_ids(struct cli_graph *g, const CUgraphNode *deps, size_t ndeps,
                           uint64_t *ids)
{
    if (ndeps > MAX_DEPS || (ndeps > 0 && deps == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        struct cli_node *d = cli_handle_check(deps[i], PROTO_H_GRAPH_NODE);
        if (d == NULL || d->graph != g)
            return CUDA_ERROR_INVALID_VALUE;
        ids[i] = d->h.id;
    }
    return CUDA_SUCCESS;
}

CUresult cli_graph_add_node(CUgraphNode *node_p, CUgraph graph, const CUgraphNode *deps,
                            size_t ndeps, const struct node_spec *spec)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    uint64_t ids[MAX_DEPS], out[1] = {0};
    uint8_t *data;
    struct cli_handle h;
    struct cli_call call = {CLI_ARGS(GRAPH_ADD_NODE), .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (node_p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = cli_graph_dep_ids(g, deps, ndeps, ids)) != CUDA_SUCCESS)
        return res;
    if ((data = malloc(8 * ndeps + spec->payload_len + 1)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(data, ids, 8 * ndeps);
    if (spec->payload_len > 0)
        memcpy(data + 8 * ndeps, spec->payload, spec->payload_len);
    cli_handle_init(&h, PROTO_H_GRAPH_NODE);
    call.a.GRAPH_ADD_NODE.graph = g->h.id, call.a.GRAPH_ADD_NODE.node = h.id,
    call.a.GRAPH_ADD_NODE.type = spec->type;
    call.a.GRAPH_ADD_NODE.ndeps = ndeps;
    memcpy(&call.a.GRAPH_ADD_NODE.targ[0], spec->targ, sizeof(spec->targ));
    call.data = data;
    call.data_len = 8 * ndeps + spec->payload_len;
    res = cli_call_sync(&call);
    free(data);
    if (res != CUDA_SUCCESS)
        return res;
    if (spec->out != NULL)
        *spec->out = out[0];
    if ((*node_p = (CUgraphNode)cli_graph_node(g, h.id, spec->type)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

static CUresult kernel_spec(const CUDA_KERNEL_NODE_PARAMS *p, struct node_spec *spec)
{
    void *f;
    CUresult res;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    f = p->func != NULL ? (void *)p->func : (void *)p->kern;
    res = cli_pack_kernel_params(f, p->kernelParams, p->extra, &spec->targ[0],
                                 (const uint8_t **)&spec->payload, &spec->payload_len);
    if (res != CUDA_SUCCESS)
        return res;
    spec->type = CU_GRAPH_NODE_TYPE_KERNEL;
    spec->targ[1] = p->gridDimX, spec->targ[2] = p->gridDimY, spec->targ[3] = p->gridDimZ;
    spec->targ[4] = p->blockDimX, spec->targ[5] = p->blockDimY, spec->targ[6] = p->blockDimZ;
    spec->targ[7] = p->sharedMemBytes;
    spec->targ[8] = spec->payload_len;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph,
                                            const CUgraphNode *deps, size_t ndeps,
                                            const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct node_spec spec = {0};
    CUresult res = kernel_spec(p, &spec);

    return res == CUDA_SUCCESS ? cli_graph_add_node(node, graph, deps, ndeps, &spec) : res;
}

/* CUDA 11's parameters are a prefix of the v2 structure. */
CLI_EXPORT CUresult
cli_add_kernel_node_v1(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                       const CUDA_KERNEL_NODE_PARAMS_v1 *p) __asm__("cuGraphAddKernelNode");
CLI_EXPORT CUresult cli_add_kernel_node_v1(CUgraphNode *node, CUgraph graph,
                                           const CUgraphNode *deps, size_t ndeps,
                                           const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2 = {0};

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&v2, p, sizeof(*p));
    return cuGraphAddKernelNode_v2(node, graph, deps, ndeps, &v2);
}

CLI_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                         size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p,
                                         CUcontext ctx)
{
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_MEMSET};

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    spec.targ[0] = p->dst, spec.targ[1] = p->pitch, spec.targ[2] = p->value;
    spec.targ[3] = p->elementSize, spec.targ[4] = p->width, spec.targ[5] = p->height;
    return cli_graph_add_node(node, graph, deps, ndeps, &spec);
}

/* One end of a copy as [kind, value, pitch]: a device address, or a shadow of the client host
 * memory it covers (recorded in the graph's host part with direction dir). */
static CUresult copy_end(struct cli_graph *g, CUmemorytype type, CUdeviceptr dev, const void *host,
                         size_t x, size_t y, size_t pitch, size_t width, size_t height, int dir,
                         uint64_t *out)
{
    if (type == CU_MEMORYTYPE_UNIFIED)
        type = cli_dev_lookup(dev, NULL, NULL) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        host = (const void *)(uintptr_t)dev;
    if (type == CU_MEMORYTYPE_DEVICE) {
        out[0] = 0, out[1] = dev + x + y * pitch, out[2] = pitch;
        return CUDA_SUCCESS;
    }
    if (type != CU_MEMORYTYPE_HOST || host == NULL)
        return cli_unsupported("graph copy nodes with CUDA arrays");
    struct shadow_use u = {0, (uint8_t *)host + x + y * pitch, (height - 1) * pitch + width, dir};
    bool ok;
    if ((u.shadow = graph_shadow_new(u.len)) == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g->lock);
    ok = graph_host_add_use(&g->host, &u);
    pthread_mutex_unlock(&g->lock);
    out[0] = 1, out[1] = u.shadow, out[2] = pitch;
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CLI_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                         size_t ndeps, const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_MEMCPY};
    size_t h;
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (c == NULL || c->WidthInBytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->Depth > 1 || c->srcZ != 0 || c->dstZ != 0)
        return cli_unsupported("3D graph copy nodes");
    h = c->Height ? c->Height : 1;
    res =
        copy_end(g, c->srcMemoryType, c->srcDevice, c->srcHost, c->srcXInBytes, c->srcY,
                 c->srcPitch ? c->srcPitch : c->WidthInBytes, c->WidthInBytes, h, 0, &spec.targ[0]);
    if (res == CUDA_SUCCESS)
        res = copy_end(g, c->dstMemoryType, c->dstDevice, c->dstHost, c->dstXInBytes, c->dstY,
                       c->dstPitch ? c->dstPitch : c->WidthInBytes, c->WidthInBytes, h, 1,
                       &spec.targ[3]);
    if (res != CUDA_SUCCESS)
        return res;
    spec.targ[6] = c->WidthInBytes;
    spec.targ[7] = h;
    return cli_graph_add_node(node, graph, deps, ndeps, &spec);
}

CLI_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                       size_t ndeps, const CUDA_HOST_NODE_PARAMS *p)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_HOST};
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (p == NULL || p->fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = cli_graph_add_node(node, graph, deps, ndeps, &spec)) != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&g->lock);
    res = graph_host_add_fn(&g->host, p->fn, p->userData) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g->lock);
    return res;
}

CLI_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                        size_t ndeps)
{
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_EMPTY};

    return cli_graph_add_node(node, graph, deps, ndeps, &spec);
}

static CUresult event_node(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                           CUevent event, CUgraphNodeType type)
{
    struct cli_handle *e = cli_handle_check(event, PROTO_H_EVENT);
    struct node_spec spec = {.type = type};

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    spec.targ[0] = e->id;
    return cli_graph_add_node(node, graph, deps, ndeps, &spec);
}

CLI_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *node, CUgraph graph,
                                              const CUgraphNode *deps, size_t ndeps, CUevent e)
{
    return event_node(node, graph, deps, ndeps, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CLI_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *node, CUgraph graph,
                                            const CUgraphNode *deps, size_t ndeps, CUevent e)
{
    return event_node(node, graph, deps, ndeps, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CLI_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph graph,
                                             const CUgraphNode *deps, size_t ndeps, CUgraph child)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    struct cli_graph *c = cli_handle_check(child, PROTO_H_GRAPH);
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_GRAPH};
    struct graph_host merged = {0};
    CUresult res;

    if (g == NULL || c == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    spec.targ[0] = c->h.id;
    if ((res = cli_graph_add_node(node, graph, deps, ndeps, &spec)) != CUDA_SUCCESS)
        return res;
    /* The child's host part now belongs to the parent too (the child is copied into it). */
    pthread_mutex_lock(&g->lock);
    bool ok = graph_host_copy(&merged, &g->host);
    for (size_t i = 0; ok && i < c->host.nuses; i++)
        ok = graph_host_add_use(&merged, &c->host.uses[i]);
    for (size_t i = 0; ok && i < c->host.nfns; i++)
        ok = graph_host_add_fn(&merged, c->host.fns[i].fn, c->host.fns[i].data);
    if (ok) {
        graph_host_clear(&g->host);
        g->host = merged;
    } else {
        graph_host_clear(&merged);
    }
    pthread_mutex_unlock(&g->lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CLI_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph,
                                           const CUgraphNode *deps, size_t ndeps,
                                           CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC};
    uint64_t dptr = 0;
    CUresult res;

    if (p == NULL || p->bytesize == 0 || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    spec.targ[0] = p->bytesize;
    spec.targ[1] = (uint64_t)p->poolProps.location.id;
    spec.out = &dptr;
    if ((res = cli_graph_add_node(node, graph, deps, ndeps, &spec)) != CUDA_SUCCESS)
        return res;
    p->dptr = (CUdeviceptr)dptr;
    addr_range_add(MEM_DEVICE, (uintptr_t)dptr, p->bytesize, cli_ctx_current(), 0);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                          size_t ndeps, CUdeviceptr d)
{
    struct node_spec spec = {.type = CU_GRAPH_NODE_TYPE_MEM_FREE};

    spec.targ[0] = d;
    return cli_graph_add_node(node, graph, deps, ndeps, &spec);
}

/* ---- dependencies, node queries, executable-graph parameters ---------------------------- */

bool cli_graph_edges_plain(const CUgraphEdgeData *edges, size_t n)
{
    static const CUgraphEdgeData plain;

    for (size_t i = 0; edges != NULL && i < n; i++)
        if (memcmp(&edges[i], &plain, sizeof(plain)) != 0)
            return false;
    return true;
}

bool cli_graph_edge_valid(const CUgraphEdgeData *e, CUgraphNodeType from, CUgraphNodeType to)
{
    static const unsigned char zero[sizeof(e->reserved)];

    if (e->to_port != 0 || memcmp(e->reserved, zero, sizeof(zero)) != 0)
        return false;
    if (e->type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
        return e->from_port == CU_GRAPH_KERNEL_NODE_PORT_DEFAULT;
    return e->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && from == CU_GRAPH_NODE_TYPE_KERNEL &&
           to == CU_GRAPH_NODE_TYPE_KERNEL &&
           (e->from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC ||
            e->from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER);
}

/* Edge data goes along only when some edge is not a default one (a 1.1 worker refuses it). */
CLI_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode *from,
                                              const CUgraphNode *to, const CUgraphEdgeData *edges,
                                              size_t n)
{
    struct cli_graph *g = cli_handle_check(graph, PROTO_H_GRAPH);
    uint64_t ids[3 * MAX_DEPS];
    struct cli_call call = {CLI_ARGS(GRAPH_ADD_DEPS)};
    bool with_edges = !cli_graph_edges_plain(edges, n);

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n > MAX_DEPS || (n > 0 && (from == NULL || to == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        struct cli_node *a = cli_handle_check(from[i], PROTO_H_GRAPH_NODE);
        struct cli_node *b = cli_handle_check(to[i], PROTO_H_GRAPH_NODE);
        if (a == NULL || b == NULL || a->graph != g || b->graph != g ||
            (with_edges && !cli_graph_edge_valid(&edges[i], a->type, b->type)))
            return CUDA_ERROR_INVALID_VALUE;
        ids[i] = a->h.id;
        ids[n + i] = b->h.id;
    }
    if (with_edges)
        memcpy(&ids[2 * n], edges, sizeof(*edges) * n);
    call.a.GRAPH_ADD_DEPS.graph = g->h.id;
    call.a.GRAPH_ADD_DEPS.n = n;
    call.a.GRAPH_ADD_DEPS.has_edges = with_edges;
    call.data = ids;
    call.data_len = (with_edges ? 24 : 16) * n;
    return cli_call_sync(&call);
}

CLI_EXPORT CUresult cli_add_deps_v1(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                    size_t n) __asm__("cuGraphAddDependencies");
CLI_EXPORT CUresult cli_add_deps_v1(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                    size_t n)
{
    return cuGraphAddDependencies_v2(g, from, to, NULL, n);
}

CLI_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    struct cli_node *n = cli_handle_check(node, PROTO_H_GRAPH_NODE);

    if (n == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (type == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                      const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct node_spec spec = {0};
    struct cli_call call = {CLI_ARGS(GRAPH_EXEC_KERNEL_SET)};
    CUresult res;

    if (!cli_exec_node_ids(exec, node, &call.a.GRAPH_EXEC_KERNEL_SET.exec,
                           &call.a.GRAPH_EXEC_KERNEL_SET.node))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = kernel_spec(p, &spec)) != CUDA_SUCCESS)
        return res;
    memcpy(&call.a.GRAPH_EXEC_KERNEL_SET.kernel[0], spec.targ, 9 * sizeof(uint64_t));
    call.data = spec.payload;
    call.data_len = spec.payload_len;
    return cli_call_async(&call);
}

CLI_EXPORT CUresult cli_exec_kernel_set_v1(
    CUgraphExec exec, CUgraphNode node,
    const CUDA_KERNEL_NODE_PARAMS_v1 *p) __asm__("cuGraphExecKernelNodeSetParams");
CLI_EXPORT CUresult cli_exec_kernel_set_v1(CUgraphExec exec, CUgraphNode node,
                                           const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2 = {0};

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&v2, p, sizeof(*p));
    return cuGraphExecKernelNodeSetParams_v2(exec, node, &v2);
}
