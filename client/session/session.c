/* The sessions with gpu-servers: their state (client/session/session.h), the hooks of the layers
 * above, and their opening on first use: configuration (config.c), then one session per server
 * it lists (`server`, RGPU_SERVER), or one session on the server a pool's placement picks
 * (`pool`, RGPU_POOL: pool.c probes, places and fails over at start), each connected and
 * hand-shaken (handshake.c) with its call stream (call_stream.c); then the devices the process
 * presents: every session's in order, less those CUDA_VISIBLE_DEVICES hides. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "client/session/pool.h"
#include "client/session/session.h"
#include "common/array_grow.h"
#include "common/backoff.h"
#include "common/config.h"
#include "transport/rdma.h"

/* A refusal for load is tried again after BUSY_FIRST_MS, doubling up to BUSY_MAX_MS, with
 * jitter (common/backoff.h), within the connect timeout. */
#define BUSY_FIRST_MS 50
#define BUSY_MAX_MS   1000

/* ---- hooks of the layers above -------------------------------------------------------- */

static void no_lanes_offered(const char *addr, const void *secret, size_t secret_len, int want) {}

static const struct cli_session_hooks no_hooks = {
    .lanes_offered = no_lanes_offered,
};

struct cli_process cli_proc = {.lock = PTHREAD_MUTEX_INITIALIZER, .hooks = &no_hooks};

void cli_session_set_hooks(const struct cli_session_hooks *h)
{
    cli_proc.hooks = h;
}

/* ---- one session ------------------------------------------------------------------------ */

static struct cli_session *session_new(int index, const char *server)
{
    struct cli_session *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->batch_cond, NULL);
    s->index = index;
    s->next_call_id = 1;
    s->trace_calls = getenv("RGPU_TRACE_CALLS") != NULL;
    snprintf(s->server, sizeof(s->server), "%s", server);
    s->recv_buf = malloc(RECV_BUF_SIZE);
    if (s->recv_buf == NULL || proto_arena_init(&s->arena, 64u << 10) != RG_OK) {
        free(s->recv_buf);
        free(s);
        return NULL;
    }
    return s;
}

/* The session session_try opens (cli_pool_connect's callback has no argument for it); set by
 * session_open under cli_proc.lock. */
static struct cli_session *opening;

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One try: connect and hand-shake; on failure nothing is left open. */
static CUresult session_try_once(struct cli_session *s, const char *addr,
                                 const struct cli_conf *conf, char *why, size_t why_len)
{
    struct transport_opts opts = {.connect_timeout_ms = conf->connect_timeout_ms};
    rg_status_t status;
    CUresult res;

    s->retry_ms = 0;
    status = transport_tcp_ops.connect(addr, &opts, &s->conn);
    if (status != RG_OK) {
        snprintf(why, why_len, "cannot reach gpu-server at %s: %s%s", addr, rg_status_str(status),
                 conf->npool > 1 ? ""
                                 : ". Start gpu-server there, or point the client at one with "
                                   "RGPU_SERVER=host:port or a client config (RGPU_CONFIG, "
                                   "~/.config/rgpu/client.conf, /etc/rgpu/client.conf) with "
                                   "'server = host:port' or 'pool = host:port ...'");
        s->conn = NULL;
        return CUDA_ERROR_NO_DEVICE;
    }
    res = cli_handshake(s, conf, &opts, why, why_len);
    if (res != CUDA_SUCCESS) {
        transport_close(s->conn);
        if (s->tcp_ctl != NULL)
            transport_close(s->tcp_ctl);
        s->conn = s->tcp_ctl = NULL;
        free(s->devices);
        s->devices = NULL;
        s->ndevices = 0;
    }
    return res;
}

/* One server (cli_pool_try_fn): connect and hand-shake the session being opened; on failure
 * nothing is left open and why says what happened. A refusal for load (the server full, its
 * connections before their Hello too many, or closed before a word) is tried again after a
 * backoff with jitter, for as long as connect_timeout_ms allows in all. */
static int session_try(const char *addr, const struct cli_conf *conf, char *why, size_t why_len)
{
    struct cli_session *s = opening;
    double start = now_ms(), deadline = start + conf->connect_timeout_ms;
    struct rg_backoff b;
    int tries = 1, wait;
    CUresult res;

    snprintf(s->server, sizeof(s->server), "%s", addr);
    rg_backoff_init(&b, BUSY_FIRST_MS, BUSY_MAX_MS);
    while ((res = session_try_once(s, addr, conf, why, why_len)) != CUDA_SUCCESS &&
           s->retry_ms > 0 && now_ms() + (wait = rg_backoff_next(&b, s->retry_ms)) < deadline) {
        if (tries++ == 1)
            rg_info("%s; trying again for up to %d ms (connect_timeout_ms)", why,
                    conf->connect_timeout_ms);
        usleep((useconds_t)wait * 1000);
    }
    if (res == CUDA_SUCCESS && tries > 1)
        rg_info("session on %s opened at try %d", addr, tries);
    else if (res != CUDA_SUCCESS && tries > 1) {
        size_t n = strlen(why);
        snprintf(why + n, why_len - n, " (%d tries in %.0f ms)", tries, now_ms() - start);
    }
    return res;
}

/* Open s on the server conf's pool gives it: its one entry, or the one the pool's placement
 * picks among several (pool.c tries them in the policy's order through session_try). */
static CUresult session_open(struct cli_session *s, const struct cli_conf *conf)
{
    CUresult res;

    if ((res = cli_transport_choose(s, conf->transport)) != CUDA_SUCCESS)
        return res;
    s->pid = getpid();
    opening = s;
    res = (CUresult)cli_pool_connect(conf, session_try, CUDA_ERROR_NO_DEVICE);
    opening = NULL;
    if (res == CUDA_SUCCESS && getenv("RGPU_BUSY_POLL_US") != NULL)
        transport_set_busy_poll(s->conn, (unsigned)atoi(getenv("RGPU_BUSY_POLL_US")));
    if (res == CUDA_SUCCESS)
        res = cli_batch_start(s);
    if (res != CUDA_SUCCESS && s->conn != NULL) {
        transport_close(s->conn);
        if (s->tcp_ctl != NULL)
            transport_close(s->tcp_ctl);
        s->conn = s->tcp_ctl = NULL;
    }
    return res;
}

/* ---- the devices the process presents ---------------------------------------------------- */

/* CUDA_VISIBLE_DEVICES entry e names device d (of all, at index i): by index or by a prefix of
 * its UUID ("GPU-" and at least a few hex digits), as the driver reads it. */
static bool visible_names(const char *e, int i, const struct cli_device *d)
{
    char uuid[64];
    const unsigned char *b = (const unsigned char *)d->uuid.bytes;
    char *end;
    long n = strtol(e, &end, 10);

    if (end != e && *end == '\0')
        return n == i;
    if (strncasecmp(e, "GPU-", 4) != 0 || strlen(e) < 5)
        return false;
    snprintf(uuid, sizeof(uuid),
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    return strncasecmp(uuid, e, strlen(e)) == 0;
}

/* Append all[i] as the next visible device. */
static void device_take(struct cli_device *all, int i)
{
    cli_proc.devices[cli_proc.ndevices] = all[i];
    cli_proc.devices[cli_proc.ndevices].ordinal = cli_proc.ndevices;
    cli_proc.ndevices++;
}

/* `gpus = N`: the first N of the devices presented; fewer is an error. */
static CUresult devices_count_wanted(void)
{
    int want = cli_proc.want_gpus;

    if (want > 0 && cli_proc.ndevices < want) {
        rg_error("gpus = %d: the servers give %d device(s)%s", want, cli_proc.ndevices,
                 getenv("CUDA_VISIBLE_DEVICES") ? " that CUDA_VISIBLE_DEVICES leaves visible" : "");
        return CUDA_ERROR_NO_DEVICE;
    }
    if (want > 0)
        cli_proc.ndevices = want;
    return cli_proc.ndevices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* Every session's devices in order, filtered by CUDA_VISIBLE_DEVICES (in its order; it stops
 * at the first entry that names no device, as in the driver). */
static CUresult devices_gather(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char list[512], *save = NULL, *e;
    struct cli_device all[64];
    int n = 0;

    for (int k = 0; k < cli_proc.nsessions; k++)
        for (int j = 0; j < cli_proc.sessions[k]->ndevices && n < 64; j++, n++) {
            all[n] = cli_proc.sessions[k]->devices[j];
            all[n].sess = cli_proc.sessions[k];
            all[n].remote = j;
        }
    if ((cli_proc.devices = calloc(n ? (size_t)n : 1, sizeof(*all))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(list, sizeof(list), "%s", vis != NULL ? vis : "");
    for (int i = 0; vis == NULL && i < n; i++)
        device_take(all, i);
    for (e = vis != NULL ? strtok_r(list, ", ", &save) : NULL; e != NULL;
         e = strtok_r(NULL, ", ", &save)) {
        int i = 0;
        while (i < n && !visible_names(e, i, &all[i]))
            i++;
        if (i == n || cli_proc.ndevices == n)
            break;
        device_take(all, i);
    }
    return devices_count_wanted();
}

/* A process is admitted on all its servers or on none: when one refuses, those that accepted are
 * told goodbye now (their workers end, freeing the quota and share they hold), not at exit. */
static void sessions_abandon(void)
{
    for (int k = 0; k < cli_proc.nsessions; k++) {
        struct cli_session *s = cli_proc.sessions[k];
        pthread_mutex_lock(&s->lock);
        if (s->conn != NULL && !s->dead) {
            proto_send(s->conn, PROTO_BYE, NULL, NULL, 0);
            transport_shutdown(s->conn);
            s->dead = s->said_bye = true;
            pthread_cond_signal(&s->batch_cond); /* its flusher sees dead and ends */
        }
        pthread_mutex_unlock(&s->lock);
    }
}

/* ---- opening ---------------------------------------------------------------------------- */

/* One more session, opened on what conf names (a server, or a pool to place the job in). */
static CUresult process_add(const char *name, const struct cli_conf *conf)
{
    struct cli_session *s;

    if (cli_proc.nsessions == CLI_MAX_SESSIONS) {
        rg_error("more than %d servers configured: the rest are not used", CLI_MAX_SESSIONS);
        return CUDA_SUCCESS;
    }
    if ((s = session_new(cli_proc.nsessions, name)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_proc.sessions[cli_proc.nsessions++] = s;
    return session_open(s, conf);
}

/* A session process_add opened and could not keep (its server refused or failed): forgotten. */
static void session_drop_last(void)
{
    struct cli_session *s = cli_proc.sessions[--cli_proc.nsessions];

    cli_proc.sessions[cli_proc.nsessions] = NULL;
    proto_arena_destroy(&s->arena);
    pthread_cond_destroy(&s->batch_cond);
    pthread_mutex_destroy(&s->lock);
    free(s->devices);
    free(s->recv_buf);
    free(s);
}

/* `gpus = N` from a pool: the servers placement ordered (each admitting the job on all its
 * GPUs), opened whole in that order until the job has N GPUs; one that fails is dropped and
 * the next taken. All N, or none: on failure every session opened is ended now. */
static CUresult process_open_gpus(const struct cli_conf *conf)
{
    static struct cli_conf one; /* large; under cli_proc.lock */
    static struct cli_placed placed[CLI_POOL_MAX];
    char why[4096], failed[2048] = "";
    int n = cli_pool_place_gpus(conf, conf->gpus, placed, CLI_POOL_MAX, why, sizeof(why));
    int have = 0;

    if (n == 0) {
        rg_error("%s", why);
        return CUDA_ERROR_NO_DEVICE;
    }
    one = *conf;
    one.npool = 1;
    one.placed = false;
    for (int k = 0; k < n && have < conf->gpus && cli_proc.nsessions < CLI_MAX_SESSIONS; k++) {
        size_t used = strlen(failed);
        snprintf(one.pool[0], sizeof(one.pool[0]), "%.79s", placed[k].addr);
        if (process_add(placed[k].addr, &one) == CUDA_SUCCESS) {
            have += cli_proc.sessions[cli_proc.nsessions - 1]->ndevices;
            continue;
        }
        session_drop_last();
        snprintf(failed + used, sizeof(failed) - used, "%s%.79s", used ? ", " : "", placed[k].addr);
    }
    if (have < conf->gpus) {
        rg_error("gpus = %d: %d GPU(s) could be had; the servers that would admit the job failed "
                 "to start it: %s",
                 conf->gpus, have, failed[0] ? failed : "none");
        sessions_abandon();
        return CUDA_ERROR_NO_DEVICE;
    }
    rg_info("pool: gpus = %d placed on %d server(s) by policy %s", conf->gpus, cli_proc.nsessions,
            sched_policy_name(conf->policy));
    return CUDA_SUCCESS;
}

/* Listed servers (`server`, RGPU_SERVER): one session each, all admitted or none. A pool
 * (`pool`, RGPU_POOL): one session, on the server its placement picks, and the job gets that
 * server's GPUs; with `gpus = N`, as many servers as N GPUs take (process_open_gpus). */
static CUresult process_open(void)
{
    static struct cli_conf conf, one; /* large; under cli_proc.lock, opened once */
    char why[512];
    CUresult res = CUDA_SUCCESS;

    /* A library stays quiet unless asked: warnings and errors only by default. */
    rg_log_set_level(RG_LOG_WARN);
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    if (cli_conf_load(&conf, why, sizeof(why)) != RG_OK) {
        rg_error("client configuration: %s", why);
        return CUDA_ERROR_INVALID_VALUE;
    }
    cli_proc.want_gpus = conf.gpus;
    if (conf.placed && conf.gpus > 0) {
        res = process_open_gpus(&conf);
    } else if (conf.placed || conf.npool == 1) {
        res = process_add(conf.npool == 1 ? conf.pool[0] : "the pool", &conf);
    } else {
        one = conf;
        one.npool = 1;
        for (int i = 0; i < conf.npool && res == CUDA_SUCCESS; i++) {
            snprintf(one.pool[0], sizeof(one.pool[0]), "%s", conf.pool[i]);
            res = process_add(conf.pool[i], &one);
        }
    }
    if (res == CUDA_SUCCESS && cli_proc.nsessions == 0)
        res = CUDA_ERROR_NO_DEVICE;
    if (res == CUDA_SUCCESS)
        pthread_atfork(NULL, NULL, cli_session_atfork_child);
    else if (cli_proc.nsessions > 1)
        sessions_abandon();
    return res == CUDA_SUCCESS ? devices_gather() : res;
}

CUresult cli_ensure_init(void)
{
    CUresult res;

    pthread_mutex_lock(&cli_proc.lock);
    if (!cli_proc.tried) {
        cli_proc.init_result = process_open();
        __atomic_store_n(&cli_proc.tried, true, __ATOMIC_RELEASE);
    }
    res = cli_proc.init_result;
    pthread_mutex_unlock(&cli_proc.lock);
    return res;
}

bool cli_initialized(void)
{
    /* cli_proc.tried is only ever set once, under the lock, after init_result. */
    return __atomic_load_n(&cli_proc.tried, __ATOMIC_ACQUIRE) &&
           cli_proc.init_result == CUDA_SUCCESS;
}

int cli_device_count(void)
{
    return cli_initialized() ? cli_proc.ndevices : 0;
}

const struct cli_device *cli_device(int ordinal)
{
    if (!cli_initialized() || ordinal < 0 || ordinal >= cli_proc.ndevices)
        return NULL;
    return &cli_proc.devices[ordinal];
}

struct cli_session *cli_device_session(int dev)
{
    const struct cli_device *d = cli_device(dev);

    return d != NULL ? d->sess : NULL;
}

int cli_device_remote(int dev)
{
    const struct cli_device *d = cli_device(dev);

    return d != NULL ? d->remote : dev;
}

bool cli_session_is_first(const struct cli_session *sess)
{
    return sess == NULL || sess->index == 0;
}

const char *cli_session_server(const struct cli_session *sess)
{
    return sess != NULL ? sess->server : "";
}

int cli_session_count(void)
{
    return cli_initialized() ? cli_proc.nsessions : 0;
}

struct cli_session *cli_session_at(int i)
{
    return i >= 0 && i < cli_session_count() ? cli_proc.sessions[i] : NULL;
}

int cli_session_index(const struct cli_session *sess)
{
    return sess != NULL ? sess->index : 0;
}

/* The first session's connection never changes once it is open; a session lost meanwhile is
 * noticed by the call that follows. */
struct transport_conn *cli_session_rdma_conn(void)
{
    struct cli_session *s = cli_initialized() ? cli_proc.sessions[0] : NULL;

    if (s == NULL || s->forked || s->conn == NULL ||
        !(s->conn->ops->caps & TRANSPORT_CAP_ONE_SIDED))
        return NULL;
    return s->conn;
}
