/* What a stream capture is building, while it captures (graph.h): the graph it captures into
 * and the nodes its next node will follow (cuStreamGetCaptureInfo), and changes to that set
 * (cuStreamUpdateCaptureDependencies). A capture's graph is a client graph from the moment it
 * is first asked for: the application's own for cuStreamBeginCaptureToGraph, otherwise one
 * minted then, which the worker binds to the driver's capturing graph and which
 * cuStreamEndCapture returns, so the handle and its nodes stay valid. Dependency nodes are node
 * objects of that graph (server-minted ids for captured nodes). */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

#define MAX_QUERY_DEPS 256 /* the worker's limit too */

struct capture_target {
    uint64_t capture;
    struct cli_graph *graph;
    bool minted;            /* made for this capture (not the application's graph) */
    bool bound;             /* the worker knows it (always, for the application's graph) */
    CUgraphNode *deps;      /* the last query's answer: valid until the next query on the */
    CUgraphEdgeData *edges; /* capture or its end */
};

static pthread_mutex_t target_lock = PTHREAD_MUTEX_INITIALIZER;
static struct capture_target **targets;
static size_t ntargets;

/* The target of capture, or NULL; lock held. */
static struct capture_target *target_find(uint64_t capture)
{
    for (size_t i = 0; i < ntargets; i++)
        if (targets[i]->capture == capture)
            return targets[i];
    return NULL;
}

/* Record a new target; lock held. */
static struct capture_target *target_new(uint64_t capture, struct cli_graph *g, bool minted)
{
    struct capture_target *t = calloc(1, sizeof(*t)), **p;

    if (t == NULL || (p = realloc(targets, (ntargets + 1) * sizeof(*p))) == NULL) {
        free(t);
        return NULL;
    }
    *t = (struct capture_target){capture, g, minted, !minted, NULL, NULL};
    targets = p;
    targets[ntargets++] = t;
    return t;
}

bool cli_capture_target_set(uint64_t capture, struct cli_graph *g)
{
    bool ok;

    pthread_mutex_lock(&target_lock);
    ok = target_new(capture, g, false) != NULL;
    pthread_mutex_unlock(&target_lock);
    return ok;
}

struct cli_graph *cli_capture_target_take(uint64_t capture, bool *minted_p)
{
    struct cli_graph *g = NULL;

    *minted_p = false;
    pthread_mutex_lock(&target_lock);
    for (size_t i = 0; i < ntargets && g == NULL; i++)
        if (targets[i]->capture == capture) {
            struct capture_target *t = targets[i];
            g = t->graph, *minted_p = t->minted;
            targets[i] = targets[--ntargets];
            free(t->deps);
            free(t->edges);
            free(t);
        }
    pthread_mutex_unlock(&target_lock);
    return g;
}

struct cli_graph *cli_capture_target_peek(uint64_t capture, bool *minted_p)
{
    struct capture_target *t;
    struct cli_graph *g;

    pthread_mutex_lock(&target_lock);
    t = target_find(capture);
    g = t != NULL ? t->graph : NULL;
    *minted_p = t != NULL && t->minted;
    pthread_mutex_unlock(&target_lock);
    return g;
}

bool cli_capture_target_busy(const struct cli_graph *g)
{
    bool busy = false;

    pthread_mutex_lock(&target_lock);
    for (size_t i = 0; i < ntargets && !busy; i++)
        busy = targets[i]->graph == g;
    pthread_mutex_unlock(&target_lock);
    return busy;
}

/* The target of capture, with a graph minted for it if it has none yet. */
static struct capture_target *target_get(uint64_t capture)
{
    struct capture_target *t;
    struct cli_graph *g;

    pthread_mutex_lock(&target_lock);
    if ((t = target_find(capture)) == NULL && (g = cli_graph_new(PROTO_H_GRAPH)) != NULL &&
        (t = target_new(capture, g, true)) == NULL)
        cli_graph_free(g);
    pthread_mutex_unlock(&target_lock);
    return t;
}

/* The worker's out[status, n, (id, type, edge) x n] kept as t's arrays; their length in *n_p. */
static CUresult deps_keep(struct capture_target *t, const uint64_t *out, unsigned nout, size_t *n_p)
{
    size_t n = out[1];
    CUgraphNode *deps;
    CUgraphEdgeData *edges;

    if (n > MAX_QUERY_DEPS || nout < 2 + 3 * n)
        return CUDA_ERROR_UNKNOWN;
    deps = calloc(n + 1, sizeof(*deps));
    edges = calloc(n + 1, sizeof(*edges));
    for (size_t i = 0; deps != NULL && edges != NULL && i < n; i++) {
        const uint64_t *o = &out[2 + 3 * i];
        if ((deps[i] = (CUgraphNode)cli_graph_node(t->graph, o[0], (CUgraphNodeType)o[1])) == NULL)
            break;
        memcpy(&edges[i], &o[2], sizeof(edges[i]));
    }
    if (deps == NULL || edges == NULL || (n > 0 && deps[n - 1] == NULL)) {
        free(deps);
        free(edges);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    free(t->deps);
    free(t->edges);
    t->deps = deps, t->edges = edges;
    *n_p = n;
    return CUDA_SUCCESS;
}

CUresult cli_capture_query(CUstream stream, bool per_thread, CUstreamCaptureStatus *status,
                           CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                           size_t *ndeps)
{
    struct cli_call call = {CLI_ARGS(STREAM_GET_CAPTURE_INFO), .out_cap = 2 + 3 * MAX_QUERY_DEPS};
    struct capture_target *t;
    uint64_t *out;
    size_t n = 0;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_GET_CAPTURE_INFO.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if ((t = target_get(cli_stream_capture_id(stream))) == NULL ||
        (out = calloc(call.out_cap, sizeof(*out))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.out = out;
    call.a.STREAM_GET_CAPTURE_INFO.graph = t->graph->h.id,
    call.a.STREAM_GET_CAPTURE_INFO.bind = !t->bound;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout < 2)
        res = CUDA_ERROR_UNKNOWN;
    if (res == CUDA_SUCCESS)
        *status = (CUstreamCaptureStatus)out[0];
    if (res == CUDA_SUCCESS && *status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        t->bound = true;
        res = deps_keep(t, out, call.nout, &n);
    }
    free(out);
    if (res != CUDA_SUCCESS || *status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return res;
    if (deps != NULL && edges == NULL && !cli_graph_edges_plain(t->edges, n))
        return CUDA_ERROR_LOSSY_QUERY;
    if (graph != NULL)
        *graph = (CUgraph)t->graph;
    if (deps != NULL)
        *deps = t->deps;
    if (edges != NULL)
        *edges = t->edges;
    if (ndeps != NULL)
        *ndeps = n;
    return CUDA_SUCCESS;
}

/* Node ids of the capture's graph and their edge data travel as words. */
static CUresult update_deps(CUstream stream, CUgraphNode *nodes, const CUgraphEdgeData *edges,
                            size_t n, unsigned flags, bool per_thread)
{
    struct cli_call call = {CLI_ARGS(STREAM_UPDATE_CAPTURE_DEPS, .stream = 0, .flags = flags,
                                     .n = n, .has_edges = edges != NULL)};
    uint64_t capture = cli_stream_capture_id(stream), words[2 * 64];
    struct cli_graph *g;
    bool minted;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.STREAM_UPDATE_CAPTURE_DEPS.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (capture == 0)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || n > 64)
        return CUDA_ERROR_INVALID_VALUE;
    g = cli_capture_target_peek(capture, &minted);
    if (n > 0 && g == NULL) /* no node of the capture's graph was ever handed out */
        return CUDA_ERROR_INVALID_VALUE;
    if (n > 0 && (res = cli_graph_dep_ids(g, nodes, n, words)) != CUDA_SUCCESS)
        return res;
    if (edges != NULL)
        memcpy(&words[n], edges, n * sizeof(*edges));
    call.data = words;
    call.data_len = (edges != NULL ? 16 : 8) * n;
    return cli_call_sync(&call);
}

CLI_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *d,
                                                         const CUgraphEdgeData *e, size_t n,
                                                         unsigned int flags)
{
    return update_deps(s, d, e, n, flags, false);
}

CLI_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *d,
                                                              const CUgraphEdgeData *e, size_t n,
                                                              unsigned int flags)
{
    return update_deps(s, d, e, n, flags, true);
}

/* CUDA 11.3's form, without edge data, under its own symbol names. */
CLI_EXPORT CUresult cli_update_deps_v1(CUstream s, CUgraphNode *d, size_t n,
                                       unsigned flags) __asm__("cuStreamUpdateCaptureDependencies");
CLI_EXPORT CUresult cli_update_deps_v1(CUstream s, CUgraphNode *d, size_t n, unsigned flags)
{
    return update_deps(s, d, NULL, n, flags, false);
}

CLI_EXPORT CUresult
cli_update_deps_v1_ptsz(CUstream s, CUgraphNode *d, size_t n,
                        unsigned flags) __asm__("cuStreamUpdateCaptureDependencies_ptsz");
CLI_EXPORT CUresult cli_update_deps_v1_ptsz(CUstream s, CUgraphNode *d, size_t n, unsigned flags)
{
    return update_deps(s, d, NULL, n, flags, true);
}
