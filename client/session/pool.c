/* A pool of gpu-servers (client/session/pool.h). */
#include "client/session/pool.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

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

static uint32_t addr_hash(const char *addr)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (; *addr; addr++)
        h = (h ^ (uint8_t)*addr) * 16777619u;
    return h;
}

/* The slot of addr in pool->by_addr: where it is, or the empty slot where it would go. */
static int addr_slot(const struct cli_pool *pool, const char *addr)
{
    int mask = pool->by_addr_cap - 1, k = (int)(addr_hash(addr) & (uint32_t)mask);

    while (pool->by_addr[k] >= 0 && strcmp(pool->servers[pool->by_addr[k]].addr, addr) != 0)
        k = (k + 1) & mask;
    return k;
}

static bool pool_has(const struct cli_pool *pool, const char *addr)
{
    return pool->by_addr_cap > 0 && pool->by_addr[addr_slot(pool, addr)] >= 0;
}

/* Index servers[i] by its address (grows the index to keep it at most half full). */
static rg_status_t pool_index(struct cli_pool *pool, int i)
{
    if (2 * (pool->n + 1) > pool->by_addr_cap) {
        int cap = pool->by_addr_cap ? 2 * pool->by_addr_cap : 64,
            *grown = malloc(sizeof(int) * (size_t)cap);
        if (grown == NULL)
            return RG_ERR_NOMEM;
        free(pool->by_addr);
        pool->by_addr = grown;
        pool->by_addr_cap = cap;
        memset(grown, 0xff, sizeof(int) * (size_t)cap); /* -1 */
        for (int j = 0; j < pool->n; j++)
            if (j != i && pool->servers[j].addr[0] != '\0')
                pool->by_addr[addr_slot(pool, pool->servers[j].addr)] = j;
    }
    pool->by_addr[addr_slot(pool, pool->servers[i].addr)] = i;
    return RG_OK;
}

static struct cli_server *pool_add(struct cli_pool *pool, const char *name)
{
    if (pool->n == pool->cap) {
        int cap = pool->cap ? 2 * pool->cap : 8;
        struct cli_server *grown = realloc(pool->servers, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        pool->servers = grown;
        pool->cap = cap;
    }
    memset(&pool->servers[pool->n], 0, sizeof(pool->servers[0]));
    snprintf(pool->servers[pool->n].name, sizeof(pool->servers[0].name), "%s", name);
    return &pool->servers[pool->n++];
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
        if (pool_index(pool, pool->n - 1) != RG_OK)
            break;
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
    free(pool->by_addr);
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

/* The Probe frame's message: this job's request as the pool would place it. */
static void probe_request(const struct cli_conf *conf, Rgpu__Probe *req)
{
    req->proto_version = PROTO_VERSION;
    req->proto_minor = PROTO_VERSION_MINOR;
    req->tenant = (char *)conf->tenant;
    req->token = (char *)conf->token;
    req->mem_quota = conf->mem_quota;
    req->mem_share = conf->mem_share;
}

/* The server's answer to a probe, a frame of msg_len bytes at msg: the reply (answered: owned
 * by the caller) or NULL with the reason in why and, for a refusal for load, how long the
 * server asks to wait in *retry_ms_p (0: no retry). One reading for the blocking probe
 * (cli_probe_open) and the nonblocking rounds of a pool. */
static Rgpu__ProbeReply *probe_answer(const struct cli_conf *conf,
                                      const struct proto_frame_hdr *hdr, const uint8_t *msg,
                                      int *retry_ms_p, char *why, size_t why_len)
{
    Rgpu__ProbeReply *r = NULL;
    Rgpu__Welcome *w = NULL;

    *retry_ms_p = 0;
    if (hdr->type == PROTO_WELCOME && hdr->bulk_len == 0 &&
        (w = rgpu__welcome__unpack(NULL, hdr->msg_len, msg)) != NULL && w->status != 0)
        take_refusal(w->status, w->reason, w->retry_after_ms, retry_ms_p, why, why_len);
    else if (hdr->type != PROTO_PROBE_REPLY || hdr->bulk_len != 0 ||
             (r = rgpu__probe_reply__unpack(NULL, hdr->msg_len, msg)) == NULL)
        snprintf(why, why_len, "answered the probe with a malformed %s frame",
                 proto_frame_type_name(hdr->type));
    else if (r->status != 0)
        take_refusal(r->status, r->reason, r->retry_after_ms, retry_ms_p, why, why_len);
    else if (conf->mem_share != 0 && r->proto_minor < PROTO_MINOR_MEM_SHARE)
        snprintf(why, why_len,
                 "speaks protocol %u.%u, which cannot honour mem_share (%u.%u or "
                 "later): ask with mem_quota",
                 PROTO_VERSION, r->proto_minor, PROTO_VERSION, PROTO_MINOR_MEM_SHARE);
    else
        goto answered;
    if (r != NULL)
        rgpu__probe_reply__free_unpacked(r, NULL);
    r = NULL;
answered:
    if (w != NULL)
        rgpu__welcome__free_unpacked(w, NULL);
    return r;
}

static rg_status_t probe_exchange(struct transport_conn *conn, const struct cli_conf *conf,
                                  double deadline, Rgpu__ProbeReply **reply_p, int *retry_ms_p,
                                  char *why, size_t why_len)
{
    Rgpu__Probe req = RGPU__PROBE__INIT;
    struct proto_frame_hdr hdr;
    uint8_t *buf = malloc(PROBE_BUF);
    Rgpu__ProbeReply *r = NULL;
    char seen[80] = "";
    rg_status_t st;

    *retry_ms_p = 0;
    if (buf == NULL)
        return RG_ERR_NOMEM;
    probe_request(conf, &req);
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
    else
        r = probe_answer(conf, &hdr, buf, retry_ms_p, why, why_len);
    free(buf);
    if (r != NULL) {
        *reply_p = r;
        return RG_OK;
    }
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

/* ---- the probes: nonblocking, one thread, at most PROBE_INFLIGHT open at once ---------------- */

#define PROBE_INFLIGHT 256 /* probes open at once: file descriptors, bounded for any pool size */

enum probe_state { PROBE_CONNECTING, PROBE_SENDING, PROBE_READING };

struct probe_io {
    int server; /* index into the pool */
    int fd;
    enum probe_state state;
    size_t off;  /* bytes of the request sent, or of the reply received */
    size_t need; /* the reply's bytes: its header, then header and message */
    uint8_t *buf;
    double t0, connect_deadline;
};

/* "ip:port" or "[ip6]:port" (cli_pool_resolve wrote it) to a socket address: no lookup. */
static bool numeric_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *res = NULL;
    char host[INET6_ADDRSTRLEN + 2], port[16];
    bool ok;

    if (rg_split_hostport(addr, host, sizeof(host), port, sizeof(port), CLI_DEFAULT_PORT) !=
            RG_OK ||
        getaddrinfo(host, port, &hints, &res) != 0)
        return false;
    ok = res->ai_addrlen <= sizeof(*sa);
    if (ok) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *len = res->ai_addrlen;
    }
    freeaddrinfo(res);
    return ok;
}

static void unreachable(struct cli_server *s, int err)
{
    snprintf(s->why, sizeof(s->why), "unreachable: %s",
             err == ECONNREFUSED ? rg_status_str(RG_ERR_REFUSED)
             : err == ETIMEDOUT  ? rg_status_str(RG_ERR_TIMEOUT)
                                 : strerror(err));
}

/* Start one probe: a nonblocking connect. false (the reason in the server) when it cannot. */
static bool probe_start(struct probe_io *io, struct cli_server *s, int server,
                        const struct cli_conf *conf, double deadline)
{
    struct sockaddr_storage sa;
    socklen_t len;
    int one = 1;

    memset(io, 0, sizeof(*io));
    io->server = server;
    io->fd = -1;
    io->t0 = now_ms();
    io->connect_deadline = io->t0 + conf->connect_timeout_ms;
    if (io->connect_deadline > deadline)
        io->connect_deadline = deadline;
    s->probed = true;
    if (!numeric_addr(s->addr, &sa, &len)) {
        snprintf(s->why, sizeof(s->why), "not a numeric address: %.80s", s->addr);
        return false;
    }
    if ((io->buf = malloc(PROBE_BUF)) == NULL ||
        (io->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
        snprintf(s->why, sizeof(s->why), "cannot start a probe: %s", strerror(errno));
        goto err;
    }
    setsockopt(io->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(io->fd, (struct sockaddr *)&sa, len) != 0 && errno != EINPROGRESS) {
        unreachable(s, errno);
        goto err;
    }
    io->state = PROBE_CONNECTING;
    return true;
err:
    if (io->fd >= 0)
        close(io->fd);
    free(io->buf);
    io->fd = -1;
    io->buf = NULL;
    return false;
}

static void probe_end(struct probe_io *io)
{
    if (io->fd >= 0)
        close(io->fd);
    free(io->buf);
    io->fd = -1;
    io->buf = NULL;
}

/* The reply in io->buf: the server answered (true) or the reason is in s->why (a refusal for
 * load marks the server to be probed again: s->busy). */
static bool probe_reply(struct probe_io *io, struct cli_server *s, const struct cli_conf *conf)
{
    struct proto_frame_hdr hdr;
    int retry_ms;

    memcpy(&hdr, io->buf, sizeof(hdr));
    s->reply = probe_answer(conf, &hdr, io->buf + sizeof(hdr), &retry_ms, s->why, sizeof(s->why));
    if (s->reply == NULL) {
        s->busy_retry_ms = retry_ms;
        return false;
    }
    s->answered = true;
    s->rtt_ms = now_ms() - io->t0;
    s->why[0] = '\0';
    return true;
}

/* Advance one probe on its poll events. Returns true when it is over (answered or failed). */
static bool probe_step(struct probe_io *io, struct cli_server *s, short revents, const uint8_t *req,
                       size_t req_len, const struct cli_conf *conf)
{
    ssize_t n;
    int err = 0;
    socklen_t el = sizeof(err);

    if (io->state == PROBE_CONNECTING) {
        if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            unreachable(s, err ? err : errno);
            return true;
        }
        io->state = PROBE_SENDING;
        io->off = 0;
    }
    if (io->state == PROBE_SENDING) {
        n = send(io->fd, req + io->off, req_len - io->off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (n < 0) {
            snprintf(s->why, sizeof(s->why), "the probe failed: %s", strerror(errno));
            return true;
        }
        if ((io->off += (size_t)n) < req_len)
            return false;
        io->state = PROBE_READING;
        io->off = 0;
        io->need = sizeof(struct proto_frame_hdr);
        return false;
    }
    if (!(revents & (POLLIN | POLLHUP | POLLERR)))
        return false;
    n = recv(io->fd, io->buf + io->off, io->need - io->off, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    if (n == 0 && io->off == 0) { /* closed at the probe: an older server */
        s->unprobed = true;
        snprintf(s->why, sizeof(s->why),
                 "closed the connection at the probe (a gpu-server "
                 "older than the probe?)");
        return true;
    }
    if (n <= 0) {
        snprintf(s->why, sizeof(s->why), "the probe failed: %s",
                 n == 0 ? rg_status_str(RG_ERR_CLOSED) : strerror(errno));
        return true;
    }
    io->off += (size_t)n;
    if (io->off < io->need)
        return false;
    if (io->need == sizeof(struct proto_frame_hdr)) {
        struct proto_frame_hdr hdr;
        memcpy(&hdr, io->buf, sizeof(hdr));
        if (hdr.magic != PROTO_MAGIC) { /* an HTTP server, say: what it said, printable */
            char first[sizeof(hdr) + 1], seen[80];
            for (size_t i = 0; i < sizeof(hdr); i++)
                first[i] = io->buf[i] == '\0' ? ' ' : (char)io->buf[i];
            first[sizeof(hdr)] = '\0';
            snprintf(s->why, sizeof(s->why), "not a gpu-server (it answered \"%s\")",
                     rg_log_escape(seen, sizeof(seen), first));
            return true;
        }
        if (hdr.msg_len > PROBE_BUF - sizeof(hdr)) {
            snprintf(s->why, sizeof(s->why), "the probe failed: %s", rg_status_str(RG_ERR_PROTO));
            return true;
        }
        io->need += hdr.msg_len;
        if (hdr.msg_len > 0)
            return false;
    }
    probe_reply(io, s, conf);
    return true;
}

/* The GPUs of the servers that answered and would admit the job, over the whole pool. */
static int fitting_gpus(const struct cli_pool *pool)
{
    int gpus = 0;

    for (int i = 0; i < pool->n; i++)
        if (pool->servers[i].answered && pool->servers[i].reply->admit)
            gpus += (int)pool->servers[i].reply->n_gpus;
    return gpus;
}

/* Probe the servers which[0..n) of the pool, PROBE_INFLIGHT at most at once, until every one
 * answered or failed, or deadline (ms, now_ms's clock). With want > 0 the round ends early once
 * the GPUs in hand (have, from earlier rounds) and those of this round's servers that would
 * admit the job make want and the hedge (sched_hedge_ms) passed: servers still silent then are
 * passed over as not answering in time. */
static void probe_round(struct cli_pool *pool, const struct cli_conf *conf, const int *which, int n,
                        double deadline, int want, int have)
{
    struct probe_io *io = calloc(PROBE_INFLIGHT, sizeof(*io));
    struct pollfd pfd[PROBE_INFLIGHT];
    Rgpu__Probe req = RGPU__PROBE__INIT;
    uint8_t frame[1024];
    size_t frame_len;
    int next = 0, open = 0;
    double t0 = now_ms(), hedge_end = 0;

    probe_request(conf, &req);
    frame_len = proto_frame_pack(frame, sizeof(frame), PROTO_PROBE, 0, &req.base, 0);
    if (io == NULL || frame_len == 0) {
        for (int k = 0; k < n; k++) {
            pool->servers[which[k]].probed = true;
            snprintf(pool->servers[which[k]].why, sizeof(pool->servers[0].why),
                     "cannot start a probe");
        }
        free(io);
        return;
    }
    for (;;) {
        double now = now_ms(), until = deadline;
        int timeout;

        while (open < PROBE_INFLIGHT && next < n && now < deadline) {
            struct cli_server *s = &pool->servers[which[next]];
            if (s->addr[0] == '\0') { /* did not resolve: its reason is set */
                s->probed = true;
                next++;
                continue;
            }
            if (probe_start(&io[open], s, which[next], conf, deadline))
                open++;
            next++;
        }
        if (open == 0 || now >= deadline || (hedge_end > 0 && now >= hedge_end))
            break;
        for (int k = 0; k < open; k++) {
            pfd[k] = (struct pollfd){io[k].fd, io[k].state == PROBE_READING ? POLLIN : POLLOUT, 0};
            if (io[k].state == PROBE_CONNECTING && io[k].connect_deadline < until)
                until = io[k].connect_deadline;
        }
        if (hedge_end > 0 && hedge_end < until)
            until = hedge_end;
        timeout = until - now < 1 ? 1 : (int)(until - now);
        if (poll(pfd, (nfds_t)open, timeout) < 0 && errno != EINTR)
            break;
        now = now_ms();
        for (int k = 0; k < open; k++) {
            struct cli_server *s = &pool->servers[io[k].server];
            bool over;
            if (pfd[k].revents == 0 && io[k].state == PROBE_CONNECTING &&
                now >= io[k].connect_deadline) {
                unreachable(s, ETIMEDOUT);
                over = true;
            } else {
                over = pfd[k].revents != 0 &&
                       probe_step(&io[k], s, pfd[k].revents, frame, frame_len, conf);
            }
            if (!over)
                continue;
            probe_end(&io[k]);
            if (s->answered && s->reply->admit)
                have += (int)s->reply->n_gpus;
            if (want > 0 && hedge_end == 0 && have >= want)
                hedge_end = now + sched_hedge_ms(now - t0);
            io[k] = io[--open]; /* its slot goes to the last open probe */
            pfd[k] = pfd[open];
            k--;
        }
    }
    for (int k = 0; k < open; k++) { /* still silent: not waited for */
        struct cli_server *s = &pool->servers[io[k].server];
        snprintf(s->why, sizeof(s->why),
                 io[k].state == PROBE_CONNECTING ? "unreachable: timed out"
                                                 : "no answer to the probe in time");
        s->late = hedge_end > 0 && now_ms() < deadline;
        probe_end(&io[k]);
    }
    free(io);
}

/* The servers to probe again before new ones, into which (room for pool->n), their marks
 * cleared: those the hedge did not wait for, and those refused for load (server full, busy),
 * after the longest wait such a server asked for, with jitter, within the deadline. */
static int again_servers(struct cli_pool *pool, int *which, double deadline)
{
    int n = 0, wait_ms = 0;

    for (int i = 0; i < pool->n; i++) {
        struct cli_server *s = &pool->servers[i];
        if (s->busy_retry_ms > wait_ms)
            wait_ms = s->busy_retry_ms;
        if (s->late || s->busy_retry_ms > 0) {
            s->late = false;
            s->busy_retry_ms = 0;
            which[n++] = i;
        }
    }
    if (wait_ms > 0) {
        wait_ms +=
            rand() % (wait_ms / 2 + 1); /* jitter: refused clients do not come back together */
        if (now_ms() + wait_ms >= deadline)
            return 0; /* no time left to ask again: their reasons stand */
        usleep((useconds_t)wait_ms * 1000);
    }
    return n;
}

void cli_pool_probe(struct cli_pool *pool, const struct cli_conf *conf, int timeout_ms)
{
    int *all = malloc(sizeof(int) * (size_t)(pool->n > 0 ? pool->n : 1));

    if (all == NULL)
        return;
    for (int i = 0; i < pool->n; i++)
        all[i] = i;
    probe_round(pool, conf, all, pool->n, now_ms() + timeout_ms, 0, 0);
    free(all);
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
    struct sched_candidate *c = malloc(sizeof(*c) * (size_t)(pool->n > 0 ? pool->n : 1));
    uint64_t seed = seed_now();
    int n;

    if (c == NULL)
        return 0;
    for (int i = 0; i < pool->n; i++)
        c[i] = candidate(&pool->servers[i]);
    n = sched_place(conf->policy, c, pool->n, &seed, order_p);
    free(c);
    return n;
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
        if (s->unprobed || !s->probed)
            continue; /* tried last: its own failure, if any, is appended then; or not in the
                         rounds probed (a large pool) */
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

/* Servers of the pool the rounds reached, for the messages ("" when all were). */
static void probed_count(const struct cli_pool *pool, char *buf, size_t len)
{
    int probed = 0;

    for (int i = 0; i < pool->n; i++)
        probed += pool->servers[i].probed;
    if (probed < pool->n)
        snprintf(buf, len, " (%d of the pool's %d servers probed)", probed, pool->n);
    else
        buf[0] = '\0';
}

/* "a; b" + "c; d" -> "a; b; c; d" */
static void append_all(char *all, const char *more)
{
    size_t used = strlen(all);

    if (more[0] != '\0')
        snprintf(all + used, WHY_ALL - used, "%s%s", used ? "; " : "", more);
}

/* Try the servers of order[0..n) not tried yet, in that order; 0 when one took the job (its
 * info line names the servers passed over: those placement left out, then those that failed,
 * tries). */
static int try_in_order(const struct cli_conf *conf, const struct cli_pool *pool, const int *order,
                        int n, bool *tried, cli_pool_try_fn try_one, char *tries, int *res_p)
{
    char why[512], rank[96], count[80], *all;

    for (int k = 0; k < n; k++) {
        const struct cli_server *s = &pool->servers[order[k]];
        if (tried[order[k]])
            continue;
        tried[order[k]] = true;
        why[0] = '\0';
        if ((*res_p = try_one(s->addr, conf, why, sizeof(why))) == 0) {
            if ((all = calloc(1, WHY_ALL)) == NULL)
                return 0;
            skipped(pool, all);
            append_all(all, tries);
            reason(conf->policy, k, n, rank, sizeof(rank));
            probed_count(pool, count, sizeof(count));
            rg_info("pool: job placed on %s%s%s%s by policy %s (%s)%s%s%s", s->addr,
                    strcmp(s->name, s->addr) ? " (" : "", strcmp(s->name, s->addr) ? s->name : "",
                    strcmp(s->name, s->addr) ? ")" : "", sched_policy_name(conf->policy), rank,
                    count, all[0] ? "; passed over: " : "", all);
            free(all);
            return 0;
        }
        append(tries, s->addr, why);
    }
    return -1;
}

/* Probe in rounds (sched_probe_order, sched_probe_round), try those that could take the job in
 * the policy's order after each round, go on to the next round only when none of them did;
 * servers that cannot answer a probe last. 0 when a server took the job. */
static int connect_pool(const struct cli_conf *conf, struct cli_pool *pool, cli_pool_try_fn try_one,
                        char *all, int fail_result)
{
    int n = pool->n, *perm = malloc(sizeof(int) * (size_t)n),
        *order = malloc(sizeof(int) * (size_t)n);
    bool *tried = calloc((size_t)n, sizeof(bool));
    int d = sched_probe_round(conf->probe_sample, 1, n), next = 0, m, res = fail_result;
    double deadline = now_ms() + conf->probe_timeout_ms;
    uint64_t seed = seed_now();
    char count[80], *tries = calloc(1, WHY_ALL);

    if (perm == NULL || order == NULL || tried == NULL || tries == NULL)
        goto out;
    sched_probe_order(conf->policy, n, &seed, perm);
    while (now_ms() < deadline) {
        int k = again_servers(pool, order, deadline); /* late or busy ones, before new ones */
        if (k > 0) {
            probe_round(pool, conf, order, k, deadline, 1, 0);
        } else if (next < n) {
            k = n - next < d ? n - next : d;
            probe_round(pool, conf, perm + next, k, deadline, 1, 0); /* earlier ones were tried */
            next += k;
        } else {
            break;
        }
        m = cli_pool_order(pool, conf, order);
        if (try_in_order(conf, pool, order, m, tried, try_one, tries, &res) == 0)
            goto placed;
    }
    for (m = 0, next = 0; next < n; next++) /* servers that cannot answer a probe: last, in order */
        if (pool->servers[next].unprobed && !tried[next])
            order[m++] = next;
    if (try_in_order(conf, pool, order, m, tried, try_one, tries, &res) == 0)
        goto placed;
    skipped(pool, all);
    append_all(all, tries);
    probed_count(pool, count, sizeof(count));
    rg_error("no gpu-server of the pool can take this job; %d tried%s: %s", pool->n, count, all);
    goto out;
placed:
    res = 0;
out:
    free(perm);
    free(order);
    free(tried);
    free(tries);
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
    char *all = calloc(1, WHY_ALL), count[80];
    int n = 0, need = 0, have = 0, *order = NULL, *perm = NULL, d, next = 0;
    struct sched_candidate *c = NULL;
    uint64_t seed = seed_now();
    double deadline = now_ms() + conf->probe_timeout_ms;

    if (all == NULL || cli_pool_resolve(conf, &pool) != RG_OK) {
        free(all);
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    order = malloc(sizeof(int) * (size_t)(pool.n > 0 ? pool.n : 1));
    perm = malloc(sizeof(int) * (size_t)(pool.n > 0 ? pool.n : 1));
    c = malloc(sizeof(*c) * (size_t)(pool.n > 0 ? pool.n : 1));
    if (order == NULL || perm == NULL || c == NULL) {
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    /* rounds until the answers have room for want GPUs, the pool is probed, or time is up */
    d = sched_probe_round(conf->probe_sample, want, pool.n);
    sched_probe_order(conf->policy, pool.n, &seed, perm);
    while (now_ms() < deadline && fitting_gpus(&pool) < want) {
        int k = again_servers(&pool, order, deadline); /* late or busy ones, before new ones */
        if (k > 0) {
            probe_round(&pool, conf, order, k, deadline, want, fitting_gpus(&pool));
        } else if (next < pool.n) {
            k = pool.n - next < d ? pool.n - next : d;
            probe_round(&pool, conf, perm + next, k, deadline, want, fitting_gpus(&pool));
            next += k;
        } else {
            break;
        }
    }
    for (int i = 0; i < pool.n; i++)
        pool.servers[i].late = false;
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
    if (need == 0) {
        probed_count(&pool, count, sizeof(count));
        snprintf(why, why_len,
                 "gpus = %d: the pool has %d GPU(s) on servers that would admit "
                 "this job%s%s%.3500s",
                 want, have, count, all[0] ? "; not counted: " : "", all);
        n = 0;
    }
out:
    cli_pool_free(&pool);
    free(all);
    free(order);
    free(perm);
    free(c);
    return n;
}
