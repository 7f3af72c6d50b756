/* Graphs built node by node (cuGraphCreate, cuGraphAdd*Node, dependencies, clone, node lists,
 * executable-graph kernel parameters and update) and shadow buffers: pinned host memory on the
 * server that stands in for the client's host memory in graph copies. A graph copy node (or a
 * copy captured from a stream) names a shadow; the client fills HtoD shadows before each launch
 * (SHADOW_WRITE) and reads DtoH shadows after it (SHADOW_READ), both ordered after the earlier
 * work of the launch stream. */
#include <string.h>

#include "server/session.h"

/* The component's state: the ids it mints for nodes the client never named. */
struct graph_nodes_state {
    uint64_t minted;
};

static void graph_nodes_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_SHADOW);
}

const struct srv_component srv_graph_nodes_component = {.name = "graph_nodes",
                                                        .state_size =
                                                            sizeof(struct graph_nodes_state),
                                                        .teardown = graph_nodes_teardown};

/* ---- shadows ---------------------------------------------------------------------------- */

CUresult srv_op_shadow_alloc(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SHADOW_ALLOC *a = SRV_ARGS(call, SHADOW_ALLOC);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    void *p;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_SHADOW || a->size == 0 || a->size > (1ull << 34))
        return CUDA_ERROR_INVALID_VALUE;
    if (!srv_quota_charge(s, a->size)) /* pinned host memory: charged like device memory */
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Shadows are made while a stream captures, where a global-mode capture would forbid
     * (and be invalidated by) an allocation: relax this thread's mode around it. */
    s->drv.cuThreadExchangeStreamCaptureMode(&mode);
    res = s->drv.cuMemHostAlloc(&p, a->size, CU_MEMHOSTALLOC_PORTABLE);
    s->drv.cuThreadExchangeStreamCaptureMode(&mode);
    if ((res = srv_handle_adopt(s, a->id, PROTO_H_SHADOW, res, p)) != CUDA_SUCCESS) {
        srv_quota_release(s, a->size);
        return res;
    }
    srv_handle_get(s, a->id, PROTO_H_SHADOW)->size = a->size; /* released with it */
    return CUDA_SUCCESS;
}

CUresult srv_op_shadow_free(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SHADOW_FREE *a = SRV_ARGS(call, SHADOW_FREE);
    return srv_handle_destroy(s, a->shadow, PROTO_H_SHADOW);
}

/* [off, off+len) of a shadow, or NULL. */
static uint8_t *shadow_range(struct srv_session *s, uint64_t id, uint64_t off, uint64_t len)
{
    struct srv_handle *h = srv_handle_get(s, id, PROTO_H_SHADOW);

    if (h == NULL || off > h->size || len > h->size - off)
        return NULL;
    return (uint8_t *)h->real + off;
}

CUresult srv_op_memcpy_shadow(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_SHADOW *a = SRV_ARGS(call, MEMCPY_SHADOW);
    uint8_t *p = shadow_range(s, a->shadow, a->offset, a->len);
    CUstream st;

    if (p == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_VALUE;
    if (a->dir == 0)
        return s->drv.cuMemcpyHtoDAsync(a->dptr, p, a->len, st);
    return s->drv.cuMemcpyDtoHAsync(p, a->dptr, a->len, st);
}

CUresult srv_op_shadow_write(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SHADOW_WRITE *a = SRV_ARGS(call, SHADOW_WRITE);
    uint8_t *p = shadow_range(s, a->shadow, a->offset, a->len);
    CUstream st;
    CUresult res;

    if (p == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuStreamSynchronize(st); /* the previous launch may still read it */
    if (srv_recv_input(s, call, p, a->len) != RG_OK)
        return call->bulk_taken ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_INVALID_VALUE;
    return res;
}

CUresult srv_op_shadow_read(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_SHADOW_READ *a = SRV_ARGS(call, SHADOW_READ);
    uint8_t *p = shadow_range(s, a->shadow, a->offset, a->len);
    CUstream st;
    CUresult res;

    if (p == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = s->drv.cuStreamSynchronize(st)) != CUDA_SUCCESS)
        return res;
    return srv_reply_bulk(s, call, p, a->len);
}

/* ---- graphs built node by node ---------------------------------------------------------- */

CUresult srv_op_graph_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_CREATE *a = SRV_ARGS(call, GRAPH_CREATE);
    CUgraph g;
    CUresult res;

    if (PROTO_ID_TYPE(a->id) != PROTO_H_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphCreate(&g, (unsigned)a->flags);
    return srv_handle_adopt(s, a->id, PROTO_H_GRAPH, res, g);
}

/* Bind a node the driver made to a wire id; nodes belong to their graph. */
static CUresult node_bind(struct srv_session *s, uint64_t id, CUgraphNode node, uint64_t graph)
{
    struct srv_handle *h;

    if (PROTO_ID_TYPE(id) != PROTO_H_GRAPH_NODE || srv_handle_put(s, id, node) != RG_OK)
        return CUDA_ERROR_INVALID_HANDLE;
    h = srv_handle_get(s, id, PROTO_H_GRAPH_NODE);
    h->borrowed = true;
    h->size = graph; /* node handles record their graph (srv_graph_nodes_forget) */
    return CUDA_SUCCESS;
}

void srv_graph_nodes_forget(struct srv_session *s, uint64_t graph)
{
    /* A deletion shifts a later entry of the probe chain into slot i: look at i again. */
    for (size_t i = 0; i < s->handle_cap;) {
        struct srv_handle *h = &s->handles[i];
        if (h->id != 0 && PROTO_ID_TYPE(h->id) == PROTO_H_GRAPH_NODE && h->size == graph)
            srv_handle_del(s, h->id);
        else
            i++;
    }
}

CUresult srv_graph_nodes_of(struct srv_session *s, const uint8_t *ids, size_t n, CUgraphNode *out)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        struct srv_handle *h;
        memcpy(&id, ids + 8 * i, 8);
        if ((h = srv_handle_get(s, id, PROTO_H_GRAPH_NODE)) == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        out[i] = h->real;
    }
    return CUDA_SUCCESS;
}

/* Kernel arguments [f, gx,gy,gz, bx,by,bz, shmem, params_len] at args[a] and the packed
 * parameters at pbuf: a CUDA_KERNEL_NODE_PARAMS whose kernelParams live in session scratch. */
static CUresult kernel_params(struct srv_session *s, const uint64_t *a, const uint8_t *pbuf,
                              size_t plen, CUDA_KERNEL_NODE_PARAMS *kp)
{
    void *f;
    CUresult res;

    memset(kp, 0, sizeof(*kp));
    if (a[8] != plen)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = srv_param_pointers(s, a[0], pbuf, plen, &f, &kp->kernelParams)) != CUDA_SUCCESS)
        return res;
    if (PROTO_ID_TYPE(a[0]) == PROTO_H_KERNEL)
        kp->kern = f; /* run in the current context */
    else
        kp->func = f;
    kp->gridDimX = (unsigned)a[1], kp->gridDimY = (unsigned)a[2], kp->gridDimZ = (unsigned)a[3];
    kp->blockDimX = (unsigned)a[4], kp->blockDimY = (unsigned)a[5], kp->blockDimZ = (unsigned)a[6];
    kp->sharedMemBytes = (unsigned)a[7];
    return CUDA_SUCCESS;
}

/* The bytes a pitched copy of height rows of width bytes spans from its start: the last row
 * starts at (height - 1) * pitch. False when it overflows or rows overlap (width > pitch). */
static bool pitched_extent(uint64_t width, uint64_t height, uint64_t pitch, uint64_t *bytes_p)
{
    if (width == 0 || height == 0) {
        *bytes_p = 0;
        return true;
    }
    if (height > 1 && width > pitch)
        return false;
    if (height - 1 > (UINT64_MAX - width) / (pitch ? pitch : 1))
        return false;
    *bytes_p = (height - 1) * pitch + width;
    return true;
}

/* One copy endpoint: kind 0 = device address, 1 = shadow id, which must hold the whole
 * width x height range at the given pitch. */
static bool copy_end(struct srv_session *s, const uint64_t *end, uint64_t width, uint64_t height,
                     CUmemorytype *type, CUdeviceptr *dev, void **host, size_t *pitch_out)
{
    uint64_t bytes;

    *pitch_out = end[2];
    if (end[0] == 0) {
        *type = CU_MEMORYTYPE_DEVICE;
        *dev = end[1];
        return true;
    }
    *type = CU_MEMORYTYPE_HOST;
    if (!pitched_extent(width, height, end[2], &bytes))
        return false;
    return (*host = shadow_range(s, end[1], 0, bytes)) != NULL;
}

/* A MEMCPY node's copy: [srckind, src, srcpitch, dstkind, dst, dstpitch, width, height]. */
static bool memcpy_params(struct srv_session *s, const uint64_t *p, CUDA_MEMCPY3D *c)
{
    *c = (CUDA_MEMCPY3D){.WidthInBytes = p[6], .Height = p[7], .Depth = 1};
    return copy_end(s, &p[0], p[6], p[7], &c->srcMemoryType, &c->srcDevice, (void **)&c->srcHost,
                    &c->srcPitch) &&
           copy_end(s, &p[3], p[6], p[7], &c->dstMemoryType, &c->dstDevice, &c->dstHost,
                    &c->dstPitch);
}

static CUDA_MEMSET_NODE_PARAMS memset_params(const uint64_t *p)
{
    return (CUDA_MEMSET_NODE_PARAMS){.dst = p[0],
                                     .pitch = p[1],
                                     .value = (unsigned)p[2],
                                     .elementSize = (unsigned)p[3],
                                     .width = p[4],
                                     .height = p[5]};
}

static CUresult add_memcpy(struct srv_session *s, const uint64_t *p, CUgraph g, CUgraphNode *deps,
                           size_t ndeps, CUgraphNode *node)
{
    CUDA_MEMCPY3D c;
    CUcontext ctx;

    if (!memcpy_params(s, p, &c))
        return CUDA_ERROR_INVALID_VALUE;
    s->drv.cuCtxGetCurrent(&ctx);
    return s->drv.cuGraphAddMemcpyNode(node, g, deps, ndeps, &c, ctx);
}

/* MEM_ALLOC node: [bytes, dev] -> out[dptr]; charged to the quota, released with the graph. */
static CUresult add_mem_alloc(struct srv_session *s, struct srv_call *call, CUgraph g,
                              CUgraphNode *deps, size_t ndeps, CUgraphNode *node)
{
    const struct proto_args_GRAPH_ADD_NODE *a = SRV_ARGS(call, GRAPH_ADD_NODE);
    const uint64_t *p = a->targ;
    CUDA_MEM_ALLOC_NODE_PARAMS ap = {.bytesize = p[0]};
    CUresult res;

    if (p[1] >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!srv_quota_charge(s, p[0])) /* released with the graph (srv_handle_destroy) */
        return CUDA_ERROR_OUT_OF_MEMORY;
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, s->devices[p[1]]};
    res = s->drv.cuGraphAddMemAllocNode(node, g, deps, ndeps, &ap);
    if (res != CUDA_SUCCESS) {
        srv_quota_release(s, p[0]);
        return res;
    }
    srv_handle_get(s, a->graph, PROTO_H_GRAPH)->size += p[0];
    call->out[call->nout++] = ap.dptr;
    return res;
}

static CUresult add_typed(struct srv_session *s, struct srv_call *call, CUgraph g,
                          CUgraphNode *deps, size_t ndeps, const uint8_t *payload, size_t plen,
                          CUgraphNode *node)
{
    const struct proto_args_GRAPH_ADD_NODE *a = SRV_ARGS(call, GRAPH_ADD_NODE);
    const uint64_t *p = a->targ;
    struct srv_handle *h;

    switch (a->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS kp;
        CUresult res = kernel_params(s, p, payload, plen, &kp);
        return res != CUDA_SUCCESS ? res : s->drv.cuGraphAddKernelNode(node, g, deps, ndeps, &kp);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS mp = memset_params(p);
        CUcontext ctx;
        s->drv.cuCtxGetCurrent(&ctx);
        return s->drv.cuGraphAddMemsetNode(node, g, deps, ndeps, &mp, ctx);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return add_memcpy(s, p, g, deps, ndeps, node);
    case CU_GRAPH_NODE_TYPE_HOST: /* the function runs on the client: a placeholder here */
        return srv_add_host_placeholder(s, node, g, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return s->drv.cuGraphAddEmptyNode(node, g, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        if ((h = srv_handle_get(s, p[0], PROTO_H_EVENT)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        return a->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT
                   ? s->drv.cuGraphAddEventWaitNode(node, g, deps, ndeps, h->real)
                   : s->drv.cuGraphAddEventRecordNode(node, g, deps, ndeps, h->real);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if ((h = srv_handle_get(s, p[0], PROTO_H_GRAPH)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        return s->drv.cuGraphAddChildGraphNode(node, g, deps, ndeps, h->real);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return add_mem_alloc(s, call, g, deps, ndeps, node);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return s->drv.cuGraphAddMemFreeNode(node, g, deps, ndeps, p[0]);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return srv_graph_add_conditional(s, p, a->graph, g, deps, ndeps, payload, plen, node);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* [graph, node id, CUgraphNodeType, ndeps, type args...]; data: ndeps node ids, then the
 * type's payload (kernel parameters). */
CUresult srv_op_graph_add_node(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_ADD_NODE *a = SRV_ARGS(call, GRAPH_ADD_NODE);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    const ProtobufCBinaryData *d = &call->msg->data;
    size_t ndeps = a->ndeps;
    const uint8_t *payload;
    CUgraphNode deps[64], node;
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ndeps > 64 || d->len < 8 * ndeps || call->msg->n_args < 16)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = srv_graph_nodes_of(s, d->data, ndeps, deps)) != CUDA_SUCCESS)
        return res;
    payload = d->len > 8 * ndeps ? d->data + 8 * ndeps : NULL; /* no data: no pointer to offset */
    res = add_typed(s, call, g->real, deps, ndeps, payload, d->len - 8 * ndeps, &node);
    return res == CUDA_SUCCESS ? node_bind(s, a->node, node, a->graph) : res;
}

/* [graph, n]; data: n "from" ids, then n "to" ids. */
CUresult srv_op_graph_add_deps(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_ADD_DEPS *a = SRV_ARGS(call, GRAPH_ADD_DEPS);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    size_t n = a->n;
    CUgraphNode from[64], to[64];
    CUgraphEdgeData edges[64];
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n > 64 || call->msg->data.len != (a->has_edges ? 24 : 16) * n)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = srv_graph_nodes_of(s, call->msg->data.data, n, from)) != CUDA_SUCCESS ||
        (res = srv_graph_nodes_of(s, call->msg->data.data + 8 * n, n, to)) != CUDA_SUCCESS)
        return res;
    if (a->has_edges)
        memcpy(edges, call->msg->data.data + 16 * n, sizeof(edges[0]) * n);
    return s->drv.cuGraphAddDependencies(g->real, from, to, a->has_edges ? edges : NULL, n);
}

CUresult srv_op_graph_clone(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_CLONE *a = SRV_ARGS(call, GRAPH_CLONE);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    CUgraph clone;
    CUresult res;

    if (g == NULL || PROTO_ID_TYPE(a->id) != PROTO_H_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphClone(&clone, g->real);
    return srv_handle_adopt(s, a->id, PROTO_H_GRAPH, res, clone);
}

uint64_t srv_graph_node_id(struct srv_session *s, CUgraphNode node, uint64_t graph)
{
    struct graph_nodes_state *st = srv_component_state(s, SRV_COMP_GRAPH_NODES);
    uint64_t id;

    for (size_t i = 0; i < s->handle_cap; i++)
        if (s->handles[i].id != 0 && PROTO_ID_TYPE(s->handles[i].id) == PROTO_H_GRAPH_NODE &&
            s->handles[i].real == node && s->handles[i].size == graph)
            return s->handles[i].id;
    id = PROTO_ID_SERVER | (++st->minted << 4) | PROTO_H_GRAPH_NODE;
    return node_bind(s, id, node, graph) == CUDA_SUCCESS ? id : 0;
}

/* [graph] -> out[n, id0, type0, id1, type1, ...] (at most 1024 nodes). */
CUresult srv_op_graph_get_nodes(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_GET_NODES *a = SRV_ARGS(call, GRAPH_GET_NODES);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    size_t n = 0;
    CUgraphNode *nodes;
    CUresult res;

    if (g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = s->drv.cuGraphGetNodes(g->real, NULL, &n)) != CUDA_SUCCESS)
        return res;
    if (n > 1024)
        return CUDA_ERROR_NOT_SUPPORTED;
    nodes = srv_scratch(s, (n + 1) * sizeof(*nodes));
    call->out_ext = calloc(1 + 2 * n, sizeof(uint64_t));
    if (nodes == NULL || call->out_ext == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = s->drv.cuGraphGetNodes(g->real, nodes, &n)) != CUDA_SUCCESS)
        return res;
    call->out_ext[0] = n;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
        s->drv.cuGraphNodeGetType(nodes[i], &type);
        call->out_ext[1 + 2 * i] = srv_graph_node_id(s, nodes[i], a->graph);
        call->out_ext[2 + 2 * i] = type;
    }
    call->nout = 1 + 2 * n;
    return CUDA_SUCCESS;
}

/* The nodes GRAPH_NODE_QUERY asks for, with their edge data (NULL edges: roots have none). */
static CUresult node_query(struct srv_session *s, unsigned what, CUgraph g, CUgraphNode node,
                           CUgraphNode *nodes, CUgraphEdgeData *edges, size_t *n)
{
    switch (what) {
    case 0:
        return s->drv.cuGraphGetRootNodes(g, nodes, n);
    case 1:
        return s->drv.cuGraphNodeGetDependencies(node, nodes, edges, n);
    case 2:
        return s->drv.cuGraphNodeGetDependentNodes(node, nodes, edges, n);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult srv_op_graph_node_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_NODE_QUERY *a = SRV_ARGS(call, GRAPH_NODE_QUERY);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    struct srv_handle *nd = a->what == 0 ? NULL : srv_handle_get(s, a->node, PROTO_H_GRAPH_NODE);
    CUgraphNode node = nd != NULL ? nd->real : NULL, *nodes;
    CUgraphEdgeData *edges;
    size_t n = 0, m;
    CUresult res;

    if (g == NULL || (a->what != 0 && (nd == NULL || nd->size != a->graph)))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = node_query(s, a->what, g->real, node, NULL, NULL, &n)) != CUDA_SUCCESS)
        return res;
    if (n > 1024)
        return CUDA_ERROR_NOT_SUPPORTED;
    m = n < a->max ? n : a->max;
    nodes = srv_scratch(s, (n + 1) * (sizeof(*nodes) + sizeof(*edges)));
    call->out_ext = calloc(1 + 3 * m, sizeof(uint64_t));
    if (nodes == NULL || call->out_ext == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    edges = (CUgraphEdgeData *)(nodes + n + 1);
    memset(edges, 0, (n + 1) * sizeof(*edges));
    if (n > 0 && (res = node_query(s, a->what, g->real, node, nodes, a->what ? edges : NULL, &n)) !=
                     CUDA_SUCCESS)
        return res;
    call->out_ext[0] = n;
    for (size_t i = 0; i < m && i < n; i++) {
        CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
        s->drv.cuGraphNodeGetType(nodes[i], &type);
        call->out_ext[1 + 3 * i] = srv_graph_node_id(s, nodes[i], a->graph);
        call->out_ext[2 + 3 * i] = type;
        memcpy(&call->out_ext[3 + 3 * i], &edges[i], sizeof(edges[i]));
    }
    call->nout = 1 + 3 * m;
    return CUDA_SUCCESS;
}

/* [exec, node, f, gx,gy,gz, bx,by,bz, shmem, params_len]; data: the packed parameters. */
CUresult srv_op_exec_kernel_set(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_EXEC_KERNEL_SET *a = SRV_ARGS(call, GRAPH_EXEC_KERNEL_SET);
    struct srv_handle *e = srv_handle_get(s, a->exec, PROTO_H_GRAPH_EXEC);
    struct srv_handle *n = srv_handle_get(s, a->node, PROTO_H_GRAPH_NODE);
    CUDA_KERNEL_NODE_PARAMS kp;
    CUresult res;

    if (e == NULL || n == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = kernel_params(s, a->kernel, call->msg->data.data, call->msg->data.len, &kp);
    return res != CUDA_SUCCESS ? res : s->drv.cuGraphExecKernelNodeSetParams(e->real, n->real, &kp);
}

/* [exec, node, type, targ...]: a memset, copy or child graph node of an executable graph
 * given new parameters (targ as GRAPH_ADD_NODE's for that type). */
CUresult srv_op_exec_node_set(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_EXEC_NODE_SET *a = SRV_ARGS(call, GRAPH_EXEC_NODE_SET);
    struct srv_handle *e = srv_handle_get(s, a->exec, PROTO_H_GRAPH_EXEC);
    struct srv_handle *n = srv_handle_get(s, a->node, PROTO_H_GRAPH_NODE);
    struct srv_handle *child;
    CUDA_MEMSET_NODE_PARAMS mp = memset_params(a->targ);
    CUDA_MEMCPY3D c;
    CUcontext ctx;

    if (e == NULL || n == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    s->drv.cuCtxGetCurrent(&ctx);
    switch (a->type) {
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return s->drv.cuGraphExecMemsetNodeSetParams(e->real, n->real, &mp, ctx);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (!memcpy_params(s, a->targ, &c))
            return CUDA_ERROR_INVALID_VALUE;
        return s->drv.cuGraphExecMemcpyNodeSetParams(e->real, n->real, &c, ctx);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if ((child = srv_handle_get(s, a->targ[0], PROTO_H_GRAPH)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        return s->drv.cuGraphExecChildGraphNodeSetParams(e->real, n->real, child->real);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* [exec, node, enable]: 0 or 1 sets it (cuGraphNodeSetEnabled), 2 asks -> out[enabled]. */
CUresult srv_op_exec_node_enable(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_EXEC_NODE_ENABLE *a = SRV_ARGS(call, GRAPH_EXEC_NODE_ENABLE);
    struct srv_handle *e = srv_handle_get(s, a->exec, PROTO_H_GRAPH_EXEC);
    struct srv_handle *n = srv_handle_get(s, a->node, PROTO_H_GRAPH_NODE);
    unsigned on = 0;
    CUresult res;

    if (e == NULL || n == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->enable < 2)
        return s->drv.cuGraphNodeSetEnabled(e->real, n->real, (unsigned)a->enable);
    if (a->enable > 2)
        return CUDA_ERROR_INVALID_VALUE;
    res = s->drv.cuGraphNodeGetEnabled(e->real, n->real, &on);
    call->out[call->nout++] = on;
    return res;
}

/* [exec, graph] -> out[CUgraphExecUpdateResult]. */
CUresult srv_op_exec_update(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_GRAPH_EXEC_UPDATE *a = SRV_ARGS(call, GRAPH_EXEC_UPDATE);
    struct srv_handle *e = srv_handle_get(s, a->exec, PROTO_H_GRAPH_EXEC);
    struct srv_handle *g = srv_handle_get(s, a->graph, PROTO_H_GRAPH);
    CUgraphExecUpdateResultInfo info = {0};
    CUresult res;

    if (e == NULL || g == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuGraphExecUpdate(e->real, g->real, &info);
    call->out[call->nout++] = info.result;
    return res;
}
