/* Device- and context-wide calls that hold no client object: resetting persisting L2 lines,
 * graph memory attributes (current and high-water marks) and trimming graph memory. */
#include "server/session.h"

CUresult srv_op_reset_l2(struct srv_session *s, struct srv_call *call)
{
    return s->drv.cuCtxResetPersistingL2Cache();
}

/* [dev, attr, set?, value] -> out[value] */
CUresult srv_op_graph_mem_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_MEM_ATTR *a = SRV_ARGS(call, GRAPH_MEM_ATTR);
    cuuint64_t v = a->value;
    CUresult res;

    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (a->set)
        return s->drv.cuDeviceSetGraphMemAttribute(s->devices[a->dev],
                                                   (CUgraphMem_attribute)a->attr, &v);
    res =
        s->drv.cuDeviceGetGraphMemAttribute(s->devices[a->dev], (CUgraphMem_attribute)a->attr, &v);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = v;
    return res;
}

CUresult srv_op_graph_mem_trim(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_MEM_TRIM *a = SRV_ARGS(call, GRAPH_MEM_TRIM);
    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    return s->drv.cuDeviceGraphMemTrim(s->devices[a->dev]);
}

/* A host function of the client's, in a captured stream or a built graph: the server's graph
 * gets a host node that does nothing, so it has the client's shape (node counts and types);
 * the client runs the function itself (graph.h). */
static void CUDA_CB placeholder(void *arg)
{
    (void)arg;
}

CUresult srv_op_host_placeholder(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_HOST_PLACEHOLDER *a = SRV_ARGS(call, HOST_PLACEHOLDER);
    CUstream st;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuLaunchHostFunc(st, placeholder, NULL);
}

CUresult srv_add_host_placeholder(struct srv_session *s, CUgraphNode *node, CUgraph g,
                                  const CUgraphNode *deps, size_t ndeps)
{
    CUDA_HOST_NODE_PARAMS p = {.fn = placeholder, .userData = NULL};

    return s->drv.cuGraphAddHostNode(node, g, deps, ndeps, &p);
}
