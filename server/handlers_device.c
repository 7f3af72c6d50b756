/* Device- and context-wide calls that hold no client object: resetting persisting L2 lines,
 * graph memory attributes (current and high-water marks) and trimming graph memory. */
#include "server/session.h"

#define ARG(i) (call->msg->args[i])

static CUresult h_reset_l2(struct srv_session *s, struct srv_call *call)
{
    return s->drv.cuCtxResetPersistingL2Cache();
}

/* [dev, attr, set?, value] -> out[value] */
static CUresult h_graph_mem_attr(struct srv_session *s, struct srv_call *call)
{
    cuuint64_t v = ARG(3);
    CUresult res;

    if (ARG(0) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (ARG(2))
        return s->drv.cuDeviceSetGraphMemAttribute(s->devices[ARG(0)],
                                                   (CUgraphMem_attribute)ARG(1), &v);
    res = s->drv.cuDeviceGetGraphMemAttribute(s->devices[ARG(0)], (CUgraphMem_attribute)ARG(1),
                                              &v);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = v;
    return res;
}

static CUresult h_graph_mem_trim(struct srv_session *s, struct srv_call *call)
{
    if (ARG(0) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    return s->drv.cuDeviceGraphMemTrim(s->devices[ARG(0)]);
}

/* A host function of the client's, in a captured stream or a built graph: the server's graph
 * gets a host node that does nothing, so it has the client's shape (node counts and types);
 * the client runs the function itself (graph.h). */
static void CUDA_CB placeholder(void *arg)
{
    (void)arg;
}

static CUresult h_host_placeholder(struct srv_session *s, struct srv_call *call)
{
    CUstream st;

    if (!srv_stream(s, ARG(0), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuLaunchHostFunc(st, placeholder, NULL);
}

CUresult srv_add_host_placeholder(struct srv_session *s, CUgraphNode *node, CUgraph g,
                                  const CUgraphNode *deps, size_t ndeps)
{
    CUDA_HOST_NODE_PARAMS p = {.fn = placeholder, .userData = NULL};

    return s->drv.cuGraphAddHostNode(node, g, deps, ndeps, &p);
}

const srv_handler_fn srv_device_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_CTX_RESET_L2] = h_reset_l2,
    [PROTO_OP_GRAPH_MEM_ATTR] = h_graph_mem_attr,
    [PROTO_OP_GRAPH_MEM_TRIM] = h_graph_mem_trim,
    [PROTO_OP_HOST_PLACEHOLDER] = h_host_placeholder,
};
