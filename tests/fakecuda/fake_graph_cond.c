/* The fake driver's conditional graph nodes: a handle is a condition cell (its value is the
 * cell's address, taken by value by the test kernels, which set it as cudaGraphSetConditional
 * does on a GPU); a conditional node runs its body graphs by the cell's value when its graph
 * runs: IF body 0 when non-zero (else body 1 if there is one), WHILE body 0 while non-zero,
 * SWITCH body n for value n. Body graphs are made by cuGraphAddNode and live as long as the
 * process (a test double). cuGraphAddNode also takes kernel and empty nodes. A capture's
 * dependency set (cuStreamGetCaptureInfo, cuStreamUpdateCaptureDependencies) is kept by
 * fakecuda.c with the capturing graph. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_MAX_HANDLES 256
#define FK_MAX_TRIPS   (1u << 20) /* a WHILE that never ends is a test bug: stop it */

struct fk_cond {
    unsigned value, dflt, flags;
    const void *graph;
};

struct fk_cond_node {
    struct fk_cond *cond;
    CUgraphConditionalNodeType type;
    unsigned size;
    CUgraph bodies[];
};

static struct fk_cond *conds[FK_MAX_HANDLES];
static unsigned nconds;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fk_cond *cond_of(unsigned long long handle)
{
    struct fk_cond *c = NULL;

    pthread_mutex_lock(&cond_lock);
    for (unsigned i = 0; i < nconds && !c; i++)
        if ((uintptr_t)conds[i] == handle)
            c = conds[i];
    pthread_mutex_unlock(&cond_lock);
    return c;
}

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph g, CUcontext ctx,
                                        unsigned dflt, unsigned flags)
{
    struct fk_cond *c;

    if (!fk_graph_valid(g))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!out || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(c = calloc(1, sizeof(*c))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct fk_cond){dflt, dflt, flags, g};
    pthread_mutex_lock(&cond_lock);
    if (nconds < FK_MAX_HANDLES)
        conds[nconds++] = c;
    else {
        free(c);
        c = NULL;
    }
    pthread_mutex_unlock(&cond_lock);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraphConditionalHandle)(uintptr_t)c;
    return CUDA_SUCCESS;
}

void fk_cond_launch(const void *graph)
{
    pthread_mutex_lock(&cond_lock);
    for (unsigned i = 0; i < nconds; i++)
        if (conds[i]->graph == graph && (conds[i]->flags & CU_GRAPH_COND_ASSIGN_DEFAULT))
            conds[i]->value = conds[i]->dflt;
    pthread_mutex_unlock(&cond_lock);
}

static CUresult cond_run(void *arg)
{
    struct fk_cond_node *n = arg;
    unsigned trips = 0;
    CUresult res = CUDA_SUCCESS;

    switch (n->type) {
    case CU_GRAPH_COND_TYPE_IF:
        if (n->cond->value)
            return fk_graph_run(n->bodies[0]);
        return n->size == 2 ? fk_graph_run(n->bodies[1]) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_WHILE:
        while (n->cond->value && res == CUDA_SUCCESS)
            res = ++trips > FK_MAX_TRIPS ? CUDA_ERROR_LAUNCH_TIMEOUT : fk_graph_run(n->bodies[0]);
        return res;
    case CU_GRAPH_COND_TYPE_SWITCH:
        return n->cond->value < n->size ? fk_graph_run(n->bodies[n->cond->value]) : CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult add_conditional(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    struct fk_cond_node *n;
    struct fk_cond *c = cond_of(p->handle);
    unsigned max = p->type == CU_GRAPH_COND_TYPE_SWITCH ? 1024
                   : p->type == CU_GRAPH_COND_TYPE_IF   ? 2
                                                        : 1;
    CUresult res = CUDA_SUCCESS;

    if (!c || c->graph != g)
        return CUDA_ERROR_INVALID_VALUE; /* a handle of another graph */
    if (p->type > CU_GRAPH_COND_TYPE_SWITCH || p->size == 0 || p->size > max)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = calloc(1, sizeof(*n) + p->size * sizeof(CUgraph))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *n = (struct fk_cond_node){c, p->type, p->size};
    for (unsigned i = 0; i < p->size && res == CUDA_SUCCESS; i++)
        res = cuGraphCreate(&n->bodies[i], 0);
    if (res == CUDA_SUCCESS)
        res = fk_graph_add_run(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_CONDITIONAL, cond_run, n);
    if (res != CUDA_SUCCESS)
        return res; /* bodies already made leak, as their node would */
    p->phGraph_out = n->bodies;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                        const CUgraphEdgeData *e, size_t n, CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return cuGraphAddKernelNode(out, g, deps, n, (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(out, g, deps, n);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return add_conditional(out, g, deps, n, &p->conditional);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- what a stream capture builds: its graph and the nodes its next node follows ---- */

CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                CUgraph *graph, const CUgraphNode **deps,
                                const CUgraphEdgeData **edges, size_t *n)
{
    static const CUgraphEdgeData plain[FK_MAX_CAPTURE_DEPS]; /* default edges only */
    struct fk_capture_deps *d = NULL;
    bool invalidated = false;
    CUgraph g = fk_capture_of(s, &invalidated, &d);

    if (!status || (edges && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    *status = !g            ? CU_STREAM_CAPTURE_STATUS_NONE
              : invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                            : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_SUCCESS;
    if (id)
        *id = (uintptr_t)g;
    if (graph)
        *graph = g;
    if (deps)
        *deps = d->nodes;
    if (edges)
        *edges = plain;
    if (n)
        *n = d->n;
    return CUDA_SUCCESS;
}

/* ADD (0) adds the nodes not in the set yet, SET (1) replaces the set. */
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *nodes, const CUgraphEdgeData *e,
                                           size_t n, unsigned flags)
{
    struct fk_capture_deps *d = NULL;
    bool invalidated = false;
    CUgraph g = fk_capture_of(s, &invalidated, &d);

    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || !fk_graph_has_nodes(g, nodes, n))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; e && i < n; i++)
        if (e[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || e[i].from_port || e[i].to_port)
            return CUDA_ERROR_NOT_SUPPORTED;
    if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        d->n = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < d->n && d->nodes[j] != nodes[i])
            j++;
        if (j < d->n)
            continue;
        if (d->n == FK_MAX_CAPTURE_DEPS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        d->nodes[d->n++] = nodes[i];
    }
    return CUDA_SUCCESS;
}

/* ---- the test kernels of graph_cond.cu: one thread each, as launched ---- */

#define P(l, i, type) (*(type *)(l)->params[i])

static CUresult set_cond(unsigned long long handle, unsigned value)
{
    struct fk_cond *c = cond_of(handle);

    if (!c)
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* a bad handle faults on a GPU too */
    c->value = value;
    return CUDA_SUCCESS;
}

CUresult fk_k_cond_if_odd(const struct fk_launch *l)
{
    const int *x = P(l, 0, const int *);
    return fk_valid(x, 4) ? set_cond(P(l, 1, unsigned long long), *x & 1)
                          : CUDA_ERROR_ILLEGAL_ADDRESS;
}

CUresult fk_k_cond_set_value(const struct fk_launch *l)
{
    const int *x = P(l, 0, const int *);
    return fk_valid(x, 4) ? set_cond(P(l, 1, unsigned long long), (unsigned)*x)
                          : CUDA_ERROR_ILLEGAL_ADDRESS;
}

CUresult fk_k_cond_add(const struct fk_launch *l)
{
    int *y = P(l, 0, int *);
    if (!fk_valid(y, 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    *y += P(l, 1, int);
    return CUDA_SUCCESS;
}

CUresult fk_k_cond_countdown(const struct fk_launch *l)
{
    int *counter = P(l, 0, int *), *trips = P(l, 1, int *);
    if (!fk_valid(counter, 4) || !fk_valid(trips, 4))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    (*trips)++;
    return --*counter <= 0 ? set_cond(P(l, 2, unsigned long long), 0) : CUDA_SUCCESS;
}
