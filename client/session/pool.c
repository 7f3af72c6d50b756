/* A pool of gpu-servers (client/pool.h). */
#include "client/session/pool.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "common/backoff.h"
#include "common/config.h"
#include "common/log.h"
#include "scheduler/placement.h"

#define PROBE_BUF (64u << 10)
#define WHY_ALL   4096 /* the one error naming every server tried */

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct cli_server *pool_add(struct cli_pool *pool, const char *name)
{
    struct cli_server *grown = realloc(pool->servers, (size_t)(pool->n + 1) * sizeof(*grown));

    if (grown == NULL)
        return NULL;
    pool->servers = grown;
    memset(&grown[pool->n], 0, sizeof(grown[0]));
    snprintf(grown[pool->n].name, sizeof(grown[0].name), "%s", name);
    return &grown[pool->n++];
}

static bool pool_has(const struct cli_pool *pool, const char *addr)
{
    for (int i = 0; i < pool->n; i++)
        if (strcmp(pool->servers[i].addr, addr) == 0)
            return true;
    return false;
}

/* One entry: every address its name resolves to, in the resolver's order. */
static rg_status_t resolve_entry(struct cli_pool *pool, const char *entry)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *ai;
    char host[256], port[16], ip[INET6_ADDRSTRLEN];
    struct cli_server *s;
    int rc;

    if (rg_split_hostport(entry, host, sizeof(host), port, sizeof(port), CLI_DEFAULT_PORT) !=
        RG_OK) {
        if ((s = pool_add(pool, entry)) == NULL)
            return RG_ERR_NOMEM;
        snprintf(s->why, sizeof(s->why), "not a host:port");
        return RG_OK;
    }
    if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
        if ((s = pool_add(pool, entry)) == NULL)
            return RG_ERR_NOMEM;
        snprintf(s->why, sizeof(s->why), "cannot resolve %.120s: %s", host, gai_strerror(rc));
        return RG_OK;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        char addr[80];
        const void *a = ai->ai_family == AF_INET6
                            ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                            : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        if (inet_ntop(ai->ai_family, a, ip, sizeof(ip)) == NULL)
            continue;
        snprintf(addr, sizeof(addr), ai->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", ip, port);
        if (pool_has(pool, addr))
            continue;
        if ((s = pool_add(pool, entry)) == NULL)
            break;
        snprintf(s->addr, sizeof(s->addr), "%s", addr);
    }
    freeaddrinfo(res);
    return ai == NULL ? RG_OK : RG_ERR_NOMEM;
}

rg_status_t cli_pool_resolve(const struct cli_conf *conf, struct cli_pool *pool)
{
    rg_status_t st = RG_OK;

    memset(pool, 0, sizeof(*pool));
    for (int i = 0; i < conf->npool && st == RG_OK; i++)
        st = resolve_entry(pool, conf->pool[i]);
    return st;
}

void cli_pool_free(struct cli_pool *pool)
{
    for (int i = 0; i < pool->n; i++)
        if (pool->servers[i].reply != NULL)
            rgpu__probe_reply__free_unpacked(pool->servers[i].reply, NULL);
    free(pool->servers);
    memset(pool, 0, sizeof(*pool));
}

static void set_recv_deadline(struct transport_conn *conn, double deadline)
{
    double left = deadline - now_ms();
    int ms = left < 1 ? 1 : (int)left;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    setsockopt(transport_fd(conn), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* A refusal in a Welcome (what a server's limits on connections before their Hello send,
 * whatever the first frame was) or in a ProbeReply: its reason and retry hint. */
static void take_refusal(int32_t status, const char *reason, uint32_t retry_after_ms,
                         int *retry_ms_p, char *why, size_t why_len)
{
    char text[320];

    snprintf(why, why_len, "refused the probe: %s",
             rg_log_escape(text, sizeof(text), reason ? reason : ""));
    *retry_ms_p = status != 0 ? (int)(retry_after_ms < 60000 ? retry_after_ms : 60000) : 0;
}

static rg_status_t probe_exchange(struct transport_conn *conn, const struct cli_conf *conf,
                                  double deadline, Rgpu__ProbeReply **reply_p, int *retry_ms_p,
                                  char *why, size_t why_len)
{
    Rgpu__Probe req = RGPU__PROBE__INIT;
    struct proto_frame_hdr hdr;
    uint8_t *buf = malloc(PROBE_BUF);
    Rgpu__ProbeReply *r = NULL;
    Rgpu__Welcome *w = NULL;
    char seen[80] = "";
    rg_status_t st;

    *retry_ms_p = 0;
    if (buf == NULL)
        return RG_ERR_NOMEM;
    req.proto_version = PROTO_VERSION;
    req.proto_minor = PROTO_VERSION_MINOR;
    req.tenant = (char *)conf->tenant;
    req.token = (char *)conf->token;
    req.mem_quota = conf->mem_quota;
    req.mem_share = conf->mem_share;
    set_recv_deadline(conn, deadline);
    st = proto_send(conn, PROTO_PROBE, &req.base, NULL, 0);
    if (st == RG_OK && (st = proto_peek_answer(conn, seen, sizeof(seen))) == RG_OK)
        st = proto_recv(conn, &hdr, buf, PROBE_BUF);
    if (st == RG_ERR_PROTO && seen[0] != '\0')
        snprintf(why, why_len, "not a gpu-server (it answered \"%s\")", seen);
    else if (st == RG_ERR_TIMEOUT || (st == RG_ERR_IO && now_ms() >= deadline - 1))
        snprintf(why, why_len, "no answer to the probe in time");
    else if (st != RG_OK)
        snprintf(why, why_len, "the probe failed: %s", rg_status_str(st));
    else if (hdr.type == PROTO_WELCOME && hdr.bulk_len == 0 &&
             (w = rgpu__welcome__unpack(NULL, hdr.msg_len, buf)) != NULL && w->status != 0)
        take_refusal(w->status, w->reason, w->retry_after_ms, retry_ms_p, why, why_len);
    else if (hdr.type != PROTO_PROBE_REPLY || hdr.bulk_len != 0 ||
             (r = rgpu__probe_reply__unpack(NULL, hdr.msg_len, buf)) == NULL)
        snprintf(why, why_len, "answered the probe with a malformed %s frame",
                 proto_frame_type_name(hdr.type));
    else if (r->status != 0)
        take_refusal(r->status, r->reason, r->retry_after_ms, retry_ms_p, why, why_len);
    else if (conf->mem_share != 0 && r->proto_minor < PROTO_MINOR_MEM_SHARE) {
        snprintf(why, why_len, "speaks protocol %u.%u, which cannot honour mem_share (%u.%u or "
                 "later): ask with mem_quota", PROTO_VERSION, r->proto_minor, PROTO_VERSION,
                 PROTO_MINOR_MEM_SHARE);
        r->status = -1; /* refused here */
    }
    free(buf);
    if (w != NULL)
        rgpu__welcome__free_unpacked(w, NULL);
    if (st == RG_OK && r != NULL && r->status == 0) {
        *reply_p = r;
        return RG_OK;
    }
    if (r != NULL)
        rgpu__probe_reply__free_unpacked(r, NULL);
    return st != RG_OK ? st : RG_ERR_REFUSED;
}

/* Connect and probe; a refusal for load (retry_after_ms) is tried again with backoff and
 * jitter while the time allows. */
rg_status_t cli_probe_open(const char *addr, const struct cli_conf *conf, int timeout_ms,
                           struct transport_conn **conn_p, Rgpu__ProbeReply **reply_p, char *why,
                           size_t why_len)
{
    double deadline = now_ms() + timeout_ms;
    struct transport_opts opts = {.connect_timeout_ms = timeout_ms};
    struct transport_conn *conn;
    struct rg_backoff b;
    int retry_ms, wait;
    rg_status_t st;

    if (conf->connect_timeout_ms < opts.connect_timeout_ms)
        opts.connect_timeout_ms = conf->connect_timeout_ms;
    rg_backoff_init(&b, 50, 1000);
    for (;;) {
        st = transport_tcp_ops.connect(addr, &opts, &conn);
        if (st != RG_OK) {
            snprintf(why, why_len, "unreachable: %s", rg_status_str(st));
            return st;
        }
        st = probe_exchange(conn, conf, deadline, reply_p, &retry_ms, why, why_len);
        if (st == RG_OK) {
            *conn_p = conn;
            return RG_OK;
        }
        transport_close(conn);
        if (retry_ms == 0 || now_ms() + (wait = rg_backoff_next(&b, retry_ms)) >= deadline)
            return st;
        usleep((useconds_t)wait * 1000);
    }
}

struct probe_job {
    struct cli_server *server;
    const struct cli_conf *conf;
    int timeout_ms;
};

static void *probe_thread(void *arg)
{
    struct probe_job *job = arg;
    struct cli_server *s = job->server;
    struct transport_conn *conn;
    double t0 = now_ms();

    rg_status_t st = cli_probe_open(s->addr, job->conf, job->timeout_ms, &conn, &s->reply,
                                    s->why, sizeof(s->why));

    if (st == RG_OK) {
        s->rtt_ms = now_ms() - t0;
        s->answered = true;
        transport_close(conn);
    } else if (st == RG_ERR_CLOSED) {
        s->unprobed = true;
        snprintf(s->why, sizeof(s->why), "closed the connection at the probe (a gpu-server "
                                          "older than the probe?)");
    }
    return NULL;
}

void cli_pool_probe(struct cli_pool *pool, const struct cli_conf *conf, int timeout_ms)
{
    pthread_t threads[pool->n > 0 ? pool->n : 1];
    struct probe_job jobs[pool->n > 0 ? pool->n : 1];
    bool started[pool->n > 0 ? pool->n : 1];

    for (int i = 0; i < pool->n; i++) {
        jobs[i] = (struct probe_job){&pool->servers[i], conf, timeout_ms};
        started[i] = pool->servers[i].addr[0] != '\0' &&
                     pthread_create(&threads[i], NULL, probe_thread, &jobs[i]) == 0;
        if (!started[i] && pool->servers[i].why[0] == '\0')
            snprintf(pool->servers[i].why, sizeof(pool->servers[i].why), "cannot start a probe");
    }
    for (int i = 0; i < pool->n; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
}

static uint64_t seed_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ 1;
}

/* What placement compares: the server's fullest and busiest GPU. */
static struct sched_candidate candidate(const struct cli_server *s)
{
    struct sched_candidate c = {.answered = s->answered};

    if (!s->answered)
        return c;
    c.fits = s->reply->admit;
    c.ngpus = (uint32_t)s->reply->n_gpus;
    for (size_t g = 0; g < s->reply->n_gpus; g++) {
        const Rgpu__ProbeGpu *p = s->reply->gpus[g];
        if (g == 0 || p->total_mem < c.total_mem)
            c.total_mem = p->total_mem;
        if (g == 0 || p->available < c.free_mem)
            c.free_mem = p->available;
        if (p->sessions > c.sessions)
            c.sessions = p->sessions;
        if (p->utilization > c.utilization)
            c.utilization = p->utilization;
    }
    return c;
}

int cli_pool_order(const struct cli_pool *pool, const struct cli_conf *conf, int *order_p)
{
    struct sched_candidate c[pool->n > 0 ? pool->n : 1];
    uint64_t seed = seed_now();

    for (int i = 0; i < pool->n; i++)
        c[i] = candidate(&pool->servers[i]);
    return sched_place(conf->policy, c, pool->n, &seed, order_p);
}

static void append(char *all, const char *addr, const char *why)
{
    size_t used = strlen(all);

    snprintf(all + used, WHY_ALL - used, "%s%s (%s)", used ? "; " : "", addr, why);
}

/* Servers placement left out, for the error or the info line. */
static void skipped(const struct cli_pool *pool, char *all)
{
    for (int i = 0; i < pool->n; i++) {
        const struct cli_server *s = &pool->servers[i];
        if (s->unprobed)
            continue; /* tried last: its own failure, if any, is appended then */
        if (!s->answered)
            append(all, s->addr[0] ? s->addr : s->name, s->why);
        else if (!s->reply->admit)
            append(all, s->addr,
                   s->reply->why_not && s->reply->why_not[0] ? RG_PEER_STR(s->reply->why_not)
                                                             : "would not admit the job");
    }
}

/* Why this server, in words: its rank under the policy among the n that could take the job. */
static void reason(enum sched_policy policy, int k, int n, char *buf, size_t len)
{
    if (k > 0)
        snprintf(buf, len, "choice %d of %d that could take it, after those before it failed",
                 k + 1, n);
    else
        snprintf(buf, len, "%s of %d that could take it",
                 policy == SCHED_SPREAD ? "the least loaded"
                 : policy == SCHED_PACK ? "the fullest that fits"
                                        : "the first listed",
                 n);
}

static int try_in_order(const struct cli_conf *conf, const struct cli_pool *pool, const int *order,
                        int n, cli_pool_try_fn try_one, char *all, int fail_result)
{
    int res = fail_result;
    char why[512], rank[96];

    for (int k = 0; k < n; k++) {
        const struct cli_server *s = &pool->servers[order[k]];
        why[0] = '\0';
        if ((res = try_one(s->addr, conf, why, sizeof(why))) == 0) {
            reason(conf->policy, k, n, rank, sizeof(rank));
            rg_info("pool: job placed on %s%s%s%s by policy %s (%s)%s%s", s->addr,
                    strcmp(s->name, s->addr) ? " (" : "", strcmp(s->name, s->addr) ? s->name : "",
                    strcmp(s->name, s->addr) ? ")" : "", sched_policy_name(conf->policy), rank,
                    all[0] ? "; passed over: " : "", all);
            return 0;
        }
        append(all, s->addr, why);
    }
    return res;
}

/* Probe, place, try in order; 0 when a server took the job. */
static int connect_pool(const struct cli_conf *conf, struct cli_pool *pool, cli_pool_try_fn try_one,
                        char *all, int fail_result)
{
    int order[pool->n > 0 ? pool->n : 1], n, res;

    cli_pool_probe(pool, conf, conf->probe_timeout_ms);
    n = cli_pool_order(pool, conf, order);
    for (int i = 0; i < pool->n; i++) /* servers that cannot answer a probe: last, in order */
        if (pool->servers[i].unprobed)
            order[n++] = i;
    skipped(pool, all);
    res = try_in_order(conf, pool, order, n, try_one, all, fail_result);
    if (res != 0)
        rg_error("no gpu-server of the pool can take this job; %d tried: %s", pool->n, all);
    return res;
}

int cli_pool_connect(const struct cli_conf *conf, cli_pool_try_fn try_one, int fail_result)
{
    struct cli_pool pool;
    char *all = calloc(1, WHY_ALL), why[512] = "";
    int res;

    if (all == NULL || cli_pool_resolve(conf, &pool) != RG_OK) {
        free(all);
        return fail_result;
    }
    if (pool.n == 1 && conf->npool == 1 && pool.servers[0].addr[0] != '\0') {
        /* a pool of one (RGPU_SERVER, server =): no probe, its own words on failure */
        if ((res = try_one(pool.servers[0].addr, conf, why, sizeof(why))) != 0)
            rg_error("%s", why);
    } else {
        res = connect_pool(conf, &pool, try_one, all, fail_result);
    }
    cli_pool_free(&pool);
    free(all);
    return res;
}

/* ---- gpus = N ------------------------------------------------------------------------------ */

int cli_pool_place_gpus(const struct cli_conf *conf, int want, struct cli_placed *out, int cap,
                        char *why, size_t why_len)
{
    struct cli_pool pool;
    char *all = calloc(1, WHY_ALL);
    int n = 0, need = 0, have = 0;

    if (all == NULL || cli_pool_resolve(conf, &pool) != RG_OK) {
        free(all);
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    {
        int order[pool.n > 0 ? pool.n : 1];
        struct sched_candidate c[pool.n > 0 ? pool.n : 1];
        uint64_t seed = seed_now();

        cli_pool_probe(&pool, conf, conf->probe_timeout_ms);
        for (int i = 0; i < pool.n; i++)
            c[i] = candidate(&pool.servers[i]);
        n = sched_place(conf->policy, c, pool.n, &seed, order);
        need = sched_gpus_prefix(c, order, n, want);
        for (int k = 0; k < n; k++)
            have += (int)c[order[k]].ngpus;
        skipped(&pool, all);
        for (int i = 0; i < pool.n; i++)
            if (pool.servers[i].unprobed) /* how many GPUs it has is not known */
                append(all, pool.servers[i].addr, "does not answer probes: not counted");
        n = n < cap ? n : cap;
        for (int k = 0; need > 0 && k < n; k++) {
            snprintf(out[k].addr, sizeof(out[k].addr), "%s", pool.servers[order[k]].addr);
            out[k].ngpus = (int)c[order[k]].ngpus;
        }
    }
    if (need == 0) {
        snprintf(why, why_len, "gpus = %d: the pool has %d GPU(s) on servers that would admit "
                               "this job%s%.3500s", want, have, all[0] ? "; not counted: " : "", all);
        n = 0;
    }
    cli_pool_free(&pool);
    free(all);
    return n;
}
