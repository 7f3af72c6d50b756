/* CUDA graphs on the client (graph.c, graph_nodes.c, graph_host.c). A graph lives on the
 * server; what it needs of the client's own memory and threads is kept here as its host part:
 * the shadows that stand in for client host memory in its copies, and the host functions it
 * runs. A launch fills the HtoD shadows first, reads the DtoH shadows after, then runs the host
 * functions once the launch stream has drained (so they see the graph's effects; a host node
 * inside a graph runs after all of its graph's device work, not between its neighbours). */
#ifndef RGPU_CLIENT_GRAPH_H
#define RGPU_CLIENT_GRAPH_H

#include "client/api/api.h"

struct shadow_use {
    uint64_t shadow; /* server shadow id (PROTO_H_SHADOW) */
    void *host;      /* client memory it stands for */
    size_t len;
    int dir; /* 0: HtoD (filled before a launch), 1: DtoH (read after) */
};

struct host_call {
    CUhostFn fn;
    void *data;
};

struct graph_host {
    struct shadow_use *uses;
    size_t nuses;
    struct host_call *fns;
    size_t nfns;
};

struct cli_node;

struct cli_graph {
    struct cli_handle h; /* PROTO_H_GRAPH or PROTO_H_GRAPH_EXEC */
    struct cli_ctx *ctx;
    pthread_mutex_t lock;
    struct graph_host host;
    struct cli_node **nodes; /* node objects handed out for this graph */
    size_t nnodes, node_cap;
    struct cli_graph *owner; /* a conditional node's body: the graph holding that node (the
                              * body is never destroyed alone; it goes with its owner) */
};

struct cli_node {
    struct cli_handle h; /* PROTO_H_GRAPH_NODE */
    struct cli_graph *graph;
    CUgraphNodeType type;
    CUgraph *bodies; /* a conditional node's body graphs (its phGraph_out array), owned */
    unsigned nbodies;
};

/* A node being added (graph_nodes.c): its type, up to 12 type arguments and a payload. */
struct node_spec {
    CUgraphNodeType type;
    uint64_t targ[12]; /* GRAPH_ADD_NODE's type arguments (proto/ops.def) */
    const void *payload;
    size_t payload_len;
    uint64_t *out; /* MEM_ALLOC: the address */
};
/* Create the node on the server (GRAPH_ADD_NODE) and hand out its node object. */
CUresult cli_graph_add_node(CUgraphNode *node_p, CUgraph graph, const CUgraphNode *deps,
                            size_t ndeps, const struct node_spec *spec);
/* Node ids of deps, which must all be nodes of g (CUDA_ERROR_INVALID_VALUE otherwise). */
CUresult cli_graph_dep_ids(struct cli_graph *g, const CUgraphNode *deps, size_t ndeps,
                           uint64_t *ids);
/* The wire ids of an executable graph and a node (of the graph it was made from); false when
 * either handle is not one (graph_exec_nodes.c). */
bool cli_exec_node_ids(CUgraphExec exec, CUgraphNode node, uint64_t *exec_id, uint64_t *node_id);
/* Whether edge data names only default edges (NULL, or every entry zero). */
bool cli_graph_edges_plain(const CUgraphEdgeData *edges, size_t n);
/* An edge as the driver takes it between nodes of these types: a default edge names no port; a
 * programmatic one joins two kernel nodes from the programmatic or launch-order port. */
bool cli_graph_edge_valid(const CUgraphEdgeData *e, CUgraphNodeType from, CUgraphNodeType to);
/* Append src's shadows and host functions, and those of the conditional bodies under it, to
 * dst (what an executable graph of src needs around each launch). */
bool graph_host_collect(struct graph_host *dst, struct cli_graph *src);

struct cli_graph *cli_graph_new(enum proto_handle_type type);
void cli_graph_free(struct cli_graph *g);

/* Host parts. */
bool graph_host_add_use(struct graph_host *gh, const struct shadow_use *u);
bool graph_host_add_fn(struct graph_host *gh, CUhostFn fn, void *data);
bool graph_host_copy(struct graph_host *dst, const struct graph_host *src);
void graph_host_clear(struct graph_host *gh);
/* A new shadow of len bytes on the server (asynchronous); its id. */
uint64_t graph_shadow_new(size_t len);
/* Around a launch of an executable graph with that host part on stream sid. */
CUresult graph_host_before(const struct graph_host *gh, uint64_t sid);
CUresult graph_host_after(const struct graph_host *gh, uint64_t sid);

/* Stream capture: copies between client host memory and the device, and host functions, on a
 * capturing stream are recorded in the capture's host part (memcpy.c, stream.c). */
CUresult cli_capture_copy(CUstream stream, uint64_t sid, int dir, CUdeviceptr dptr, void *host,
                          size_t len);
CUresult cli_capture_host_fn(CUstream stream, CUhostFn fn, void *data);
/* The host part gathered by capture capture_id (moved out; empty if none). */
void cli_capture_take(uint64_t capture_id, struct graph_host *out);

/* What a capture builds (graph_capture.c). A capture's target is the client graph it
 * captures into: the application's (cuStreamBeginCaptureToGraph, set at its beginning) or one
 * minted by the first cli_capture_query. take: remove it at the capture's end (minted: whether
 * it was minted; NULL if the capture has none); peek: the same without removing it; busy: is
 * g some capture's target (it may not be destroyed then). */
bool cli_capture_target_set(uint64_t capture, struct cli_graph *g);
struct cli_graph *cli_capture_target_take(uint64_t capture, bool *minted_p);
struct cli_graph *cli_capture_target_peek(uint64_t capture, bool *minted_p);
bool cli_capture_target_busy(const struct cli_graph *g);
/* cuStreamGetCaptureInfo for a capturing stream when the graph or the dependencies are asked
 * for: the worker's answer, with the graph and node objects; the arrays stay valid until the
 * next query of the capture or its end. */
CUresult cli_capture_query(CUstream stream, bool per_thread, CUstreamCaptureStatus *status,
                           CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                           size_t *ndeps);

/* A node object of g with that wire id (made on first sight). */
struct cli_node *cli_graph_node(struct cli_graph *g, uint64_t id, CUgraphNodeType type);

#endif
