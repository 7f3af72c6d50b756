// CUDA graphs built node by node and captured with host memory: copies from and to host
// memory, memsets, kernels, host nodes and host functions; node lists and types, clones,
// kernel parameters changed in an executable graph, and executable-graph update. Host input
// changes between launches, so each launch must read it anew. Programmatic edges between
// kernels (XLA's command buffers add them with cudaGraphAddNode), and one the driver refuses.
#include <cstring>
#include <vector>
#include "common.h"

__global__ void scale(float *x, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cudaGridDependencySynchronize(); // after a programmatic edge: waits for the kernel before
    if (i < n)
        x[i] *= s;
}

static int host_calls;
static void CUDART_CB on_host(void *arg)
{
    host_calls++;
    *(float *)arg += 0; // runs after the graph's copies: the value is there to read
}

static int bad;
static void expect(const char *what, float got, float want)
{
    if (got != want) {
        printf("FAIL %s: %.3f, expected %.3f\n", what, got, want);
        bad++;
    }
}

static cudaGraph_t build(float *in_h, float *out_h, float *d, float *z, int n, float s,
                         cudaGraphNode_t *kernel_node)
{
    cudaGraph_t g;
    cudaGraphNode_t h2d, ms, k, d2h, host;
    cudaMemcpy3DParms cp = {};
    cudaMemsetParams mp = {};
    cudaKernelNodeParams kp = {};
    cudaHostNodeParams hp = {};
    void *args[] = {&d, &s, &n};

    CHECK(cudaGraphCreate(&g, 0));
    cp.srcPtr = make_cudaPitchedPtr(in_h, n * sizeof(float), n, 1);
    cp.dstPtr = make_cudaPitchedPtr(d, n * sizeof(float), n, 1);
    cp.extent = make_cudaExtent(n * sizeof(float), 1, 1);
    cp.kind = cudaMemcpyHostToDevice;
    CHECK(cudaGraphAddMemcpyNode(&h2d, g, NULL, 0, &cp));
    mp.dst = z, mp.value = 0, mp.elementSize = 4, mp.width = n, mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&ms, g, NULL, 0, &mp));
    kp.func = (void *)scale, kp.gridDim = dim3((n + 255) / 256), kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t deps[] = {h2d, ms};
    CHECK(cudaGraphAddKernelNode(&k, g, deps, 2, &kp));
    cp.srcPtr = make_cudaPitchedPtr(d, n * sizeof(float), n, 1);
    cp.dstPtr = make_cudaPitchedPtr(out_h, n * sizeof(float), n, 1);
    cp.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaGraphAddMemcpyNode(&d2h, g, &k, 1, &cp));
    hp.fn = on_host, hp.userData = out_h;
    CHECK(cudaGraphAddHostNode(&host, g, &d2h, 1, &hp));
    *kernel_node = k;
    return g;
}

/* The graph's roots, and node's dependencies and dependents (NULL: the node after the first
 * root), counted and listed. */
static void structure(const char *what, cudaGraph_t g, cudaGraphNode_t node, size_t roots,
                      size_t deps, size_t dependents)
{
    cudaGraphNode_t r[8], d[8];
    size_t nr = 0, nd = 0, nt = 0, room = 8;

    CHECK(cudaGraphGetRootNodes(g, NULL, &nr));
    CHECK(cudaGraphGetRootNodes(g, r, &room));
    if (node == NULL) {
        nd = 1;
        CHECK(cudaGraphNodeGetDependentNodes(r[0], &node, NULL, &nd));
    }
    CHECK(cudaGraphNodeGetDependencies(node, NULL, NULL, &nd));
    CHECK(cudaGraphNodeGetDependentNodes(node, NULL, NULL, &nt));
    printf("%s: %zu roots, %zu dependencies, %zu dependents\n", what, nr, nd, nt);
    expect("roots listed", (float)room, (float)roots);
    expect("dependencies", (float)nd, (float)deps);
    expect("dependents", (float)nt, (float)dependents);
    room = 8;
    CHECK(cudaGraphNodeGetDependencies(node, d, NULL, &room));
    for (size_t i = 0; i < room; i++) {
        size_t m = 8;
        cudaGraphNode_t back[8];
        bool found = false;
        CHECK(cudaGraphNodeGetDependentNodes(d[i], back, NULL, &m));
        for (size_t j = 0; j < m; j++)
            found |= back[j] == node;
        expect("a dependency lists the node among its dependents", found, 1.0f);
    }
    expect("roots counted", (float)nr, (float)roots);
}

static void manual(cudaStream_t st, float *d, float *z, int n)
{
    std::vector<float> in(n), out(n);
    cudaGraphNode_t k, k2, nodes[8];
    size_t count = 0;
    cudaGraphNodeType type;
    cudaGraphExec_t exec, clone_exec;
    cudaGraph_t g = build(in.data(), out.data(), d, z, n, 2.0f, &k), clone, g2;

    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("manual graph: %zu nodes\n", count);
    count = 8;
    CHECK(cudaGraphGetNodes(g, nodes, &count));
    CHECK(cudaGraphNodeGetType(nodes[2], &type));
    printf("third node is a kernel: %s\n", type == cudaGraphNodeTypeKernel ? "yes" : "no");
    structure("manual graph", g, k, 2, 2, 1);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphClone(&clone, g));
    CHECK(cudaGraphInstantiate(&clone_exec, clone, 0));
    for (int it = 1; it <= 3; it++) {
        for (int i = 0; i < n; i++)
            in[i] = (float)(it * 10 + i % 7);
        CHECK(cudaGraphLaunch(it == 2 ? clone_exec : exec, st));
        CHECK(cudaStreamSynchronize(st));
        expect("manual launch", out[5], 2.0f * (it * 10 + 5));
    }
    float s = 3.0f;
    void *args[] = {&d, &s, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)scale, kp.gridDim = dim3((n + 255) / 256), kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, k, &kp));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaStreamSynchronize(st));
    expect("kernel parameters set in the executable graph", out[5], 3.0f * (30 + 5));
    g2 = build(in.data(), out.data(), d, z, n, 4.0f, &k2);
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(exec, g2, &info));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaStreamSynchronize(st));
    expect("updated executable graph", out[5], 4.0f * (30 + 5));
    printf("host node ran %d times\n", host_calls);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphExecDestroy(clone_exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(clone));
}

static void captured(cudaStream_t st, float *d, int n)
{
    std::vector<float> in(n), out(n);
    cudaGraph_t g;
    cudaGraphExec_t exec;
    int before = host_calls;

    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpyAsync(d, in.data(), n * sizeof(float), cudaMemcpyHostToDevice, st));
    scale<<<(n + 255) / 256, 256, 0, st>>>(d, 0.5f, n);
    CHECK(cudaMemcpyAsync(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CHECK(cudaLaunchHostFunc(st, on_host, out.data()));
    CHECK(cudaStreamEndCapture(st, &g));
    structure("captured graph", g, NULL, 1, 1, 1);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int it = 1; it <= 2; it++) {
        for (int i = 0; i < n; i++)
            in[i] = (float)(it * 100 + i % 3);
        CHECK(cudaGraphLaunch(exec, st));
        CHECK(cudaStreamSynchronize(st));
        expect("captured launch", out[4], 0.5f * (it * 100 + 1));
    }
    printf("captured host function ran %d times\n", host_calls - before);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

static cudaGraphNode_t add_scale(cudaGraph_t g, const cudaGraphNode_t *dep,
                                  const cudaGraphEdgeData *edge, float **d, float *s, int *n,
                                  cudaError_t *err)
{
    cudaGraphNode_t node = NULL;
    cudaGraphNodeParams p = {};
    void *args[] = {d, s, n};

    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void *)scale, p.kernel.gridDim = dim3((*n + 255) / 256);
    p.kernel.blockDim = dim3(256), p.kernel.kernelParams = args;
    *err = cudaGraphAddNode(&node, g, dep, edge, dep != NULL, &p);
    return node;
}

static void programmatic(cudaStream_t st, float *d, int n)
{
    std::vector<float> h(n, 1.0f);
    cudaGraph_t g, g2;
    cudaGraphExec_t exec;
    cudaGraphNode_t k1, ms;
    size_t count = 0;
    cudaGraphEdgeData edge = {};
    cudaMemsetParams mp = {};
    cudaError_t err;
    float two = 2.0f, three = 3.0f;

    CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaGraphCreate(&g, 0));
    k1 = add_scale(g, NULL, NULL, &d, &two, &n, &err);
    CHECK(err);
    edge.type = cudaGraphDependencyTypeProgrammatic;
    edge.from_port = cudaGraphKernelNodePortProgrammatic;
    add_scale(g, &k1, &edge, &d, &three, &n, &err);
    CHECK(err);
    cudaGraphNode_t k2 = NULL, deps[2];
    cudaGraphEdgeData got[2] = {};
    size_t nk = 1, nd = 2;
    CHECK(cudaGraphNodeGetDependentNodes(k1, &k2, got, &nk));
    CHECK(cudaGraphNodeGetDependencies(k2, deps, got, &nd));
    printf("programmatic edge listed: %zu, type %d, port %d\n", nd, got[0].type, got[0].from_port);
    expect("the edge's type", got[0].type, cudaGraphDependencyTypeProgrammatic);
    nd = 2;
    err = cudaGraphNodeGetDependencies(k2, deps, NULL, &nd); // no room for the edge data
    printf("without edge data: %s\n", cudaGetErrorName(err));
    expect("a lossy query", err, cudaErrorLossyQuery);
    (void)cudaGetLastError();
    mp.dst = d, mp.value = 0, mp.elementSize = 4, mp.width = n, mp.height = 1;
    CHECK(cudaGraphCreate(&g2, 0));
    CHECK(cudaGraphAddMemsetNode(&ms, g2, NULL, 0, &mp));
    add_scale(g2, &ms, &edge, &d, &three, &n, &err); // a memset has no programmatic port
    printf("programmatic edge from a memset: %s\n", cudaGetErrorName(err));
    if (err == cudaSuccess)
        bad++;
    (void)cudaGetLastError();
    CHECK(cudaGraphGetNodes(g2, NULL, &count));
    expect("nodes left by the refused one", (float)count, 1.0f);
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    expect("kernels joined by a programmatic edge", h[n - 1], 6.0f);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

static cudaGraph_t fill_graph(float *d, int n, float v)
{
    cudaGraph_t g;
    cudaGraphNode_t m;
    cudaMemsetParams mp = {};
    unsigned bits;

    memcpy(&bits, &v, 4);
    mp.dst = d, mp.value = bits, mp.elementSize = 4, mp.width = n, mp.height = 1;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphAddMemsetNode(&m, g, NULL, 0, &mp));
    return g;
}

/* An executable graph's nodes changed in place, as XLA's command buffers do: a child graph
 * swapped, a memset's value, a copy's size, a node disabled. Graph: d <- 1 (child), first half
 * of d <- 5 (memset), z <- d (copy). */
static float run_first_last(cudaGraphExec_t exec, cudaStream_t st, float *z, int n, float *last)
{
    float first;
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemcpy(&first, z, 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(last, z + n - 1, 4, cudaMemcpyDeviceToHost));
    return first;
}

static void exec_updates(cudaStream_t st, float *d, float *z, int n)
{
    cudaGraph_t g, c1 = fill_graph(d, n, 1.0f), c2 = fill_graph(d, n, 2.0f);
    cudaGraphNode_t ms, child, cp;
    cudaGraphExec_t exec;
    cudaMemsetParams mp = {};
    cudaMemcpy3DParms cpy = {};
    unsigned bits, enabled = 1;
    float five = 5.0f, four = 4.0f, last;

    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphAddChildGraphNode(&child, g, NULL, 0, c1));
    memcpy(&bits, &five, 4);
    mp.dst = d, mp.value = bits, mp.elementSize = 4, mp.width = n / 2, mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&ms, g, &child, 1, &mp));
    cpy.srcPtr = make_cudaPitchedPtr(d, n * 4, n, 1), cpy.dstPtr = make_cudaPitchedPtr(z, n * 4, n, 1);
    cpy.extent = make_cudaExtent(n * 4, 1, 1), cpy.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaGraphAddMemcpyNode(&cp, g, &ms, 1, &cpy));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    expect("memset after the child", run_first_last(exec, st, z, n, &last), 5.0f);
    expect("child graph", last, 1.0f);
    CHECK(cudaGraphExecChildGraphNodeSetParams(exec, child, c2));
    run_first_last(exec, st, z, n, &last);
    expect("child graph swapped", last, 2.0f);
    memcpy(&bits, &four, 4);
    mp.value = bits;
    CHECK(cudaGraphExecMemsetNodeSetParams(exec, ms, &mp));
    expect("memset set", run_first_last(exec, st, z, n, &last), 4.0f);
    CHECK(cudaGraphNodeSetEnabled(exec, ms, 0));
    CHECK(cudaGraphNodeGetEnabled(exec, ms, &enabled));
    expect("memset disabled", (float)enabled, 0.0f);
    CHECK(cudaMemset(z, 0, n * 4));
    cpy.extent = make_cudaExtent(n * 2, 1, 1); // half of it
    CHECK(cudaGraphExecMemcpyNodeSetParams(exec, cp, &cpy));
    expect("memset disabled", run_first_last(exec, st, z, n, &last), 2.0f);
    expect("copy of half", last, 0.0f);
    printf("executable graph updated in place: child, memset, copy, enabled\n");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(c1));
    CHECK(cudaGraphDestroy(c2));
}

int main()
{
    const int n = 4096;
    float *d, *z;
    cudaStream_t st;

    CHECK(cudaStreamCreate(&st));
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMalloc(&z, n * sizeof(float)));
    manual(st, d, z, n);
    captured(st, d, n);
    programmatic(st, d, n);
    exec_updates(st, d, z, n);
    CHECK(cudaFree(d));
    CHECK(cudaFree(z));
    CHECK(cudaStreamDestroy(st));
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
