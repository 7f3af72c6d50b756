/* The host part of graphs (see graph.h): shadows standing in for client host memory, host
 * functions, their recording during stream capture and their work around each launch. */
#include <stdlib.h>
#include <string.h>

#include "client/api/graph.h"

/* Arrays grow to 4, then double: exactly when n reaches 4, 8, 16... */
static bool grow(void **arr, size_t n, size_t elem)
{
    void *p;

    if (n != 0 && (n < 4 || (n & (n - 1)) != 0))
        return true;
    if ((p = realloc(*arr, (n < 4 ? 4 : 2 * n) * elem)) == NULL)
        return false;
    *arr = p;
    return true;
}

/* How many host parts (graphs, executable graphs, captures) name each shadow: the last one to
 * let go frees it on the server. */
struct shadow_ref {
    uint64_t shadow;
    unsigned refs;
};
static pthread_mutex_t ref_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shadow_ref *refs;
static size_t nrefs;

static bool shadow_hold(uint64_t shadow)
{
    bool ok = true;

    pthread_mutex_lock(&ref_lock);
    for (size_t i = 0; i < nrefs; i++)
        if (refs[i].shadow == shadow) {
            refs[i].refs++;
            goto out;
        }
    if ((ok = grow((void **)&refs, nrefs, sizeof(*refs))))
        refs[nrefs++] = (struct shadow_ref){shadow, 1};
out:
    pthread_mutex_unlock(&ref_lock);
    return ok;
}

static void shadow_drop(uint64_t shadow)
{
    bool last = false;

    pthread_mutex_lock(&ref_lock);
    for (size_t i = 0; i < nrefs; i++)
        if (refs[i].shadow == shadow) {
            if ((last = --refs[i].refs == 0))
                refs[i] = refs[--nrefs];
            break;
        }
    pthread_mutex_unlock(&ref_lock);
    if (last && cli_initialized()) {
        struct cli_call call = {CLI_ARGS(SHADOW_FREE, .shadow = shadow)};
        cli_call_async(&call);
    }
}

bool graph_host_add_use(struct graph_host *gh, const struct shadow_use *u)
{
    if (!grow((void **)&gh->uses, gh->nuses, sizeof(*u)) || !shadow_hold(u->shadow))
        return false;
    gh->uses[gh->nuses++] = *u;
    return true;
}

bool graph_host_add_fn(struct graph_host *gh, CUhostFn fn, void *data)
{
    if (!grow((void **)&gh->fns, gh->nfns, sizeof(*gh->fns)))
        return false;
    gh->fns[gh->nfns++] = (struct host_call){fn, data};
    return true;
}

bool graph_host_copy(struct graph_host *dst, const struct graph_host *src)
{
    struct graph_host c = {0};

    for (size_t i = 0; i < src->nuses; i++)
        if (!graph_host_add_use(&c, &src->uses[i]))
            goto fail;
    for (size_t i = 0; i < src->nfns; i++)
        if (!graph_host_add_fn(&c, src->fns[i].fn, src->fns[i].data))
            goto fail;
    graph_host_clear(dst);
    *dst = c;
    return true;
fail:
    graph_host_clear(&c);
    return false;
}

void graph_host_clear(struct graph_host *gh)
{
    for (size_t i = 0; i < gh->nuses; i++)
        shadow_drop(gh->uses[i].shadow);
    free(gh->uses);
    free(gh->fns);
    *gh = (struct graph_host){0};
}

uint64_t graph_shadow_new(size_t len)
{
    struct cli_handle h;
    struct cli_call call = {CLI_ARGS(SHADOW_ALLOC)};

    cli_handle_init(&h, PROTO_H_SHADOW);
    call.a.SHADOW_ALLOC.id = h.id;
    call.a.SHADOW_ALLOC.size = len;
    return cli_call_async(&call) == CUDA_SUCCESS ? h.id : 0;
}

CUresult graph_host_before(const struct graph_host *gh, uint64_t sid)
{
    CUresult res = CUDA_SUCCESS;

    for (size_t i = 0; i < gh->nuses && res == CUDA_SUCCESS; i++) {
        const struct shadow_use *u = &gh->uses[i];
        struct cli_call call = {
            CLI_ARGS(SHADOW_WRITE, .shadow = u->shadow, .offset = 0, .len = u->len, .stream = sid),
            .data = u->host, .data_len = u->len};
        if (u->dir == 0)
            res = cli_call_async(&call);
    }
    return res;
}

CUresult graph_host_after(const struct graph_host *gh, uint64_t sid)
{
    CUresult res = CUDA_SUCCESS;

    for (size_t i = 0; i < gh->nuses && res == CUDA_SUCCESS; i++) {
        const struct shadow_use *u = &gh->uses[i];
        struct cli_call call = {
            CLI_ARGS(SHADOW_READ, .shadow = u->shadow, .offset = 0, .len = u->len, .stream = sid)};
        if (u->dir == 1)
            res = cli_call_deferred(&call, u->host, u->len);
    }
    if (res != CUDA_SUCCESS || gh->nfns == 0)
        return res;
    struct cli_call sync = {CLI_ARGS(STREAM_SYNCHRONIZE, .stream = sid)};
    if ((res = cli_call_sync(&sync)) != CUDA_SUCCESS)
        return res;
    for (size_t i = 0; i < gh->nfns; i++)
        gh->fns[i].fn(gh->fns[i].data);
    return CUDA_SUCCESS;
}

/* ---- recording during stream capture ---------------------------------------------------- */

struct capture_rec {
    uint64_t id;
    struct graph_host host;
};

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct capture_rec *captures;
static size_t ncaptures;

/* The record of capture id, made on first use; lock held. */
static struct graph_host *capture_rec(uint64_t id)
{
    for (size_t i = 0; i < ncaptures; i++)
        if (captures[i].id == id)
            return &captures[i].host;
    if (!grow((void **)&captures, ncaptures, sizeof(*captures)))
        return NULL;
    captures[ncaptures] = (struct capture_rec){id, {0}};
    return &captures[ncaptures++].host;
}

CUresult cli_capture_copy(CUstream stream, uint64_t sid, int dir, CUdeviceptr dptr, void *host,
                          size_t len)
{
    uint64_t capture = cli_stream_capture_id(stream);
    struct shadow_use u = {graph_shadow_new(len), host, len, dir};
    struct cli_call call = {CLI_ARGS(MEMCPY_SHADOW, .dir = (uint64_t)dir, .dptr = dptr,
                                     .shadow = u.shadow, .offset = 0, .len = len, .stream = sid)};
    struct graph_host *gh;
    bool ok;

    if (u.shadow == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&capture_lock);
    ok = (gh = capture_rec(capture)) != NULL && graph_host_add_use(gh, &u);
    pthread_mutex_unlock(&capture_lock);
    return ok ? cli_call_async(&call) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cli_capture_host_fn(CUstream stream, CUhostFn fn, void *data)
{
    uint64_t capture = cli_stream_capture_id(stream);
    struct graph_host *gh;
    bool ok;

    struct cli_call call = {CLI_ARGS(HOST_PLACEHOLDER)};

    pthread_mutex_lock(&capture_lock);
    ok = (gh = capture_rec(capture)) != NULL && graph_host_add_fn(gh, fn, data);
    pthread_mutex_unlock(&capture_lock);
    if (!ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The captured graph gets a host node of its own, so it has the shape it has locally. */
    if (!cli_stream_id(stream, false, &call.a.HOST_PLACEHOLDER.stream))
        return CUDA_ERROR_INVALID_HANDLE;
    return cli_call_async(&call);
}

void cli_capture_take(uint64_t capture_id, struct graph_host *out)
{
    *out = (struct graph_host){0};
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < ncaptures; i++)
        if (captures[i].id == capture_id) {
            *out = captures[i].host;
            captures[i] = captures[--ncaptures];
            break;
        }
    pthread_mutex_unlock(&capture_lock);
}
