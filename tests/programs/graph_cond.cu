// Conditional graph nodes (CUDA 12.3+): kernels set the condition on the device with
// cudaGraphSetConditional through the handle they take by value. An IF/ELSE node built with
// cudaGraphAddNode (one body filled with cudaGraphAddNode, the other with
// cudaGraphAddKernelNode); a WHILE node whose handle has a default value applied at each launch
// and whose body is filled by stream capture into it (cudaStreamBeginCaptureToGraph); a SWITCH
// node with three bodies; a WHILE node added to a graph while a stream captures into it (the
// capture's graph and dependencies from cudaStreamGetCaptureInfo, then
// cudaStreamUpdateCaptureDependencies), as NVIDIA's graphConditionalNodes sample does. Each
// graph is launched with several inputs and the results checked.
#include "common.h"

__global__ void cond_if_odd(const int *x, cudaGraphConditionalHandle h)
{
    cudaGraphSetConditional(h, *x & 1);
}

__global__ void cond_set_value(const int *x, cudaGraphConditionalHandle h)
{
    cudaGraphSetConditional(h, (unsigned)*x);
}

__global__ void cond_add(int *y, int v)
{
    *y += v;
}

// One trip of a loop: count it, and end the loop when the counter runs out.
__global__ void cond_countdown(int *counter, int *trips, cudaGraphConditionalHandle h)
{
    (*trips)++;
    if (--*counter <= 0)
        cudaGraphSetConditional(h, 0);
}

static int bad;
static void expect(const char *what, int got, int want)
{
    printf("%s: %d\n", what, got);
    if (got != want) {
        printf("FAIL %s: expected %d\n", what, want);
        bad++;
    }
}

static cudaGraphNodeParams kernel_params(void *func, void **args)
{
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = func;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(1);
    p.kernel.kernelParams = args;
    return p;
}

// Launch exec with *x = input and *y = 0; the resulting *y.
static int run(cudaGraphExec_t exec, cudaStream_t st, int *x, int *y, int input)
{
    int out = -1;
    CHECK(cudaMemcpyAsync(x, &input, sizeof(int), cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(y, 0, sizeof(int), st));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaMemcpyAsync(&out, y, sizeof(int), cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    return out;
}

static void if_else(cudaStream_t st, int *x, int *y)
{
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaGraphNode_t setter, cond, then_node, else_node;
    cudaGraphConditionalHandle h;
    int hundred = 100, one = 1;

    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    void *set_args[] = {&x, &h};
    cudaGraphNodeParams kp = kernel_params((void *)cond_if_odd, set_args);
    CHECK(cudaGraphAddNode(&setter, g, NULL, NULL, 0, &kp));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 2;
    CHECK(cudaGraphAddNode(&cond, g, &setter, NULL, 1, &cp));
    cudaGraph_t then_body = cp.conditional.phGraph_out[0];
    cudaGraph_t else_body = cp.conditional.phGraph_out[1];
    void *then_args[] = {&y, &hundred};
    kp = kernel_params((void *)cond_add, then_args);
    CHECK(cudaGraphAddNode(&then_node, then_body, NULL, NULL, 0, &kp));
    cudaKernelNodeParams classic = {};
    void *else_args[] = {&y, &one};
    classic.func = (void *)cond_add, classic.gridDim = dim3(1), classic.blockDim = dim3(1);
    classic.kernelParams = else_args;
    CHECK(cudaGraphAddKernelNode(&else_node, else_body, NULL, 0, &classic));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(then_body, NULL, &count));
    expect("if: nodes in the then-body", (int)count, 1);
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(cond, &type));
    expect("if: node is conditional", type == cudaGraphNodeTypeConditional, 1);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int input = 0; input < 4; input++) {
        char what[64];
        snprintf(what, sizeof(what), "if x=%d: y", input);
        expect(what, run(exec, st, x, y, input), input & 1 ? 100 : 1);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

static void while_loop(cudaStream_t st, int *counter, int *trips)
{
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaGraphNode_t cond;
    cudaGraphConditionalHandle h;
    cudaStream_t cap;

    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&cond, g, NULL, NULL, 0, &cp));
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCaptureToGraph(cap, body, NULL, NULL, 0, cudaStreamCaptureModeGlobal));
    cond_countdown<<<1, 1, 0, cap>>>(counter, trips, h);
    CHECK(cudaStreamEndCapture(cap, NULL));
    CHECK(cudaStreamDestroy(cap));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(body, NULL, &count));
    expect("while: nodes captured into the body", (int)count, 1);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int n = 1; n <= 7; n += 3) {
        char what[64];
        snprintf(what, sizeof(what), "while counter=%d: trips", n);
        expect(what, run(exec, st, counter, trips, n), n);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

// The capture's graph and dependencies, queried while it captures (n of them expected).
static const cudaGraphNode_t *capture_deps(cudaStream_t cap, cudaGraph_t *g, size_t want,
                                           const char *what)
{
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *edges = NULL;
    size_t n = 0;
    char line[96];

    CHECK(cudaStreamGetCaptureInfo(cap, &status, NULL, g, &deps, &edges, &n));
    snprintf(line, sizeof(line), "captured while: %s: capturing", what);
    expect(line, status == cudaStreamCaptureStatusActive, 1);
    snprintf(line, sizeof(line), "captured while: %s: dependencies", what);
    expect(line, (int)n, (int)want);
    for (size_t i = 0; i < n; i++) {
        snprintf(line, sizeof(line), "captured while: %s: default edge %zu", what, i);
        expect(line, edges[i].type == cudaGraphDependencyTypeDefault && edges[i].from_port == 0, 1);
    }
    return deps;
}

// counter = n, trips = 0, y = 0; launch; trips and y after.
static void run_loop(cudaGraphExec_t exec, cudaStream_t st, int *counter, int *trips, int *y,
                     int n, int out[2])
{
    CHECK(cudaMemcpyAsync(counter, &n, sizeof(int), cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(trips, 0, sizeof(int), st));
    CHECK(cudaMemsetAsync(y, 0, sizeof(int), st));
    CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaMemcpyAsync(&out[0], trips, sizeof(int), cudaMemcpyDeviceToHost, st));
    CHECK(cudaMemcpyAsync(&out[1], y, sizeof(int), cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
}

// A WHILE node added to a graph while a stream captures into it, as NVIDIA's
// graphConditionalNodes sample (capturedWhileGraph) builds it: the capture's graph and
// dependencies from cudaStreamGetCaptureInfo, the conditional node added to that graph on
// them with cudaGraphAddNode, the capture's dependencies set to it, the body filled by a
// capture into it. A sets the condition from *counter, the body counts down, D adds 1000.
static void captured_while(cudaStream_t st, int *counter, int *trips, int *y)
{
    cudaGraph_t g = NULL, again = NULL, ended = NULL;
    cudaGraphExec_t exec;
    cudaGraphNode_t a, cond;
    cudaGraphConditionalHandle h;
    cudaStream_t cap, body_st;
    cudaGraphNodeType type;

    CHECK(cudaStreamCreate(&cap));
    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
    capture_deps(cap, &g, 0, "at the start");
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    cond_set_value<<<1, 1, 0, cap>>>(counter, h);
    const cudaGraphNode_t *deps = capture_deps(cap, &again, 1, "after A");
    expect("captured while: the same graph", again == g, 1);
    a = deps[0];
    CHECK(cudaGraphNodeGetType(a, &type));
    expect("captured while: A is a kernel node", type == cudaGraphNodeTypeKernel, 1);
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&cond, g, deps, NULL, 1, &cp));
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    CHECK(cudaStreamUpdateCaptureDependencies(cap, &cond, NULL, 1, cudaStreamSetCaptureDependencies));
    deps = capture_deps(cap, NULL, 1, "set to the conditional node");
    expect("captured while: the dependency is the conditional node", deps[0] == cond, 1);
    CHECK(cudaStreamUpdateCaptureDependencies(cap, &a, NULL, 1, cudaStreamAddCaptureDependencies));
    deps = capture_deps(cap, NULL, 2, "A added");
    expect("captured while: conditional node and A",
           (deps[0] == cond && deps[1] == a) || (deps[0] == a && deps[1] == cond), 1);
    cond_add<<<1, 1, 0, cap>>>(y, 1000);
    CHECK(cudaStreamEndCapture(cap, &ended));
    expect("captured while: end of capture gives the same graph", ended == g, 1);
    CHECK(cudaStreamDestroy(cap));
    CHECK(cudaStreamCreate(&body_st));
    CHECK(cudaStreamBeginCaptureToGraph(body_st, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    cond_countdown<<<1, 1, 0, body_st>>>(counter, trips, h);
    CHECK(cudaStreamEndCapture(body_st, nullptr));
    CHECK(cudaStreamDestroy(body_st));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    expect("captured while: nodes in the graph", (int)count, 3);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int n = 0; n <= 10; n += 5) {
        int out[2];
        char what[64];
        run_loop(exec, st, counter, trips, y, n, out);
        snprintf(what, sizeof(what), "captured while counter=%d: trips", n);
        expect(what, out[0], n);
        snprintf(what, sizeof(what), "captured while counter=%d: y", n);
        expect(what, out[1], 1000);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

static void switch_node(cudaStream_t st, int *x, int *y)
{
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaGraphNode_t setter, cond, node;
    cudaGraphConditionalHandle h;
    int adds[3] = {10, 20, 30};

    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    void *set_args[] = {&x, &h};
    cudaGraphNodeParams kp = kernel_params((void *)cond_set_value, set_args);
    CHECK(cudaGraphAddNode(&setter, g, NULL, NULL, 0, &kp));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeSwitch;
    cp.conditional.size = 3;
    CHECK(cudaGraphAddNode(&cond, g, &setter, NULL, 1, &cp));
    for (int i = 0; i < 3; i++) {
        void *args[] = {&y, &adds[i]};
        kp = kernel_params((void *)cond_add, args);
        CHECK(cudaGraphAddNode(&node, cp.conditional.phGraph_out[i], NULL, NULL, 0, &kp));
    }
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int input = 0; input < 4; input++) {
        char what[64];
        snprintf(what, sizeof(what), "switch x=%d: y", input);
        expect(what, run(exec, st, x, y, input), input < 3 ? adds[input] : 0);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

int main()
{
    int *x, *y, *z;
    cudaStream_t st;

    CHECK(cudaMalloc(&x, sizeof(int)));
    CHECK(cudaMalloc(&y, sizeof(int)));
    CHECK(cudaMalloc(&z, sizeof(int)));
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if_else(st, x, y);
    while_loop(st, x, y);
    switch_node(st, x, y);
    captured_while(st, x, y, z);
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(z));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    printf(bad == 0 ? "PASS\n" : "FAIL\n");
    return bad != 0;
}
