/* A fake CUDA driver for tests without a GPU: device memory is host memory, kernels are the C
 * functions of kernels.c, streams run everything at once, events read CLOCK_MONOTONIC. It
 * exports every entry point gpu-server resolves (server/driver.h). FAKECUDA_MEM_MB sets the
 * device size (default 4096); FAKECUDA_TRACE=1 logs calls; FAKECUDA_UUID
 * (16 bytes) names the device; FAKECUDA_VA_BASE: see va_alloc.
 * FAKECUDA_GPU_TIMELINE=<file>: one time-sliced GPU shared by every process given the same
 * file (tests/worker/share_bursts.sh). The sleep_us kernel then returns at once and is placed
 * on timelines instead of sleeping: it starts when its stream and the GPU are both free (the
 * GPU's busy_until is a uint64 in the file, mapped shared: kernels of all processes run one at a
 * time, in launch order) and ends its microseconds later. Events take the time their stream
 * reaches them (so two events around a kernel that waited behind another process's also
 * measure that wait, as a real GPU's time slices do); event, stream and context synchronization
 * and queries, and synchronous copies (which wait as cuCtxSynchronize), wait for or see those
 * times. Other kernels and copies still run at the call. See fk_timeline_run. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

#define MAX_ALLOCS 65536
#define FK_MAGIC   0x46414b45u

struct fk_graph;
/* err: a context's sticky error (an illegal address reported by every later call). */
struct fk_obj {
    uint32_t magic;
    int kind;
    unsigned flags;
    bool recorded;
    struct fk_graph *capture;
    CUresult err;
    CUstream wstream;
    unsigned long long wticket; /* an event: the device work it follows */
    /* FAKECUDA_GPU_TIMELINE (see fk_timeline_run): a stream's, or a context's legacy stream's,
     * busy_until */
    _Atomic uint64_t busy_ns;
    uint64_t at_ns; /* an event's timestamp (CLOCK_MONOTONIC ns): when its stream reached it */
};
enum { K_CTX = 1, K_MODULE, K_STREAM, K_EVENT, K_GRAPH, K_EXEC };

/* A captured graph: the operations recorded on a capturing stream, replayed on launch. */
#define FK_MAX_NODES     256
#define FK_MAX_NODE_DEPS 16
struct fk_node {
    int kind; /* 0 launch, 1 fill, 2 dtod, 3 htod, 4 dtoh, 5 nothing (empty, event, free),
               * 6 run(arg) (fake_graph_cond.c) */
    int idx;  /* position in its graph (the same in clones and executable copies) */
    CUgraphNodeType type;
    const struct fk_kernel *k;
    unsigned g[3], b[3];
    uint8_t params[256];
    CUdeviceptr dst, src;
    size_t pitch, w, h, n;
    unsigned v, es;
    CUresult (*run)(void *arg);
    void *arg;
    bool disabled;               /* cuGraphNodeSetEnabled(0): kernel, memset, copy */
    unsigned ndeps;              /* the nodes it follows (graph structure queries) */
    short dep[FK_MAX_NODE_DEPS]; /* their idx, the first FK_MAX_NODE_DEPS of them */
    CUgraphEdgeData dep_edge[FK_MAX_NODE_DEPS];
};
/* origin: the graph an executable graph was made from; into: a capture into an existing graph
 * (cuStreamBeginCaptureToGraph), which its end leaves alone. */
struct fk_graph {
    struct fk_obj obj;
    int n;
    bool global, invalidated, into;
    const struct fk_graph *origin;
    struct fk_capture_deps deps;
    struct fk_node nodes[FK_MAX_NODES];
};

static bool nodes_in(struct fk_graph *g, const CUgraphNode *deps, size_t n);

/* Capture safety as the driver enforces it: while any stream captures in global mode, a
 * potentially unsafe call (synchronizing, allocating) from a thread not in relaxed mode
 * invalidates those captures and fails (their end-capture then fails too). */
#define FK_MAX_CAPTURES 16
static struct fk_graph *global_captures[FK_MAX_CAPTURES];
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static bool unsafe_during_capture(void)
{
    bool hit = false;

    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < FK_MAX_CAPTURES; i++)
        if (global_captures[i]) {
            global_captures[i]->invalidated = true;
            hit = true;
        }
    pthread_mutex_unlock(&capture_lock);
    return hit;
}
#define CAPTURE_SAFE()                                                                             \
    do {                                                                                           \
        if (unsafe_during_capture())                                                               \
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;                                          \
    } while (0)

static void global_capture_track(struct fk_graph *g, bool on)
{
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < FK_MAX_CAPTURES; i++)
        if (on ? !global_captures[i] : global_captures[i] == g) {
            global_captures[i] = on ? g : NULL;
            break;
        }
    pthread_mutex_unlock(&capture_lock);
}

static struct fk_graph *capturing(CUstream s)
{
    struct fk_obj *o =
        (uintptr_t)s >= 4096 ? (struct fk_obj *)s : NULL; /* not the pseudo-handles */
    return o && o->magic == 0x46414b45u && o->kind == K_STREAM ? o->capture : NULL;
}

static void follow(struct fk_node *n, const struct fk_node *dep, const CUgraphEdgeData *e)
{
    if (n->ndeps < FK_MAX_NODE_DEPS) {
        n->dep[n->ndeps] = (short)dep->idx;
        n->dep_edge[n->ndeps] = e ? *e : (CUgraphEdgeData){0};
    }
    n->ndeps++;
}

/* A new node following deps (nodes of g). */
static CUresult append(struct fk_graph *g, const struct fk_node *node, const CUgraphNode *deps,
                       size_t ndeps)
{
    if (g->n == FK_MAX_NODES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes[g->n] = *node;
    g->nodes[g->n].idx = g->n;
    g->nodes[g->n].ndeps = 0;
    for (size_t i = 0; i < ndeps; i++)
        follow(&g->nodes[g->n], (const struct fk_node *)deps[i], NULL);
    g->n++;
    return CUDA_SUCCESS;
}

/* A node captured from a stream: it follows the capture's dependencies, the capture's next
 * node follows it alone. */
static CUresult record(struct fk_graph *g, const struct fk_node *node)
{
    CUresult res = append(g, node, g->deps.nodes, g->deps.n);
    if (res == CUDA_SUCCESS)
        g->deps = (struct fk_capture_deps){{(CUgraphNode)&g->nodes[g->n - 1]}, 1};
    return res;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t n;
} allocs[MAX_ALLOCS]; /* sorted by address */
static size_t nallocs, used;
static bool initialized;
static struct fk_obj primary = {.magic = FK_MAGIC, .kind = K_CTX};
static int primary_refs;
static __thread CUcontext current;

static bool tracing(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("FAKECUDA_TRACE");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}
#define TRACE(...)                                                                                 \
    do {                                                                                           \
        if (tracing())                                                                             \
            fprintf(stderr, "fakecuda: " __VA_ARGS__);                                             \
    } while (0)
/* Every entry point that needs cuInit starts here, so FAKECUDA_TRACE=1 names each call. */
#define NEED_INIT()                                                                                \
    do {                                                                                           \
        TRACE("%s\n", __func__);                                                                   \
        if (!initialized)                                                                          \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)
#define NEED_CTX()                                                                                 \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if (!current)                                                                              \
            return CUDA_ERROR_INVALID_CONTEXT;                                                     \
        if (((struct fk_obj *)current)->err)                                                       \
            return ((struct fk_obj *)current)->err;                                                \
    } while (0)

static size_t total_mem(void)
{
    const char *e = getenv("FAKECUDA_MEM_MB");
    return (size_t)(e ? strtoull(e, NULL, 10) : 4096) << 20;
}

static struct fk_obj *obj_new(int kind)
{
    struct fk_obj *o = calloc(1, sizeof(*o));
    if (o) {
        o->magic = FK_MAGIC;
        o->kind = kind;
    }
    return o;
}

/* The object behind a handle of that kind, or NULL. Handles below one page are never objects:
 * NULL and the stream pseudo-handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) are not read. */
static struct fk_obj *obj_check(const void *h, int kind)
{
    const struct fk_obj *o = h;
    return (uintptr_t)o >= 4096 && o->magic == FK_MAGIC && o->kind == kind ? (struct fk_obj *)o
                                                                           : NULL;
}

/* ---- FAKECUDA_GPU_TIMELINE: one GPU shared by processes, as timelines (no threads) ---- */

static _Atomic uint64_t *gpu_busy_ns;   /* in the shared file; NULL: no timeline (the default) */
static _Atomic uint64_t proc_busy_ns;   /* the latest end of this process's kernels */
static _Atomic uint64_t no_ctx_busy_ns; /* the legacy stream without a current context */
static pthread_once_t timeline_once = PTHREAD_ONCE_INIT;

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void timeline_open(void)
{
    const char *path = getenv("FAKECUDA_GPU_TIMELINE");
    struct stat st;
    void *m;
    int fd;

    if (path == NULL || *path == 0)
        return;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* the first process creates it */
    if (fd < 0 || fstat(fd, &st) != 0 || (st.st_size < 4096 && ftruncate(fd, 4096) != 0) ||
        (m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        fprintf(stderr, "fakecuda: FAKECUDA_GPU_TIMELINE=%s: %m; kernels run at the call\n", path);
        if (fd >= 0)
            close(fd);
        return;
    }
    close(fd);
    gpu_busy_ns = m;
    /* a stale file from before a reboot (CLOCK_MONOTONIC restarts): free now */
    uint64_t v = atomic_load(gpu_busy_ns);
    if (v > mono_ns() + 60000000000ull)
        atomic_compare_exchange_strong(gpu_busy_ns, &v, 0);
}

static bool timeline(void)
{
    pthread_once(&timeline_once, timeline_open);
    return gpu_busy_ns != NULL;
}

/* busy_until of stream s: a stream's own, or the current context's legacy stream's (NULL,
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD alike). */
static _Atomic uint64_t *stream_busy(CUstream s)
{
    struct fk_obj *o = obj_check(s, K_STREAM);

    if (o == NULL)
        o = obj_check(current, K_CTX);
    return o != NULL ? &o->busy_ns : &no_ctx_busy_ns;
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);

    while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

/* Sleep until CLOCK_MONOTONIC reaches t (ns). */
static void wait_until(uint64_t t)
{
    uint64_t now;

    while ((now = mono_ns()) < t) {
        uint64_t d = t - now;
        struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

/* With FAKECUDA_GPU_TIMELINE: put ns of GPU work on stream s, after the stream's earlier work and
 * every process's earlier kernel (the GPU runs one at a time, in launch order), and return true
 * at once; without it, false (the kernel runs at the call). */
bool fk_timeline_run(CUstream s, uint64_t ns)
{
    _Atomic uint64_t *sb;
    uint64_t now, gpu, start, end;

    if (!timeline())
        return false;
    sb = stream_busy(s);
    now = mono_ns();
    gpu = atomic_load(gpu_busy_ns);
    do {
        start = now;
        if (atomic_load(sb) > start)
            start = atomic_load(sb);
        if (gpu > start)
            start = gpu;
        end = start + ns;
    } while (!atomic_compare_exchange_weak(gpu_busy_ns, &gpu, end));
    atomic_max(sb, end);
    atomic_max(&proc_busy_ns, end);
    return true;
}

/* Synchronous copies and cuCtxSynchronize: wait for every kernel of this process. */
static void timeline_wait_all(void)
{
    if (timeline())
        wait_until(atomic_load(&proc_busy_ns));
}

/* Index of the first allocation that starts above a (allocs is sorted); lock held. */
static size_t alloc_after(uintptr_t a)
{
    size_t lo = 0, hi = nallocs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)allocs[mid].p <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool fk_alloc_find(const void *p, void **base_p, size_t *len_p)
{
    size_t i;

    pthread_mutex_lock(&lock);
    i = alloc_after((uintptr_t)p);
    bool ok = i > 0 && (uintptr_t)p < (uintptr_t)allocs[i - 1].p + fk_page_up(allocs[i - 1].n);
    if (ok) {
        *base_p = allocs[i - 1].p;
        *len_p = fk_page_up(allocs[i - 1].n);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

bool fk_valid(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    size_t i;
    bool ok;

    if (a + len < a)
        return false;
    if (fk_global_valid(p, len) || fk_vmm_valid(p, len) || fk_ipc_valid(p, len) ||
        fk_hostreg_valid(p, len))
        return true;
    pthread_mutex_lock(&lock);
    i = alloc_after(a);
    ok = i > 0 && a + len <= (uintptr_t)allocs[i - 1].p + allocs[i - 1].n;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* ---- init, errors, devices ---- */

CUresult cuInit(unsigned int flags)
{
    TRACE("cuInit\n");
    initialized = true;
    return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult r;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult error_lookup(CUresult r, const char **s, bool name)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].r == r) {
            *s = name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorName(CUresult r, const char **s)
{
    return s ? error_lookup(r, s, true) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult r, const char **s)
{
    return s ? error_lookup(r, s, false) : CUDA_ERROR_INVALID_VALUE;
}

/* FAKECUDA_DEVICES=N (1..8, default 1): N devices alike, sharing the one memory and primary
 * context (tests/multigpu: P2P answers between two devices of one server). */
static int device_count(void)
{
    const char *e = getenv("FAKECUDA_DEVICES");
    int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}
CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = device_count();
    return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ord)
{
    NEED_INIT();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (ord < 0 || ord >= device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ord;
    return CUDA_SUCCESS;
}
#define NEED_DEV(d)                                                                                \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if ((d) < 0 || (d) >= device_count())                                                      \
            return CUDA_ERROR_INVALID_DEVICE;                                                      \
    } while (0)
CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    NEED_DEV(d);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "rgpu fake device");
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    NEED_DEV(d);
    if (!u)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(u->bytes,
           getenv("FAKECUDA_UUID") && strlen(getenv("FAKECUDA_UUID")) >= 16
               ? getenv("FAKECUDA_UUID")
               : "rgpu-fake-uuid-0",
           16);
    return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *b, CUdevice d)
{
    NEED_DEV(d);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    *b = total_mem();
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d)
{
    NEED_DEV(d);
    if (!s || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(s, (size_t)len, "0000:01:00.0");
    return CUDA_SUCCESS;
}

static int attribute(CUdevice_attribute a)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        return 233472;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        return 52428800;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        return 132;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return 1;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        return 2;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        return 512;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
        return fk_dmabuf_attribute(a);
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        return 1;
    default:
        return 0;
    }
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice d)
{
    NEED_DEV(d);
    if (!pi || (int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = attribute(a);
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    NEED_DEV(d);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    primary_refs++;
    *c = (CUcontext)&primary;
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    NEED_DEV(d);
    if (primary_refs > 0)
        primary_refs--;
    return CUDA_SUCCESS;
}
/* A reset destroys the primary context and its memory. The fake does not record which context
 * owns an allocation, so it frees them all (tests reset only when the primary is the only one). */
CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    NEED_DEV(d);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nallocs; i++) {
        fk_dmabuf_forget(allocs[i].p);
        free(allocs[i].p);
    }
    nallocs = 0;
    used = 0;
    pthread_mutex_unlock(&lock);
    primary.err = CUDA_SUCCESS;
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned f)
{
    NEED_DEV(d);
    primary.flags = f;
    return CUDA_SUCCESS;
}
CUresult cuCtxCreate(CUcontext *c, CUctxCreateParams *p, unsigned f, CUdevice d)
{
    NEED_DEV(d);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(*c = (CUcontext)obj_new(K_CTX)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    current = *c;
    return CUDA_SUCCESS;
}
CUresult cuCtxDestroy(CUcontext c)
{
    struct fk_obj *o = obj_check(c, K_CTX);
    if (!o || o == &primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (current == c)
        current = NULL;
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c)
{
    NEED_INIT();
    if (c && !obj_check(c, K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *c)
{
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = current;
    return CUDA_SUCCESS;
}
static void work_wait(CUstream s, unsigned long long ticket);
/* FAKECUDA_SYNC_SLEEP_MS: a context synchronize that takes that long, as one waiting for a long
 * kernel does (the session keepalive's tests). */
CUresult cuCtxSynchronize(void)
{
    const char *e = getenv("FAKECUDA_SYNC_SLEEP_MS");

    NEED_CTX();
    CAPTURE_SAFE();
    work_wait(FK_ALL_STREAMS, 0);
    timeline_wait_all();
    if (e != NULL && atoi(e) > 0)
        usleep((useconds_t)atoi(e) * 1000);
    return CUDA_SUCCESS;
}
/* Peer access between the fake's devices: FAKECUDA_P2P=1 says they reach each other (a host
 * with P2P between its GPUs), else not (one GPU served twice, or no P2P); a device is never its
 * own peer. Enabled pairs are remembered so that enabling twice or disabling what was not
 * enabled fails as in the driver. */
static bool p2p_ok(CUdevice a, CUdevice b)
{
    const char *e = getenv("FAKECUDA_P2P");
    return a != b && e && strcmp(e, "1") == 0;
}
CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
    NEED_DEV(d);
    NEED_DEV(peer);
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    *can = p2p_ok(d, peer);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute a, CUdevice src, CUdevice dst)
{
    NEED_DEV(src);
    NEED_DEV(dst);
    if (!v || a < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
        a > CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED || src == dst)
        return CUDA_ERROR_INVALID_VALUE;
    *v = !p2p_ok(src, dst) ? 0 : a == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 3 : 1;
    return CUDA_SUCCESS;
}
static const void *peer_on[16][2]; /* (context, peer) pairs enabled */
static int peer_find(const void *c, const void *p)
{
    for (int i = 0; i < 16; i++)
        if (peer_on[i][0] == c && peer_on[i][1] == p)
            return i;
    return -1;
}
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
    int i;
    NEED_CTX();
    if (!obj_check(peer, K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!p2p_ok(0, 1))
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (peer_find(current, peer) >= 0)
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if ((i = peer_find(NULL, NULL)) < 0)
        return CUDA_ERROR_TOO_MANY_PEERS;
    peer_on[i][0] = current, peer_on[i][1] = peer;
    return CUDA_SUCCESS;
}
CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    int i;
    NEED_CTX();
    if (!obj_check(peer, K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((i = peer_find(current, peer)) < 0)
        return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    peer_on[i][0] = peer_on[i][1] = NULL;
    return CUDA_SUCCESS;
}
static size_t limits[16];
CUresult cuCtxSetLimit(CUlimit l, size_t v)
{
    NEED_CTX();
    if ((unsigned)l >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    limits[l] = v;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetLimit(size_t *v, CUlimit l)
{
    NEED_CTX();
    if (!v || (unsigned)l >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    *v = limits[l];
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCacheConfig(CUfunc_cache c)
{
    NEED_CTX();
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

/* FAKECUDA_VA_BASE=<hex>: allocations at fixed addresses from there up (as a real driver picks
 * the same addresses in every process), so that two fake servers answer alike: what the client
 * must keep apart when it uses several (tests/multigpu). 0 when unset. */
static uintptr_t va_next, va_end;

static void *va_alloc(size_t len)
{
    return fk_va_map(len, PROT_READ | PROT_WRITE, -1);
}

void *fk_va_map(size_t len, int prot, int fd)
{
    const char *e = getenv("FAKECUDA_VA_BASE");
    void *p;

    if (va_end == 0 && e != NULL && e[0] != '\0') {
        va_next = (uintptr_t)strtoull(e, NULL, 16);
        va_end = va_next + ((size_t)64 << 30);
    }
    if (va_end == 0 || va_next + len > va_end)
        return NULL;
    p = mmap((void *)va_next, len, prot,
             (fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED) | MAP_FIXED_NOREPLACE, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    va_next += fk_page_up(len) + FK_PAGE;
    return p;
}

static bool va_owned(const void *p)
{
    return va_end != 0 && (uintptr_t)p >= va_end - ((size_t)64 << 30) && (uintptr_t)p < va_end;
}

CUresult cuMemAlloc(CUdeviceptr *d, size_t n)
{
    void *p;
    CUresult res = CUDA_SUCCESS;

    NEED_CTX();
    if (!d || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    /* Whole pages, so fake_dmabuf.c can alias an allocation with a memfd. */
    if (used + n > total_mem() || nallocs == MAX_ALLOCS ||
        ((p = va_alloc(fk_page_up(n))) == NULL && (p = fk_pages_reuse(fk_page_up(n))) == NULL &&
         posix_memalign(&p, FK_PAGE, fk_page_up(n)) != 0))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        size_t i = alloc_after((uintptr_t)p);
        memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof(allocs[0]));
        allocs[i].p = p, allocs[i].n = n;
        nallocs++;
        used += n;
        *d = (CUdeviceptr)p;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

CUresult cuMemAllocPitch(CUdeviceptr *d, size_t *pitch, size_t w, size_t h, unsigned e)
{
    const char *cap = getenv("FAKECUDA_ABORT_ABOVE_MB"); /* a test: nobody may ask for more */

    if (!pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (cap && w * h > strtoull(cap, NULL, 10) << 20)
        abort();
    *pitch = (w + 511) & ~(size_t)511;
    return cuMemAlloc(d, *pitch * h);
}

CUresult cuMemFree(CUdeviceptr d)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    NEED_CTX();
    pthread_mutex_lock(&lock);
    size_t i = alloc_after((uintptr_t)d);
    if (i > 0 && (CUdeviceptr)allocs[i - 1].p == d) {
        fk_dmabuf_forget(allocs[i - 1].p);
        if (va_owned(allocs[i - 1].p))
            munmap(allocs[i - 1].p, fk_page_up(allocs[i - 1].n));
        else
            fk_pages_free(allocs[i - 1].p, fk_page_up(allocs[i - 1].n));
        used -= allocs[i - 1].n;
        memmove(&allocs[i - 1], &allocs[i], (nallocs - i) * sizeof(allocs[0]));
        nallocs--;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

CUresult cuMemGetInfo(size_t *f, size_t *t)
{
    NEED_CTX();
    if (!f || !t)
        return CUDA_ERROR_INVALID_VALUE;
    *t = total_mem();
    *f = *t - used;
    return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f)
{
    NEED_CTX();
    CAPTURE_SAFE();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return (*p = malloc(n)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

#define DEV(d, n)                                                                                  \
    do {                                                                                           \
        if (!fk_valid((const void *)(uintptr_t)(d), (n)))                                          \
            return CUDA_ERROR_INVALID_VALUE;                                                       \
    } while (0)
#define STREAM_OK(s)                                                                               \
    do {                                                                                           \
        if ((s) && (s) != CU_STREAM_LEGACY && (s) != CU_STREAM_PER_THREAD &&                       \
            !obj_check((s), K_STREAM))                                                             \
            return CUDA_ERROR_INVALID_HANDLE;                                                      \
    } while (0)
/* The copies themselves, at the call (the asynchronous copies and graph nodes); the synchronous
 * calls wait for the legacy stream first (the timeline's kernels, as cuCtxSynchronize). */
static CUresult copy_htod(CUdeviceptr d, const void *h, size_t n)
{
    NEED_CTX();
    DEV(d, n);
    memcpy((void *)d, h, n);
    return CUDA_SUCCESS;
}
static CUresult copy_dtoh(void *h, CUdeviceptr d, size_t n)
{
    NEED_CTX();
    DEV(d, n);
    memcpy(h, (void *)d, n);
    return CUDA_SUCCESS;
}
static CUresult copy_dtod(CUdeviceptr a, CUdeviceptr b, size_t n)
{
    NEED_CTX();
    DEV(a, n);
    DEV(b, n);
    memmove((void *)a, (void *)b, n);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n)
{
    timeline_wait_all();
    return copy_htod(d, h, n);
}
CUresult cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n)
{
    timeline_wait_all();
    return copy_dtoh(h, d, n);
}
CUresult cuMemcpyDtoD(CUdeviceptr a, CUdeviceptr b, size_t n)
{
    timeline_wait_all();
    return copy_dtod(a, b, n);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    STREAM_OK(s);
    if (capturing(s)) {
        struct fk_node node = {.kind = 3,
                               .type = CU_GRAPH_NODE_TYPE_MEMCPY,
                               .dst = d,
                               .src = (CUdeviceptr)(uintptr_t)h,
                               .n = n};
        DEV(d, n);
        return record(capturing(s), &node);
    }
    return copy_htod(d, h, n);
}
CUresult cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    STREAM_OK(s);
    if (capturing(s)) {
        struct fk_node node = {.kind = 4,
                               .type = CU_GRAPH_NODE_TYPE_MEMCPY,
                               .dst = (CUdeviceptr)(uintptr_t)h,
                               .src = d,
                               .n = n};
        DEV(d, n);
        return record(capturing(s), &node);
    }
    return copy_dtoh(h, d, n);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s)
{
    STREAM_OK(s);
    if (capturing(s)) {
        struct fk_node node = {
            .kind = 2, .type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = a, .src = b, .n = n};
        return record(capturing(s), &node);
    }
    return copy_dtod(a, b, n);
}

static CUresult fill(CUdeviceptr d, size_t pitch, unsigned v, unsigned es, size_t w, size_t h)
{
    NEED_CTX();
    DEV(d, pitch * (h - 1) + w * es);
    for (size_t r = 0; r < h; r++)
        for (size_t i = 0; i < w; i++)
            memcpy((uint8_t *)d + r * pitch + i * es, &v, es); /* little endian */
    return CUDA_SUCCESS;
}
static CUresult fill_async(CUdeviceptr d, size_t pitch, unsigned v, unsigned es, size_t w, size_t h,
                           CUstream s)
{
    STREAM_OK(s);
    if (capturing(s)) {
        struct fk_node node = {.kind = 1,
                               .type = CU_GRAPH_NODE_TYPE_MEMSET,
                               .dst = d,
                               .pitch = pitch,
                               .v = v,
                               .es = es,
                               .w = w,
                               .h = h};
        return record(capturing(s), &node);
    }
    return fill(d, pitch, v, es, w, h);
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    return fill(d, n, v, 1, n, 1);
}
CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n)
{
    return fill(d, n * 2, v, 2, n, 1);
}
CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n)
{
    return fill(d, n * 4, v, 4, n, 1);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return fill_async(d, n, v, 1, n, 1, s);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return fill_async(d, n * 2, v, 2, n, 1, s);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return fill_async(d, n * 4, v, 4, n, 1, s);
}
CUresult cuMemsetD2D8(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
    return fill(d, p, v, 1, w, h);
}
CUresult cuMemsetD2D16(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h)
{
    return fill(d, p, v, 2, w, h);
}
CUresult cuMemsetD2D32(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h)
{
    return fill(d, p, v, 4, w, h);
}
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s)
{
    return fill_async(d, p, v, 1, w, h, s);
}
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h,
                            CUstream s)
{
    return fill_async(d, p, v, 2, w, h, s);
}
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s)
{
    return fill_async(d, p, v, 4, w, h, s);
}

/* ---- modules, libraries, kernels ---- */

static CUresult image_ok(const void *image)
{
    uint32_t magic;

    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    /* an image shorter than its magic number is text ending within it: read no further */
    if (strnlen(image, 4) < 4)
        return strstr(image, ".version") != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
    memcpy(&magic, image, 4);
    if (magic == 0x466243B1u) { /* __fatBinC_Wrapper_t: the fatbin pointer is at offset 8 */
        const void *data;
        memcpy(&data, (const char *)image + 8, sizeof(data));
        if (!data)
            return CUDA_ERROR_INVALID_IMAGE;
        memcpy(&magic, data, 4);
    }
    if (magic == 0xBA55ED50u ||
        memcmp(image,
               "\x7f"
               "ELF",
               4) == 0 ||
        strstr(image, ".version") != NULL || strstr(image, ".entry") != NULL)
        return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_IMAGE;
}

static CUresult load(void **h, const void *image)
{
    CUresult res = image_ok(image);

    if (res != CUDA_SUCCESS)
        return res;
    return (*h = obj_new(K_MODULE)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    NEED_CTX();
    return m ? load((void **)m, image) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *o, void **ov, unsigned n,
                           CUlibraryOption *lo, void **lov, unsigned ln)
{
    CUresult res;

    NEED_INIT();
    res = l ? load((void **)l, code) : CUDA_ERROR_INVALID_VALUE;
    fk_jit_report(n, o, ov, res, NULL);
    if (res == CUDA_SUCCESS)
        fk_preserve_note(*l, code, ln, lo, lov);
    return res;
}
static CUresult unload(void *h)
{
    struct fk_obj *o = obj_check(h, K_MODULE);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m)
{
    return unload(m);
}
CUresult cuLibraryUnload(CUlibrary l)
{
    CUresult kept = fk_preserve_check(l), res = unload(l);

    return res == CUDA_SUCCESS ? kept : res;
}
CUresult cuLibraryGetModule(CUmodule *m, CUlibrary l)
{
    if (!obj_check(l, K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    *m = (CUmodule)l;
    return CUDA_SUCCESS;
}

static CUresult find(void **f, void *owner, const char *name)
{
    const struct fk_kernel *k;

    if (!obj_check(owner, K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!f || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if ((k = fk_kernel_find(name)) == NULL) {
        TRACE("no test kernel named %s\n", name);
        return CUDA_ERROR_NOT_FOUND;
    }
    *f = (void *)k;
    return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    NEED_CTX();
    return find((void **)f, m, name);
}
CUresult cuModuleGetFunctionCount(unsigned *n, CUmodule m)
{
    unsigned i = 0;
    NEED_CTX();
    if (!obj_check(m, K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    while (fk_kernel_at(i))
        i++;
    *n = i;
    return CUDA_SUCCESS;
}
CUresult cuModuleEnumerateFunctions(CUfunction *fs, unsigned n, CUmodule m)
{
    NEED_CTX();
    if (!obj_check(m, K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fs)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if (!(fs[i] = (CUfunction)fk_kernel_at(i)))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
CUresult cuFuncGetName(const char **name, CUfunction f)
{
    if (!name || !f)
        return CUDA_ERROR_INVALID_VALUE;
    *name = ((const struct fk_kernel *)f)->name;
    return CUDA_SUCCESS;
}
CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name)
{
    NEED_INIT();
    return find((void **)k, l, name);
}
CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
    NEED_CTX();
    if (!f || !k)
        return CUDA_ERROR_INVALID_VALUE;
    *f = (CUfunction)k;
    return CUDA_SUCCESS;
}

static CUresult global(CUdeviceptr *d, size_t *n, void *owner, const char *name)
{
    const struct fk_global *g;

    if (!obj_check(owner, K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if ((g = fk_global_find(name)) == NULL)
        return CUDA_ERROR_NOT_FOUND;
    if (d)
        *d = (CUdeviceptr)g->storage;
    if (n)
        *n = g->size;
    return CUDA_SUCCESS;
}
CUresult cuModuleGetGlobal(CUdeviceptr *d, size_t *n, CUmodule m, const char *name)
{
    NEED_CTX();
    return global(d, n, m, name);
}
CUresult cuLibraryGetGlobal(CUdeviceptr *d, size_t *n, CUlibrary l, const char *name)
{
    NEED_CTX();
    return global(d, n, l, name);
}

#define FK_STATIC_SHARED 1024 /* every fake kernel's static shared memory */
static CUresult func_attr(int *v, CUfunction_attribute a)
{
    static const int values[CU_FUNC_ATTRIBUTE_MAX] = {
        [CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024,
        [CU_FUNC_ATTRIBUTE_NUM_REGS] = 32,
        [CU_FUNC_ATTRIBUTE_PTX_VERSION] = 90,
        [CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 90,
        [CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152,
        [CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1,
        [CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] = FK_STATIC_SHARED};
    if (!v || (unsigned)a >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *v = values[a];
    return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    NEED_CTX();
    return f ? func_attr(v, a) : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d)
{
    NEED_DEV(d);
    return k ? func_attr(v, a) : CUDA_ERROR_INVALID_HANDLE;
}
/* As the driver: the dynamic shared size plus the function's static size must fit the device's
 * opt-in maximum (a failure the client cannot see coming: tests/integration/local_answers). */
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    NEED_CTX();
    if ((unsigned)a >= CU_FUNC_ATTRIBUTE_MAX ||
        (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && v > 232448 - FK_STATIC_SHARED))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice d)
{
    NEED_DEV(d);
    return (unsigned)a < CU_FUNC_ATTRIBUTE_MAX ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache c)
{
    NEED_CTX();
    return CUDA_SUCCESS;
}
CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache c, CUdevice d)
{
    NEED_DEV(d);
    return CUDA_SUCCESS;
}

static CUresult param_info(const void *h, size_t i, size_t *off, size_t *size)
{
    const struct fk_kernel *k = h;
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (i >= k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = k->off[i];
    if (size)
        *size = k->size[i];
    return CUDA_SUCCESS;
}
CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *o, size_t *s)
{
    return param_info(f, i, o, s);
}
CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t *o, size_t *s)
{
    return param_info(k, i, o, s);
}

/* ---- launches ---- */

static __thread CUstream graph_stream; /* the stream of the graph launch being replayed */

static CUresult launch(const struct fk_kernel *k, const unsigned g[3], const unsigned b[3],
                       CUstream s, void **params, void **extra)
{
    void *slots[8];
    /* a graph's kernels replay on the NULL stream; the timeline puts them on the launch's */
    struct fk_launch l = {{g[0], g[1], g[2]}, {b[0], b[1], b[2]}, params, s ? s : graph_stream};
    CUresult res;

    NEED_CTX();
    STREAM_OK(s);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((uint64_t)b[0] * b[1] * b[2] > 1024 || !g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
        return CUDA_ERROR_INVALID_VALUE;
    if (extra != NULL) {
        uint8_t *buf = NULL;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2)
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
        if (!buf)
            return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < k->nparams; i++)
            slots[i] = buf + k->off[i];
        l.params = slots;
    }
    if (!l.params && k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (capturing(s)) { /* the parameters are copied now, as the driver does */
        struct fk_node node = {.kind = 0,
                               .type = CU_GRAPH_NODE_TYPE_KERNEL,
                               .k = k,
                               .g = {g[0], g[1], g[2]},
                               .b = {b[0], b[1], b[2]}};
        for (unsigned i = 0; i < k->nparams; i++)
            if (k->off[i] + k->size[i] <= sizeof(node.params))
                memcpy(node.params + k->off[i], l.params[i], k->size[i]);
        return record(capturing(s), &node);
    }
    TRACE("launch %s <<<%u,%u>>>\n", k->name, g[0] * g[1] * g[2], b[0] * b[1] * b[2]);
    res = k->run(&l);
    if (res == CUDA_ERROR_ILLEGAL_ADDRESS ||
        res == CUDA_ERROR_ASSERT) /* sticky, reported by the next call as a GPU does */
        ((struct fk_obj *)current)->err = res;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                        void **extra)
{
    unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    return launch((const struct fk_kernel *)f, g, b, s, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
    unsigned b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch((const struct fk_kernel *)f, g, b, c->hStream, params, extra);
}

/* ---- streams and events ---- */

CUresult cuStreamCreateWithPriority(CUstream *s, unsigned f, int p)
{
    NEED_CTX();
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    return (*s = (CUstream)obj_new(K_STREAM)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static void capture_abandon(struct fk_obj *o);
CUresult cuStreamDestroy(CUstream s)
{
    struct fk_obj *o = obj_check(s, K_STREAM);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    capture_abandon(o);
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}
/* Device work of another fake library (fakecuda.h, fakecuda_device_work): stream and event
 * synchronization waits for it, queries see it, as a GPU's would. */
static const struct fk_device_work *dev_work;
void fakecuda_device_work(const struct fk_device_work *w)
{
    dev_work = w;
}
static bool work_done(CUstream s, unsigned long long ticket)
{
    return dev_work == NULL || dev_work->done(s, ticket);
}
static unsigned long long work_ticket(CUstream s)
{
    return dev_work != NULL ? dev_work->ticket(s) : 0;
}
static void work_wait(CUstream s, unsigned long long ticket)
{
    const struct timespec nap = {0, 50 * 1000};
    while (!work_done(s, ticket))
        nanosleep(&nap, NULL);
}
CUresult cuStreamSynchronize(CUstream s)
{
    NEED_CTX();
    STREAM_OK(s);
    work_wait(s, work_ticket(s));
    if (timeline())
        wait_until(atomic_load(stream_busy(s)));
    return CUDA_SUCCESS;
}
/* Stream attributes: remembered per process (enough for the tests), the priority read back. */
static CUstreamAttrValue stream_attrs[16];
CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID a, const CUstreamAttrValue *v)
{
    NEED_CTX();
    STREAM_OK(s);
    if (!v || (unsigned)a >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    stream_attrs[a] = *v;
    return CUDA_SUCCESS;
}
CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID a, CUstreamAttrValue *v)
{
    NEED_CTX();
    STREAM_OK(s);
    if (!v || (unsigned)a >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    *v = stream_attrs[a];
    return CUDA_SUCCESS;
}
CUresult cuStreamQuery(CUstream s)
{
    NEED_CTX();
    STREAM_OK(s);
    if (timeline() && atomic_load(stream_busy(s)) > mono_ns())
        return CUDA_ERROR_NOT_READY;
    return work_done(s, work_ticket(s)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f)
{
    struct fk_obj *o = obj_check(e, K_EVENT);

    NEED_CTX();
    STREAM_OK(s);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (timeline() && o->recorded) /* the stream's later work starts after the event */
        atomic_max(stream_busy(s), o->at_ns);
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned f)
{
    NEED_CTX();
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_obj *o = obj_new(K_EVENT);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->flags = f;
    *e = (CUevent)o;
    return CUDA_SUCCESS;
}
unsigned fk_event_flags(CUevent e)
{
    struct fk_obj *o = obj_check(e, K_EVENT);
    return o ? o->flags : ~0u;
}
CUresult cuEventDestroy(CUevent e)
{
    struct fk_obj *o = obj_check(e, K_EVENT);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned f)
{
    struct fk_obj *o = obj_check(e, K_EVENT);
    NEED_CTX();
    STREAM_OK(s);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (timeline()) { /* when the stream gets to it */
        uint64_t now = mono_ns(), busy = atomic_load(stream_busy(s));
        o->at_ns = busy > now ? busy : now;
    } else {
        /* Work "runs" at once; a small spin makes consecutive events measurably apart. */
        uint64_t t = mono_ns();
        while (mono_ns() - t < 10000)
            ;
        o->at_ns = mono_ns();
    }
    o->recorded = true;
    o->wstream = s;
    o->wticket = work_ticket(s);
    return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent e)
{
    NEED_CTX();
    CAPTURE_SAFE();
    struct fk_obj *o = obj_check(e, K_EVENT);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    work_wait(o->wstream, o->wticket);
    wait_until(o->at_ns);
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent e)
{
    NEED_CTX();
    struct fk_obj *o = obj_check(e, K_EVENT);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (o->at_ns > mono_ns())
        return CUDA_ERROR_NOT_READY;
    return work_done(o->wstream, o->wticket) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    struct fk_obj *x = obj_check(a, K_EVENT), *y = obj_check(b, K_EVENT);
    NEED_CTX();
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!x || !y || (x->flags & CU_EVENT_DISABLE_TIMING) || (y->flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!x->recorded || !y->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)(((double)y->at_ns - (double)x->at_ns) / 1e6);
    return CUDA_SUCCESS;
}

/* ---- occupancy ---- */

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int bs,
                                                              size_t sm, unsigned fl)
{
    NEED_CTX();
    if (!n || bs <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 2048 / bs > 32 ? 32 : 2048 / bs;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c)
{
    NEED_CTX();
    if (!n || !c)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 16;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *s, CUfunction f, int nb, int bs)
{
    NEED_CTX();
    if (!s || nb <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *s = 233472 / (size_t)nb;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *g, int *b, CUfunction f,
                                                   CUoccupancyB2DSize cb, size_t sm, int lim,
                                                   unsigned fl)
{
    NEED_CTX();
    if (!g || !b)
        return CUDA_ERROR_INVALID_VALUE;
    *b = lim > 0 && lim < 1024 ? lim : 1024;
    *g = 264;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation (runs at once, like everything here) ---- */

CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s)
{
    STREAM_OK(s);
    return cuMemAlloc(d, n);
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s)
{
    STREAM_OK(s);
    return cuMemFree(d);
}

/* ---- stream capture and graphs ---- */

static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode, struct fk_graph *into)
{
    struct fk_obj *o = obj_check(s, K_STREAM);
    struct fk_graph *g = into;

    NEED_CTX();
    if (!o)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the NULL/legacy stream */
    if (o->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (!g && !(g = calloc(1, sizeof(*g))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->obj.magic = FK_MAGIC;
    g->obj.kind = K_GRAPH;
    g->into = into != NULL;
    g->invalidated = false;
    g->deps.n = 0;
    g->global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (g->global)
        global_capture_track(g, true);
    o->capture = g;
    return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, NULL);
}
/* A stream destroyed while it captures: the capture ends with it (its graph was never handed
 * out, unless it captured into the caller's graph). */
static void capture_abandon(struct fk_obj *o)
{
    struct fk_graph *g = o->capture;

    if (!g)
        return;
    o->capture = NULL;
    if (g->global)
        global_capture_track(g, false);
    if (!g->into)
        free(g);
}
/* The captured nodes follow the graph's own (nodes run in the order they were added). */
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode *deps,
                                     const CUgraphEdgeData *e, size_t n, CUstreamCaptureMode mode)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    CUresult res;

    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n > FK_MAX_CAPTURE_DEPS || (n && !deps) || !nodes_in(g, deps, n))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = begin_capture(s, mode, g)) != CUDA_SUCCESS)
        return res;
    g->deps.n = n;
    if (n)
        memcpy(g->deps.nodes, deps, n * sizeof(*deps));
    return CUDA_SUCCESS;
}

CUgraph fk_capture_of(CUstream s, bool *invalidated_p, struct fk_capture_deps **deps_p)
{
    struct fk_graph *g = capturing(s);

    if (g)
        *invalidated_p = g->invalidated, *deps_p = &g->deps;
    return (CUgraph)g;
}

bool fk_graph_has_nodes(CUgraph graph, const CUgraphNode *nodes, size_t n)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    return g && (!n || nodes) && nodes_in(g, nodes, n);
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *graph)
{
    struct fk_obj *o = obj_check(s, K_STREAM);

    NEED_CTX();
    if (!o || !o->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    struct fk_graph *g = o->capture;
    o->capture = NULL;
    if (g->global)
        global_capture_track(g, false);
    if (g->invalidated) {
        if (!g->into)
            free(g);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *graph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH), *e;

    NEED_CTX();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!exec)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(e = malloc(sizeof(*e))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *e = *g;
    e->obj.kind = K_EXEC;
    e->origin = g;
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static CUresult replay(const struct fk_node *n)
{
    if (n->kind == 1)
        return fill(n->dst, n->pitch, n->v, n->es, n->w, n->h);
    if (n->kind == 2)
        return copy_dtod(n->dst, n->src, n->n);
    if (n->kind == 3)
        return copy_htod(n->dst, (const void *)n->src, n->n);
    if (n->kind == 4)
        return copy_dtoh((void *)n->dst, n->src, n->n);
    if (n->kind == 5)
        return CUDA_SUCCESS;
    if (n->kind == 6)
        return n->run(n->arg);
    void *params[8];
    for (unsigned i = 0; i < n->k->nparams; i++)
        params[i] = (void *)(n->params + n->k->off[i]);
    return launch(n->k, n->g, n->b, NULL, params, NULL);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    struct fk_graph *e = (struct fk_graph *)obj_check(exec, K_EXEC);
    CUresult res;

    NEED_CTX();
    STREAM_OK(s);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    fk_cond_launch(e->origin);
    graph_stream = s;
    res = fk_graph_run((CUgraph)e);
    graph_stream = NULL;
    return res;
}

CUresult fk_graph_run(CUgraph graph)
{
    const struct fk_graph *g = (const struct fk_graph *)graph;
    CUresult res = CUDA_SUCCESS;

    for (int i = 0; i < g->n && res == CUDA_SUCCESS; i++)
        if (!g->nodes[i].disabled)
            res = replay(&g->nodes[i]);
    return res;
}

bool fk_graph_valid(CUgraph g)
{
    return obj_check(g, K_GRAPH) != NULL;
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
    NEED_CTX();
    return obj_check(exec, K_EXEC) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    struct fk_obj *o = obj_check(exec, K_EXEC);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph graph)
{
    struct fk_obj *o = obj_check(graph, K_GRAPH);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    o->magic = 0;
    free(o);
    return CUDA_SUCCESS;
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode old = thread_mode;

    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *num)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);

    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; nodes && i < g->n && (size_t)i < *num; i++)
        nodes[i] = (CUgraphNode)&g->nodes[i];
    *num = (size_t)g->n;
    return CUDA_SUCCESS;
}

/* ---- graphs built node by node: nodes run in the order they were added (dependencies can
 * only name earlier nodes, so that order respects them) ---- */

CUresult cuGraphCreate(CUgraph *graph, unsigned flags)
{
    struct fk_graph *g;

    NEED_CTX();
    if (!graph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(g = calloc(1, sizeof(*g))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->obj.magic = FK_MAGIC;
    g->obj.kind = K_GRAPH;
    *graph = (CUgraph)g;
    return CUDA_SUCCESS;
}

static bool nodes_in(struct fk_graph *g, const CUgraphNode *deps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((struct fk_node *)deps[i] < g->nodes || (struct fk_node *)deps[i] >= g->nodes + g->n)
            return false;
    return true;
}

static CUresult add(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                    struct fk_node *node)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    CUresult res;

    NEED_CTX();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!out || (ndeps && !deps) || !nodes_in(g, deps, ndeps))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = append(g, node, deps, ndeps)) == CUDA_SUCCESS)
        *out = (CUgraphNode)&g->nodes[g->n - 1];
    return res;
}

CUresult fk_graph_add_run(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                          CUgraphNodeType type, CUresult (*run)(void *), void *arg)
{
    struct fk_node node = {.kind = 6, .type = type, .run = run, .arg = arg};
    return add(out, g, deps, n, &node);
}

static CUresult kernel_node(struct fk_node *node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    const struct fk_kernel *k =
        p ? (const struct fk_kernel *)(p->func ? (void *)p->func : (void *)p->kern) : NULL;

    if (!k)
        return CUDA_ERROR_INVALID_VALUE;
    if (!p->kernelParams && k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *node = (struct fk_node){.kind = 0,
                             .type = CU_GRAPH_NODE_TYPE_KERNEL,
                             .k = k,
                             .g = {p->gridDimX, p->gridDimY, p->gridDimZ},
                             .b = {p->blockDimX, p->blockDimY, p->blockDimZ}};
    for (unsigned i = 0; i < k->nparams; i++)
        if (k->off[i] + k->size[i] <= sizeof(node->params))
            memcpy(node->params + k->off[i], p->kernelParams[i], k->size[i]);
    return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct fk_node node;
    CUresult res = kernel_node(&node, p);
    return res == CUDA_SUCCESS ? add(out, g, deps, n, &node) : res;
}

static CUresult memset_node(struct fk_node *node, const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    DEV(p->dst, p->pitch * (p->height - 1) + p->width * p->elementSize);
    *node = (struct fk_node){.kind = 1,
                             .type = CU_GRAPH_NODE_TYPE_MEMSET,
                             .dst = p->dst,
                             .pitch = p->pitch ? p->pitch : p->width * p->elementSize,
                             .v = p->value,
                             .es = p->elementSize,
                             .w = p->width,
                             .h = p->height};
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    struct fk_node node;
    CUresult res = memset_node(&node, p);
    return res == CUDA_SUCCESS ? add(out, g, deps, n, &node) : res;
}

static CUresult memcpy_node(struct fk_node *out, const CUDA_MEMCPY3D *c);
CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    struct fk_node node;
    CUresult res = memcpy_node(&node, c);
    return res == CUDA_SUCCESS ? add(out, g, deps, n, &node) : res;
}

static CUresult memcpy_node(struct fk_node *out, const CUDA_MEMCPY3D *c)
{
    struct fk_node node = {.type = CU_GRAPH_NODE_TYPE_MEMCPY};
    bool sd = c && c->srcMemoryType == CU_MEMORYTYPE_DEVICE,
         dd = c && c->dstMemoryType == CU_MEMORYTYPE_DEVICE;

    if (!c || c->Height != 1 || c->Depth != 1 || c->srcXInBytes || c->dstXInBytes || c->srcY ||
        c->dstY)
        return CUDA_ERROR_INVALID_VALUE;
    node.n = c->WidthInBytes;
    node.kind = sd && dd ? 2 : dd ? 3 : sd ? 4 : -1;
    if (node.kind < 0)
        return CUDA_ERROR_INVALID_VALUE;
    node.src = sd ? c->srcDevice : (CUdeviceptr)(uintptr_t)c->srcHost;
    node.dst = dd ? c->dstDevice : (CUdeviceptr)(uintptr_t)c->dstHost;
    if (sd)
        DEV(node.src, node.n);
    if (dd)
        DEV(node.dst, node.n);
    *out = node;
    return CUDA_SUCCESS;
}

static CUresult nothing(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                        CUgraphNodeType type)
{
    struct fk_node node = {.kind = 5, .type = type};
    return add(out, g, deps, n, &node);
}
CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n)
{
    return nothing(out, g, deps, n, CU_GRAPH_NODE_TYPE_EMPTY);
}
CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                 CUevent e)
{
    return obj_check(e, K_EVENT) ? nothing(out, g, deps, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT)
                                 : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                   CUevent e)
{
    return obj_check(e, K_EVENT) ? nothing(out, g, deps, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD)
                                 : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                               CUdeviceptr d)
{
    return nothing(out, g, deps, n, CU_GRAPH_NODE_TYPE_MEM_FREE);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    CUresult res;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = cuMemAlloc(&p->dptr, p->bytesize)) != CUDA_SUCCESS)
        return res; /* lives as long as the process */
    return nothing(out, g, deps, n, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps,
                                  size_t n, CUgraph child)
{
    struct fk_graph *c = (struct fk_graph *)obj_check(child, K_GRAPH);
    CUresult res = CUDA_SUCCESS;

    if (!c)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < c->n && res == CUDA_SUCCESS;
         i++) { /* inlined: the child runs in place, in order */
        CUgraphNode prev = i ? *out : NULL;
        res = add(out, graph, i ? &prev : deps, i ? 1 : n, &c->nodes[i]);
    }
    if (res == CUDA_SUCCESS && (res = nothing(out, graph, c->n ? out : deps, c->n ? 1 : n,
                                              CU_GRAPH_NODE_TYPE_GRAPH)) == CUDA_SUCCESS)
        ((struct fk_node *)*out)->n = (size_t)c->n; /* how many inlined nodes precede it */
    return res;
}

/* ---- nodes of an executable graph changed in place (XLA's command buffer updates) ---- */

/* The executable graph's copy of node (of the graph it was made from), any type; NULL if none. */
static struct fk_node *exec_node_any(struct fk_graph *e, CUgraphNode node)
{
    int i = node ? ((struct fk_node *)node)->idx : -1;
    return e && i >= 0 && i < e->n ? &e->nodes[i] : NULL;
}

static struct fk_node *exec_node(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type)
{
    struct fk_node *n = exec_node_any((struct fk_graph *)obj_check(exec, K_EXEC), node);
    return n && n->type == type ? n : NULL;
}

/* The new parameters, in the node's place and order (idx, dependencies, enabled kept). */
static CUresult exec_node_set(struct fk_node *n, struct fk_node *params)
{
    params->idx = n->idx, params->ndeps = n->ndeps, params->disabled = n->disabled;
    memcpy(params->dep, n->dep, sizeof(n->dep));
    memcpy(params->dep_edge, n->dep_edge, sizeof(n->dep_edge));
    *n = *params;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                        const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    struct fk_node *n = exec_node(exec, node, CU_GRAPH_NODE_TYPE_MEMSET), params;
    CUresult res = n ? memset_node(&params, p) : CUDA_ERROR_INVALID_VALUE;
    return res == CUDA_SUCCESS ? exec_node_set(n, &params) : res;
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *c,
                                        CUcontext ctx)
{
    struct fk_node *n = exec_node(exec, node, CU_GRAPH_NODE_TYPE_MEMCPY), params;
    CUresult res = n ? memcpy_node(&params, c) : CUDA_ERROR_INVALID_VALUE;
    return res == CUDA_SUCCESS ? exec_node_set(n, &params) : res;
}

/* The child's nodes were inlined just before its node: the new child must have as many. */
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child)
{
    struct fk_node *n = exec_node(exec, node, CU_GRAPH_NODE_TYPE_GRAPH);
    struct fk_graph *c = (struct fk_graph *)obj_check(child, K_GRAPH);

    if (!n || !c)
        return CUDA_ERROR_INVALID_VALUE;
    if ((size_t)c->n != n->n)
        return CUDA_ERROR_INVALID_VALUE; /* the driver wants the same topology */
    for (int i = 0; i < c->n; i++) {
        struct fk_node params = c->nodes[i], *old = n - c->n + i;
        if (old->type != params.type)
            return CUDA_ERROR_INVALID_VALUE;
        exec_node_set(old, &params);
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned enabled)
{
    struct fk_node *n = exec_node_any((struct fk_graph *)obj_check(exec, K_EXEC), node);

    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL && n->type != CU_GRAPH_NODE_TYPE_MEMSET &&
        n->type != CU_GRAPH_NODE_TYPE_MEMCPY)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver */
    n->disabled = !enabled;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned *enabled)
{
    struct fk_node *n = exec_node_any((struct fk_graph *)obj_check(exec, K_EXEC), node);

    if (!n || !enabled)
        return CUDA_ERROR_INVALID_VALUE;
    *enabled = !n->disabled;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode *from, const CUgraphNode *to,
                                const CUgraphEdgeData *e, size_t n)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!nodes_in(g, from, n) || !nodes_in(g, to, n))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; e && i < n; i++) /* a programmatic edge joins two kernels from port 1 or 2 */
        if (e[i].to_port || e[i].type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
            (e[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && e[i].from_port) ||
            (e[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
             (((struct fk_node *)from[i])->type != CU_GRAPH_NODE_TYPE_KERNEL ||
              ((struct fk_node *)to[i])->type != CU_GRAPH_NODE_TYPE_KERNEL || !e[i].from_port ||
              e[i].from_port > 2)))
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) /* the order of addition must already respect each edge */
        if (((struct fk_node *)from[i])->idx >= ((struct fk_node *)to[i])->idx)
            return CUDA_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < n; i++)
        follow((struct fk_node *)to[i], (const struct fk_node *)from[i], e ? &e[i] : NULL);
    return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph *out, CUgraph graph)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH), *c;
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(c = malloc(sizeof(*c))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = *g;
    *out = (CUgraph)c;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    if (!node || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = ((struct fk_node *)node)->type;
    return CUDA_SUCCESS;
}

/* Graph structure: roots, a node's dependencies and its dependents, as the driver lists them
 * (with nodes, *n in is the room and out what was filled; without, out is the count). */
static void list_node(struct fk_node *n, const CUgraphEdgeData *e, CUgraphNode *nodes,
                      CUgraphEdgeData *edges, size_t room, size_t *k)
{
    if (nodes && *k < room) {
        nodes[*k] = (CUgraphNode)n;
        if (edges)
            edges[*k] = e ? *e : (CUgraphEdgeData){0};
    }
    (*k)++;
}

static CUresult listed(CUgraphNode *nodes, size_t *n, size_t k)
{
    for (size_t i = k; nodes && i < *n; i++)
        nodes[i] = NULL;
    *n = nodes && k > *n ? *n : k;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode *roots, size_t *n)
{
    struct fk_graph *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    size_t k = 0;

    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].ndeps == 0)
            list_node(&g->nodes[i], NULL, roots, NULL, *n, &k);
    return listed(roots, n, k);
}

CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, CUgraphEdgeData *edges,
                                    size_t *n)
{
    struct fk_node *nd = (struct fk_node *)node, *first;
    size_t k = 0;

    if (!nd || !n)
        return CUDA_ERROR_INVALID_VALUE;
    if (nd->ndeps > FK_MAX_NODE_DEPS)
        return CUDA_ERROR_NOT_SUPPORTED;
    first = nd - nd->idx;
    for (unsigned i = 0; i < nd->ndeps; i++)
        list_node(&first[nd->dep[i]], &nd->dep_edge[i], deps, edges, *n, &k);
    return listed(deps, n, k);
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *dependents,
                                      CUgraphEdgeData *edges, size_t *n)
{
    struct fk_node *nd = (struct fk_node *)node, *first;
    struct fk_graph *g;
    size_t k = 0;

    if (!nd || !n)
        return CUDA_ERROR_INVALID_VALUE;
    first = nd - nd->idx;
    g = (struct fk_graph *)((char *)first - offsetof(struct fk_graph, nodes));
    for (int i = nd->idx + 1; i < g->n; i++)
        for (unsigned j = 0; j < g->nodes[i].ndeps && j < FK_MAX_NODE_DEPS; j++)
            if (g->nodes[i].dep[j] == nd->idx)
                list_node(&g->nodes[i], &g->nodes[i].dep_edge[j], dependents, edges, *n, &k);
    return listed(dependents, n, k);
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                        const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct fk_graph *e = (struct fk_graph *)obj_check(exec, K_EXEC);
    struct fk_node kn, *n = exec_node_any(e, node);
    CUresult res;

    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!n || n->kind != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = kernel_node(&kn, p)) != CUDA_SUCCESS)
        return res;
    return exec_node_set(n, &kn); /* its dependencies and enabled flag kept, as the driver's */
}

CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info)
{
    struct fk_graph *e = (struct fk_graph *)obj_check(exec, K_EXEC),
                    *g = (struct fk_graph *)obj_check(graph, K_GRAPH);
    bool same = e && g && e->n == g->n;

    if (!e || !g || !info)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; same && i < g->n; i++)
        same = e->nodes[i].type == g->nodes[i].type;
    info->result =
        same ? CU_GRAPH_EXEC_UPDATE_SUCCESS : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    info->errorNode = info->errorFromNode = NULL;
    if (!same)
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    memcpy(e->nodes, g->nodes, sizeof(g->nodes));
    return CUDA_SUCCESS;
}

/* ---- host functions, device-wide odds and ends ---- */

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    struct fk_node node = {.kind = 5, .type = CU_GRAPH_NODE_TYPE_HOST};

    NEED_CTX();
    STREAM_OK(s);
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (capturing(s))
        return record(capturing(s), &node); /* the fake's graphs skip it */
    fn(data);
    return CUDA_SUCCESS;
}
CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS *p)
{
    struct fk_node node = {.kind = 5, .type = CU_GRAPH_NODE_TYPE_HOST};
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    return add(out, g, deps, n, &node);
}
CUresult cuCtxResetPersistingL2Cache(void)
{
    NEED_CTX();
    return CUDA_SUCCESS;
}
static cuuint64_t graph_mem_attrs[4];
CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v)
{
    NEED_INIT();
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!v || (unsigned)a >= 4)
        return CUDA_ERROR_INVALID_VALUE;
    *(cuuint64_t *)v = graph_mem_attrs[a];
    return CUDA_SUCCESS;
}
CUresult cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v)
{
    NEED_INIT();
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!v || (a != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && a != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) ||
        *(cuuint64_t *)v != 0)
        return CUDA_ERROR_INVALID_VALUE;
    graph_mem_attrs[a] = 0;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGraphMemTrim(CUdevice d)
{
    NEED_INIT();
    return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Tensor maps: the fake encodes what it was given so a test can read it back. Words (u64) of the
 * 128 bytes: [0] global address, [1] kind (1 tiled, 2 im2col, 3 im2col wide) | dtype << 8 |
 * rank << 16 | swizzle << 24 | oob << 32, [2..6] globalDim, [7..10] globalStrides,
 * [11] box (tiled: boxDim[0] | boxDim[1] << 32; im2col: channels | pixels << 32),
 * [12] elementStrides[0] | lower corner (first) << 32, [13] upper corner (first), [14] mode.
 * Like the driver: the address must be 16-byte aligned, 1 <= rank <= 5 (3 for im2col). */
static CUresult fk_tensor_map(CUtensorMap *m, unsigned kind, CUtensorMapDataType dt,
                              cuuint32_t rank, void *addr, const cuuint64_t *dim,
                              const cuuint64_t *strides, unsigned sw, unsigned oob)
{
    uint64_t *w = (uint64_t *)m;

    NEED_CTX();
    if (!m || !dim || rank == 0 || rank > 5 || (kind > 1 && rank < 3) || ((uintptr_t)addr & 15))
        return CUDA_ERROR_INVALID_VALUE;
    memset(m, 0, sizeof(*m));
    w[0] = (uintptr_t)addr;
    w[1] =
        kind | (uint64_t)dt << 8 | (uint64_t)rank << 16 | (uint64_t)sw << 24 | (uint64_t)oob << 32;
    for (unsigned i = 0; i < rank; i++) {
        w[2 + i] = dim[i];
        if (i + 1 < rank)
            w[7 + i] = strides[i];
    }
    return CUDA_SUCCESS;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                const cuuint64_t *dim, const cuuint64_t *strides,
                                const cuuint32_t *box, const cuuint32_t *es,
                                CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = fk_tensor_map(m, 1, dt, rank, addr, dim, strides, sw, oob);
    (void)il;
    (void)l2;
    if (r == CUDA_SUCCESS) {
        ((uint64_t *)m)[11] = box[0] | (rank > 1 ? (uint64_t)box[1] << 32 : 0);
        ((uint64_t *)m)[12] = es[0];
    }
    return r;
}
CUresult cuTensorMapEncodeIm2col(CUtensorMap *m, CUtensorMapDataType dt, cuuint32_t rank,
                                 void *addr, const cuuint64_t *dim, const cuuint64_t *strides,
                                 const int *lo, const int *up, cuuint32_t ch, cuuint32_t px,
                                 const cuuint32_t *es, CUtensorMapInterleave il,
                                 CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                 CUtensorMapFloatOOBfill oob)
{
    CUresult r = fk_tensor_map(m, 2, dt, rank, addr, dim, strides, sw, oob);
    (void)il;
    (void)l2;
    if (r == CUDA_SUCCESS) {
        ((uint64_t *)m)[11] = ch | (uint64_t)px << 32;
        ((uint64_t *)m)[12] = es[0] | (uint64_t)(uint32_t)lo[0] << 32;
        ((uint64_t *)m)[13] = (uint32_t)up[0];
    }
    return r;
}
CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *m, CUtensorMapDataType dt, cuuint32_t rank,
                                     void *addr, const cuuint64_t *dim, const cuuint64_t *strides,
                                     int lo, int up, cuuint32_t ch, cuuint32_t px,
                                     const cuuint32_t *es, CUtensorMapInterleave il,
                                     CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle sw,
                                     CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = fk_tensor_map(m, 3, dt, rank, addr, dim, strides, sw, oob);
    (void)il;
    (void)l2;
    if (r == CUDA_SUCCESS) {
        ((uint64_t *)m)[11] = ch | (uint64_t)px << 32;
        ((uint64_t *)m)[12] = es[0] | (uint64_t)(uint32_t)lo << 32;
        ((uint64_t *)m)[13] = (uint32_t)up;
        ((uint64_t *)m)[14] = mode;
    }
    return r;
}
CUresult cuTensorMapReplaceAddress(CUtensorMap *m, void *addr)
{
    NEED_CTX();
    if (!m || ((uintptr_t)addr & 15) || (((uint64_t *)m)[1] & 0xff) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    ((uint64_t *)m)[0] = (uintptr_t)addr;
    return CUDA_SUCCESS;
}
