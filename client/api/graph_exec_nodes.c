/* Nodes of an executable graph changed in place: memset, device copy and child graph
 * parameters, and nodes enabled or disabled (XLA's command buffers update their graphs so
 * between runs). Kernel nodes are in graph_nodes.c. Parameters go without waiting, as a
 * launch: the driver's refusal comes back at the next synchronizing call. Host memory stays out:
 * a copy to or from it, or a child graph with host nodes, would change the executable graph's
 * host part (graph_host.c), which the client keeps from its instantiation. */
#include "client/api/graph.h"

bool cli_exec_node_ids(CUgraphExec exec, CUgraphNode node, uint64_t *exec_id, uint64_t *node_id)
{
    struct cli_handle *e = cli_handle_check(exec, PROTO_H_GRAPH_EXEC);
    struct cli_node *n = cli_handle_check(node, PROTO_H_GRAPH_NODE);

    if (e == NULL || n == NULL)
        return false;
    *exec_id = e->id;
    *node_id = n->h.id;
    return true;
}

static CUresult node_set(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type,
                         const uint64_t *targ, size_t ntarg)
{
    struct cli_call call = {CLI_ARGS(GRAPH_EXEC_NODE_SET, .type = type)};

    if (!cli_exec_node_ids(exec, node, &call.a.GRAPH_EXEC_NODE_SET.exec,
                           &call.a.GRAPH_EXEC_NODE_SET.node))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ntarg; i++)
        call.a.GRAPH_EXEC_NODE_SET.targ[i] = targ[i];
    return cli_call_async(&call);
}

CLI_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t targ[6] = {p->dst, p->pitch, p->value, p->elementSize, p->width, p->height};
    return node_set(exec, node, CU_GRAPH_NODE_TYPE_MEMSET, targ, 6);
}

/* One end of a device copy as GRAPH_ADD_NODE's [kind 0, address, pitch]. */
static bool device_end(CUmemorytype type, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                       uint64_t *out)
{
    if (type == CU_MEMORYTYPE_UNIFIED && cli_dev_lookup(dev, NULL, NULL))
        type = CU_MEMORYTYPE_DEVICE;
    out[0] = 0, out[1] = dev + x + y * pitch, out[2] = pitch;
    return type == CU_MEMORYTYPE_DEVICE;
}

CLI_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    uint64_t targ[8];

    if (c == NULL || c->WidthInBytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->Depth > 1 || c->srcZ != 0 || c->dstZ != 0)
        return cli_unsupported("3D graph copy nodes");
    if (!device_end(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY,
                    c->srcPitch ? c->srcPitch : c->WidthInBytes, &targ[0]) ||
        !device_end(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY,
                    c->dstPitch ? c->dstPitch : c->WidthInBytes, &targ[3]))
        return cli_unsupported("host memory in a copy node set in an executable graph");
    targ[6] = c->WidthInBytes;
    targ[7] = c->Height ? c->Height : 1;
    return node_set(exec, node, CU_GRAPH_NODE_TYPE_MEMCPY, targ, 8);
}

CLI_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                       CUgraph child)
{
    struct cli_graph *c = cli_handle_check(child, PROTO_H_GRAPH);
    uint64_t targ[1];

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->host.nuses > 0 || c->host.nfns > 0)
        return cli_unsupported("a child graph with host nodes or host copies set in an "
                               "executable graph");
    targ[0] = c->h.id;
    return node_set(exec, node, CU_GRAPH_NODE_TYPE_GRAPH, targ, 1);
}

static CUresult node_enable(CUgraphExec exec, CUgraphNode node, unsigned enable, uint64_t *out)
{
    struct cli_call call = {CLI_ARGS(GRAPH_EXEC_NODE_ENABLE, .enable = enable)};

    if (!cli_exec_node_ids(exec, node, &call.a.GRAPH_EXEC_NODE_ENABLE.exec,
                           &call.a.GRAPH_EXEC_NODE_ENABLE.node))
        return CUDA_ERROR_INVALID_VALUE;
    call.out = out;
    call.out_cap = out != NULL;
    return cli_call_sync(&call);
}

CLI_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned enabled)
{
    return node_enable(exec, node, enabled != 0, NULL);
}

CLI_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned *enabled)
{
    uint64_t out[1] = {0};
    CUresult res;

    if (enabled == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = node_enable(exec, node, 2, out)) == CUDA_SUCCESS)
        *enabled = (unsigned)out[0];
    return res;
}
