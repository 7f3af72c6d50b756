/* The NCCL shim's link to the client libcuda.so.1 of the process, its error bookkeeping and
 * the version and error-string answers. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "nccl/nccl_shim.h"

/* Its presence tells gpu-server's worker that a libnccl.so.2 is this shim, never the real one. */
NCCL_EXPORT const int rgpuNcclShim = 1;

static struct nccl_client client;
static bool client_ok;
static pthread_once_t client_once = PTHREAD_ONCE_INIT;
static __thread char last_error[256];

static void *open_client(void)
{
    static const char name[] = "/libcuda.so.1";
    Dl_info self;
    char path[4096], *slash;
    void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

    if (dl == NULL && dladdr((void *)&rgpuNcclShim, &self) != 0 && self.dli_fname != NULL &&
        strlen(self.dli_fname) + sizeof(name) < sizeof(path)) {
        snprintf(path, sizeof(path), "%s", self.dli_fname);
        if ((slash = strrchr(path, '/')) != NULL) {
            memcpy(slash, name, sizeof(name));
            dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        }
    }
    return dl != NULL ? dl : dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
}

static void bind_client(void)
{
    struct nccl_client *c = &client;
    CUresult (*init)(unsigned) = NULL;
    void *dl = open_client();

    if (dl == NULL) {
        rg_error("nccl: cannot load the rgpu client libcuda.so.1: %s", dlerror());
        return;
    }
#define BIND(sym) (*(void **)&c->sym = dlsym(dl, #sym)) != NULL
    if (!(BIND(cuCtxGetDevice) && BIND(cuCtxGetCurrent) && BIND(cuCtxSetCurrent) &&
          BIND(cuDevicePrimaryCtxRetain) && BIND(cuDeviceGet)) ||
        (*(void **)&c->call = dlsym(dl, RGPU_NCCL_CALL_SYMBOL)) == NULL ||
        (*(void **)&init = dlsym(dl, "cuInit")) == NULL) {
        rg_error("nccl: the libcuda.so.1 in this process is not rgpu's client (it lacks %s)",
                 RGPU_NCCL_CALL_SYMBOL);
        return;
    }
#undef BIND
    if (init(0) != CUDA_SUCCESS) {
        rg_error("nccl: the rgpu session did not start (cuInit failed)");
        return;
    }
    client_ok = true;
}

const struct nccl_client *nccl_client(void)
{
    pthread_once(&client_once, bind_client);
    return client_ok ? &client : NULL;
}

ncclResult_t nccl_fail(ncclResult_t res, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    rg_debug("nccl: %s", last_error);
    return res;
}

static ncclResult_t driver_result(int res, const char *what)
{
    /* The session is gone, or the call could not run on the worker's driver. */
    return nccl_fail(res == CUDA_ERROR_DEVICE_UNAVAILABLE ? ncclSystemError
                                                          : ncclUnhandledCudaError,
                     "%s: CUDA error %d on the rgpu session", what, res);
}

/* What a sent call came to: the session's error (res), or the worker's NCCL result (out[0]) of
 * a synchronous call; an asynchronous one's comes back later. */
static ncclResult_t call_result(int res, const struct rgpu_nccl_call *c, const char *what)
{
    if (res != CUDA_SUCCESS)
        return driver_result(res, what);
    if (c->async)
        return ncclSuccess;
    if (c->nout < 1)
        return nccl_fail(ncclInternalError, "%s: the worker's reply lacks its result", what);
    if (c->out[0] != ncclSuccess)
        return nccl_fail((ncclResult_t)c->out[0], "%s failed on the GPU host (NCCL error %d)", what,
                         (int)c->out[0]);
    return ncclSuccess;
}

/* ---- order, routing and groups --------------------------------------------------------- */

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread bool order_held; /* this thread's group holds it */

static void group_hold(bool hold)
{
    if (hold && !order_held) {
        pthread_mutex_lock(&order_lock);
        order_held = true;
    } else if (!hold && order_held) {
        order_held = false;
        pthread_mutex_unlock(&order_lock);
    }
}

#define ROUTE_DEVICES 64
static CUcontext primary[ROUTE_DEVICES]; /* retained once, for the process's life */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* Make device dev current when it is not (its primary context); true when *saved is to be
 * restored. dev < 0: the calling thread's context as it is. */
static bool route_enter(const struct nccl_client *cl, int dev, CUcontext *saved)
{
    CUdevice cur, d;
    CUcontext ctx;

    if (dev < 0 || dev >= ROUTE_DEVICES ||
        (cl->cuCtxGetDevice(&cur) == CUDA_SUCCESS && (int)cur == dev))
        return false;
    pthread_mutex_lock(&primary_lock);
    if ((ctx = primary[dev]) == NULL && cl->cuDeviceGet(&d, dev) == CUDA_SUCCESS &&
        cl->cuDevicePrimaryCtxRetain(&ctx, d) == CUDA_SUCCESS)
        primary[dev] = ctx;
    pthread_mutex_unlock(&primary_lock);
    if (ctx == NULL || cl->cuCtxGetCurrent(saved) != CUDA_SUCCESS)
        return false;
    return cl->cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

static int send_to(const struct nccl_client *cl, struct rgpu_nccl_call *c, int dev)
{
    CUcontext saved = NULL;
    bool routed = route_enter(cl, dev, &saved);
    int res = cl->call(c);

    if (routed)
        cl->cuCtxSetCurrent(saved);
    return res;
}

/* A thread's group reaches a worker only where its calls go: the first call of the group for a
 * device sends that device's session a group start just before it, and the group's end goes to
 * every device the group reached. A process whose devices are on several servers
 * (DataParallel's or XLA's communicators over two hosts' GPUs) so opens and closes the group on
 * each of its workers; two devices of one server give their worker a nested group, which NCCL
 * flattens; a group that made no call sends nothing, as it does nothing in NCCL. */
static __thread int group_depth;        /* ncclGroupStart nesting of this thread */
static __thread uint64_t group_devices; /* the devices its group has reached */

/* One group call to dev's worker: a start or end (NOREPLY), or a simulated end (answered). */
static int group_send(const struct nccl_client *cl, int dev, uint32_t op, int start,
                      struct rgpu_nccl_call *c)
{
    *c = (struct rgpu_nccl_call){.size = sizeof(*c), .op = op, .stream_arg = ~0u};
    if (op == PROTO_OP_NCCL_GROUP) {
        c->nargs = 1;
        c->args[0] = (uint64_t)start;
        c->async = 1;
    }
    return send_to(cl, c, dev);
}

/* The device a call goes to (its communicator's, else the current one); -1 if none. */
static int call_device(const struct nccl_client *cl, const struct ncclComm *comm)
{
    CUdevice cur;

    if (comm != NULL)
        return comm->dev;
    return cl->cuCtxGetDevice(&cur) == CUDA_SUCCESS ? (int)cur : -1;
}

/* Open this thread's group on dev's worker if the group has not reached it yet. */
static int group_reach(const struct nccl_client *cl, int dev)
{
    struct rgpu_nccl_call c;
    int res;

    if (group_depth == 0 || dev < 0 || dev >= ROUTE_DEVICES || (group_devices >> dev & 1))
        return CUDA_SUCCESS;
    if ((res = group_send(cl, dev, PROTO_OP_NCCL_GROUP, 1, &c)) == CUDA_SUCCESS)
        group_devices |= 1ull << dev;
    return res;
}

int nccl_group_depth(void)
{
    return group_depth;
}

void nccl_group_start(void)
{
    if (group_depth++ == 0) {
        group_hold(true); /* the thread's group goes out whole (nccl_shim.h) */
        group_devices = 0;
    }
}

/* The group's end on dev's worker; a simulated one's estimate (out[1]) into *sim. */
static ncclResult_t group_close(const struct nccl_client *cl, int dev, uint32_t op, uint64_t *sim,
                                const char *what)
{
    struct rgpu_nccl_call c;
    ncclResult_t res = call_result(group_send(cl, dev, op, 0, &c), &c, what);

    if (res == ncclSuccess && !c.async && c.nout >= 2)
        *sim = c.out[1];
    return res;
}

ncclResult_t nccl_group_end(uint32_t op, uint64_t *sim, const char *what)
{
    const struct nccl_client *cl = nccl_client();
    ncclResult_t res = ncclSuccess, r;
    int cur;

    if (group_depth > 1) {
        group_depth--;
        return ncclSuccess;
    }
    if (cl != NULL && op == PROTO_OP_NCCL_GROUP_SIMULATE && group_devices == 0) {
        cur = call_device(cl, NULL); /* a worker answers the estimate of an empty group */
        res = group_reach(cl, cur < 0 ? 0 : cur) == CUDA_SUCCESS ? ncclSuccess : ncclSystemError;
    }
    group_depth = 0;
    for (int dev = ROUTE_DEVICES - 1; cl != NULL && dev >= 0; dev--) /* the lowest answers last */
        if (group_devices >> dev & 1 && (r = group_close(cl, dev, op, sim, what)) != ncclSuccess &&
            res == ncclSuccess)
            res = r;
    group_devices = 0;
    group_hold(false);
    return cl == NULL ? nccl_fail(ncclSystemError, "%s: no rgpu session", what) : res;
}

/* A call outside a group holds the order lock until it is on the wire, not while its reply is
 * waited for: the worker may be inside an NCCL group end that waits for a peer rank whose call
 * another thread of this process has still to send to another server (XLA's thread per
 * device: ncclGroupEnd, then ncclCommGetAsyncError, while the other device's thread has yet to
 * launch its half of the collective). */
static void order_release(void *arg)
{
    bool *held = arg;

    if (*held) {
        *held = false;
        pthread_mutex_unlock(&order_lock);
    }
}

/* One call in order (the order lock unless this thread's group holds it), its group opened on
 * its worker first, and routed. */
static int call_routed(const struct nccl_client *cl, struct rgpu_nccl_call *c,
                       const struct ncclComm *comm)
{
    bool took = !order_held;
    int res;

    if (took)
        pthread_mutex_lock(&order_lock);
    c->on_send = took ? order_release : NULL;
    c->on_send_arg = &took;
    res = group_depth > 0 ? group_reach(cl, call_device(cl, comm)) : CUDA_SUCCESS;
    if (res == CUDA_SUCCESS)
        res = send_to(cl, c, comm != NULL ? comm->dev : -1);
    order_release(&took); /* if the call never went out */
    return res;
}

ncclResult_t nccl_call_sync(struct rgpu_nccl_call *c, const struct ncclComm *comm, const char *what)
{
    const struct nccl_client *cl = nccl_client();

    if (cl == NULL)
        return nccl_fail(ncclSystemError, "%s: no rgpu session", what);
    c->size = sizeof(*c);
    c->async = 0;
    return call_result(call_routed(cl, c, comm), c, what);
}

ncclResult_t nccl_call_async(struct rgpu_nccl_call *c, const struct ncclComm *comm,
                             const char *what)
{
    const struct nccl_client *cl = nccl_client();
    int res;

    if (cl == NULL)
        return nccl_fail(ncclSystemError, "%s: no rgpu session", what);
    c->size = sizeof(*c);
    c->async = 1;
    if ((res = call_routed(cl, c, comm)) != CUDA_SUCCESS)
        return driver_result(res, what);
    return ncclSuccess;
}

/* The worker's NCCL version and features, asked once (a worker older than protocol 1.3 sends
 * no features: every call of NCCL 2.28 beyond 2.18's is then answered as missing). */
static int worker_version;
static uint64_t worker_features;
static pthread_mutex_t worker_lock = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t worker_ask(void)
{
    struct rgpu_nccl_call c = {.op = PROTO_OP_NCCL_GET_VERSION, .stream_arg = ~0u};
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&worker_lock);
    if (__atomic_load_n(&worker_version, __ATOMIC_ACQUIRE) == 0) {
        if ((res = nccl_call_sync(&c, NULL, "ncclGetVersion")) == ncclSuccess && c.nout < 2)
            res = nccl_fail(ncclInternalError, "ncclGetVersion: no version in the reply");
        if (res == ncclSuccess) {
            worker_features = c.nout >= 3 ? c.out[2] : 0;
            __atomic_store_n(&worker_version, (int)c.out[1], __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&worker_lock);
    return res;
}

uint64_t nccl_features(void)
{
    if (__atomic_load_n(&worker_version, __ATOMIC_ACQUIRE) == 0 && worker_ask() != ncclSuccess)
        return 0;
    return worker_features;
}

ncclResult_t nccl_need(uint64_t feature, const char *name)
{
    static uint64_t said;

    if (nccl_features() & feature)
        return ncclSuccess;
    if (!(__atomic_fetch_or(&said, feature, __ATOMIC_RELAXED) & feature))
        rg_warn("nccl: %s is not in the GPU host's NCCL (version %d) or its rgpu is older "
                "(ncclInvalidUsage)",
                name, worker_version);
    return nccl_fail(ncclInvalidUsage, "%s is not offered by the GPU host's NCCL", name);
}

NCCL_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    ncclResult_t res;

    if (version == NULL)
        return nccl_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    if (__atomic_load_n(&worker_version, __ATOMIC_ACQUIRE) == 0 &&
        (res = worker_ask()) != ncclSuccess)
        return res;
    *version = __atomic_load_n(&worker_version, __ATOMIC_ACQUIRE);
    return ncclSuccess;
}

/* NCCL's debug settings are read on the GPU host, from gpu-server's environment: nothing to
 * reset in this process. */
NCCL_EXPORT void ncclResetDebugInit(void) {}
NCCL_EXPORT void ncclResetDebugInitInternal(void) {}

NCCL_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "success";
    case ncclUnhandledCudaError:
        return "a CUDA call failed (on the GPU host, through rgpu)";
    case ncclSystemError:
        return "a system call or the rgpu session failed";
    case ncclInternalError:
        return "internal NCCL error";
    case ncclInvalidArgument:
        return "an argument is not valid";
    case ncclInvalidUsage:
        return "the call is not valid here (or not offered by rgpu's NCCL)";
    case ncclRemoteError:
        return "a peer rank exited or the network failed";
    case ncclInProgress:
        return "the operation is still in progress";
    default:
        return "unknown NCCL result";
    }
}

NCCL_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

NCCL_PROFILE_ALIAS(ncclGetVersion)
NCCL_PROFILE_ALIAS(ncclResetDebugInit)
NCCL_PROFILE_ALIAS(ncclGetErrorString)
NCCL_PROFILE_ALIAS(ncclGetLastError)
