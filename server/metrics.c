#include "server/metrics.h"

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/sha256.h"

/* Bounds of the endpoint (docs/security.md): connections at once (the listener pauses at the
 * cap, so more wait in the kernel's backlog and hold no descriptor here), and seconds a
 * connection may stay idle or take to send its request. */
#define HTTP_MAX_CONNS 32
#define HTTP_TIMEOUT_S 10

/* What a 1 s timer remembers of each slot, to turn GPU time into a share of the last second. */
struct sample {
    int32_t pid;
    uint64_t session, gpu_ns, launches;
    double share;            /* of one GPU over the last sampling period */
    double launch_rate, due; /* launches per second then; its due share (srv_table_due_shares) */
};

/* One HTTP listener: metrics_listen (private: /status too, the token if set) or
 * metrics_public_listen (/metrics and /healthz to anyone). Each has its own connection cap. */
struct http_ep {
    struct srv_metrics *m;
    struct evhttp *http;
    struct evconnlistener *listener;
    struct event *resume; /* sweeps and resumes accepting while paused */
    int conns;            /* HTTP connections open now: bevs[0, conns) */
    struct bufferevent *bevs[HTTP_MAX_CONNS];
    bool paused; /* at the cap, or after a failed accept */
    bool public;
    bool has_token;
    uint8_t token_sha256[RG_SHA256_LEN];
};

struct srv_metrics {
    struct event *tick;
    struct srv_table *t;
    char name[64];
    uint64_t last_tick_ns;
    struct http_ep eps[2];
    int neps;
    struct sample samples[SRV_TABLE_SLOTS];
    double gpu_util[SRV_TABLE_GPUS];
    double due[SRV_TABLE_SLOTS]; /* scratch of on_tick */
};

static void sweep(struct http_ep *ep);

/* ---- sampling --------------------------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct srv_metrics *m = arg;
    uint64_t now = srv_now_ns(), dt = now - m->last_tick_ns;

    for (int e = 0; e < m->neps; e++)
        sweep(&m->eps[e]);
    int hi = atomic_load(&m->t->hiwater);

    memset(m->gpu_util, 0, sizeof(m->gpu_util));
    srv_table_due_shares(m->t, now, m->due);
    for (int i = 0; i < hi; i++) {
        struct srv_table_slot *sl = &m->t->slots[i];
        struct sample *p = &m->samples[i];
        int32_t pid = atomic_load(&sl->pid);
        uint64_t ns = atomic_load(&sl->gpu_ns);
        int gpu = atomic_load(&sl->gate_gpu);
        uint64_t launches = atomic_load(&sl->launches);
        if (pid == 0 || pid != p->pid || sl->session != p->session) { /* new or gone */
            *p = (struct sample){.pid = pid,
                                 .session = sl->session,
                                 .gpu_ns = ns,
                                 .launches = launches,
                                 .due = m->due[i]};
            continue;
        }
        p->share = dt > 0 ? (double)(ns - p->gpu_ns) / (double)dt : 0;
        p->launch_rate = dt > 0 ? (double)(launches - p->launches) * 1e9 / (double)dt : 0;
        p->gpu_ns = ns;
        p->launches = launches;
        p->due = m->due[i];
        if (gpu >= 0 && gpu < SRV_TABLE_GPUS)
            m->gpu_util[gpu] += p->share;
    }
    m->last_tick_ns = now;
}

/* ---- reading the table ------------------------------------------------------------------- */

enum field {
    F_MEM_USED,
    F_MEM_QUOTA,
    F_GPU_S,
    F_SHARE,
    F_LAUNCHES,
    F_BYTES_IN,
    F_BYTES_OUT,
    F_CALLS,
    F_ERRORS,
    F_HELD_S,
    F_DUE,
    F_RATE,
    F_COUNT
};

static const struct {
    const char *name, *type, *help;
} fields[F_COUNT] = {
    [F_MEM_USED] = {"memory_used_bytes", "gauge", "device memory held, every allocation path"},
    [F_MEM_QUOTA] = {"memory_quota_bytes", "gauge", "memory quota per GPU (0 = none)"},
    [F_GPU_S] = {"gpu_seconds_total", "counter", "measured GPU time of kernel and graph launches"},
    [F_SHARE] = {"gpu_share", "gauge", "fraction of a GPU's time used over the last second"},
    [F_LAUNCHES] = {"launches_total", "counter", "kernel and graph launches"},
    [F_BYTES_IN] = {"received_bytes_total", "counter", "bytes received from the client"},
    [F_BYTES_OUT] = {"sent_bytes_total", "counter", "bytes of copies sent to the client"},
    [F_CALLS] = {"calls_total", "counter", "driver calls executed"},
    [F_ERRORS] = {"errors_total", "counter", "driver calls that returned an error"},
    [F_HELD_S] = {"gate_held_seconds_total", "counter", "time launches waited at the compute gate"},
    [F_DUE] = {"gpu_share_due", "gauge", "share of its GPU the compute gate gives it now"},
    [F_RATE] = {"launches_per_second", "gauge", "kernel and graph launches over the last second"},
};

static double field_of(struct srv_metrics *m, int i, enum field f)
{
    struct srv_table_slot *sl = &m->t->slots[i];

    switch (f) {
    case F_MEM_USED:
        return (double)atomic_load(&sl->mem_used);
    case F_MEM_QUOTA:
        return (double)sl->quota;
    case F_GPU_S:
        return atomic_load(&sl->gpu_ns) / 1e9;
    case F_SHARE:
        return m->samples[i].pid == atomic_load(&sl->pid) ? m->samples[i].share : 0;
    case F_LAUNCHES:
        return (double)atomic_load(&sl->launches);
    case F_BYTES_IN:
        return (double)atomic_load(&sl->bytes_in);
    case F_BYTES_OUT:
        return (double)atomic_load(&sl->bytes_out);
    case F_CALLS:
        return (double)atomic_load(&sl->calls);
    case F_ERRORS:
        return (double)atomic_load(&sl->errors);
    case F_HELD_S:
        return atomic_load(&sl->held_ns) / 1e9;
    case F_DUE:
        return m->samples[i].pid == atomic_load(&sl->pid) ? m->samples[i].due : 0;
    case F_RATE:
        return m->samples[i].pid == atomic_load(&sl->pid) ? m->samples[i].launch_rate : 0;
    case F_COUNT:
        break;
    }
    return 0;
}

static const char *tenant_label(struct srv_metrics *m, int i)
{
    const char *n = srv_table_tenant_name(m->t, i);

    return n[0] ? n : "(none)";
}

/* A string as a JSON string body or a Prometheus label value (the same escapes do for the
 * names found here: backslash, quote, control characters). */
static void put_escaped(struct evbuffer *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            evbuffer_add_printf(out, "\\%c", c);
        else if (c < 0x20)
            evbuffer_add_printf(out, "\\u%04x", c);
        else
            evbuffer_add(out, s, 1);
    }
}

/* Counters of the tenant's sessions that have ended. */
static double tenant_ended(const struct srv_table_tenant *e, enum field f)
{
    switch (f) {
    case F_GPU_S:
        return e->ended_gpu_ns / 1e9;
    case F_LAUNCHES:
        return (double)e->ended_launches;
    case F_BYTES_IN:
        return (double)e->ended_bytes_in;
    case F_BYTES_OUT:
        return (double)e->ended_bytes_out;
    case F_CALLS:
        return (double)e->ended_calls;
    case F_ERRORS:
        return (double)e->ended_errors;
    case F_HELD_S:
        return e->ended_held_ns / 1e9;
    default:
        return 0; /* gauges: live sessions only */
    }
}

/* Tenant k's sum of field f over its live sessions, plus what its ended sessions counted (k =
 * -1: sessions without a tenant, live ones only). */
static double tenant_sum(struct srv_metrics *m, int k, enum field f, int *sessions)
{
    int hi = atomic_load(&m->t->hiwater);
    double v = k >= 0 ? tenant_ended(&m->t->tenants[k], f) : 0;

    *sessions = 0;
    for (int i = 0; i < hi; i++) {
        if (atomic_load(&m->t->slots[i].pid) == 0 || m->t->slots[i].tenant != k)
            continue;
        (*sessions)++;
        v += field_of(m, i, f);
    }
    return v;
}

/* ---- /metrics ---------------------------------------------------------------------------- */

/* Every metric family opens with its HELP and TYPE lines (promtool check metrics). */
static void prom_family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_sessions(struct srv_metrics *m, struct evbuffer *out, enum field f)
{
    int hi = atomic_load(&m->t->hiwater);
    char name[96], help[160];

    snprintf(name, sizeof(name), "rgpu_session_%s", fields[f].name);
    snprintf(help, sizeof(help), "Per session: %s.", fields[f].help);
    prom_family(out, name, fields[f].type, help);
    for (int i = 0; i < hi; i++) {
        if (atomic_load(&m->t->slots[i].pid) == 0)
            continue;
        evbuffer_add_printf(out, "%s{tenant=\"", name);
        put_escaped(out, tenant_label(m, i));
        evbuffer_add_printf(out, "\",session=\"%llu\"} %.17g\n",
                            (unsigned long long)m->t->slots[i].session, field_of(m, i, f));
    }
}

static void prom_tenants(struct srv_metrics *m, struct evbuffer *out, enum field f)
{
    char name[96], help[160];
    int n;

    snprintf(name, sizeof(name), "rgpu_tenant_%s", fields[f].name);
    snprintf(help, sizeof(help), "Per tenant (its sessions summed): %s.", fields[f].help);
    prom_family(out, name, fields[f].type, help);
    for (int k = -1; k < m->t->ntenants; k++) {
        double v = tenant_sum(m, k, f, &n);
        if (k < 0 && n == 0)
            continue;
        evbuffer_add_printf(out, "%s{tenant=\"", name);
        put_escaped(out, k < 0 ? "(none)" : m->t->tenants[k].name);
        evbuffer_add_printf(out, "\"} %.17g\n", v);
    }
}

enum gpu_field { G_TOTAL, G_RESERVED, G_USED, G_SESSIONS, G_UTIL, G_COUNT };

static const struct {
    const char *metric, *json, *help;
} gpu_fields[G_COUNT] = {
    [G_TOTAL] = {"memory_total_bytes", "memory_total_bytes", "Per GPU: device memory."},
    [G_RESERVED] = {"memory_reserved_bytes", "memory_reserved_bytes",
                    "Per GPU: memory reserved by the quotas of the sessions on it."},
    [G_USED] = {"memory_used_bytes", "memory_used_bytes",
                "Per GPU: memory held by the sessions on it."},
    [G_SESSIONS] = {"sessions", "sessions", "Per GPU: sessions on it, all tenants."},
    [G_UTIL] = {"utilization", "utilization",
                "Per GPU: fraction of the last second its kernels ran (0 to 1)."},
};

/* GPU g's figure f (g served: total_mem set). */
static double gpu_value(struct srv_metrics *m, int g, enum gpu_field f)
{
    int hi = atomic_load(&m->t->hiwater);
    double v = 0;

    if (f == G_TOTAL)
        return (double)atomic_load(&m->t->gpus[g].total_mem);
    if (f == G_UTIL)
        return m->gpu_util[g];
    for (int i = 0; i < hi; i++) {
        struct srv_table_slot *sl = &m->t->slots[i];
        if (atomic_load(&sl->pid) == 0 || !(sl->gpu_mask & (1u << g)))
            continue;
        v += f == G_RESERVED ? (double)sl->quota
             : f == G_USED   ? (double)atomic_load(&sl->mem_used)
                             : 1;
    }
    return v;
}

static void prom_gpus(struct srv_metrics *m, struct evbuffer *out)
{
    char name[96];

    for (int f = 0; f < G_COUNT; f++) {
        snprintf(name, sizeof(name), "rgpu_gpu_%s", gpu_fields[f].metric);
        prom_family(out, name, "gauge", gpu_fields[f].help);
        for (int g = 0; g < SRV_TABLE_GPUS; g++)
            if (atomic_load(&m->t->gpus[g].total_mem) != 0)
                evbuffer_add_printf(out, "%s{gpu=\"%d\"} %.17g\n", name, g, gpu_value(m, g, f));
    }
}

void srv_metrics_prometheus(struct srv_metrics *m, struct evbuffer *out)
{
    int n;

    prom_family(out, "rgpu_tenant_sessions", "gauge", "Per tenant: its live sessions.");
    for (int k = 0; k < m->t->ntenants; k++) {
        tenant_sum(m, k, F_CALLS, &n);
        evbuffer_add_printf(out, "rgpu_tenant_sessions{tenant=\"");
        put_escaped(out, m->t->tenants[k].name);
        evbuffer_add_printf(out, "\"} %d\n", n);
    }
    for (int f = 0; f < F_COUNT; f++)
        prom_tenants(m, out, f);
    for (int f = 0; f < F_COUNT; f++)
        prom_sessions(m, out, f);
    prom_gpus(m, out);
}

/* ---- /status (docs/status-schema.md) ----------------------------------------------------- */

static void json_fields(struct srv_metrics *m, struct evbuffer *out, int slot, int tenant)
{
    int n;

    for (int f = 0; f < F_COUNT; f++) {
        double v = slot >= 0 ? field_of(m, slot, f) : tenant_sum(m, tenant, f, &n);
        evbuffer_add_printf(out, ",\"%s\":%.17g", fields[f].name, v);
    }
}

static void json_tenants(struct srv_metrics *m, struct evbuffer *out)
{
    int n;

    evbuffer_add_printf(out, "\"tenants\":[");
    for (int k = 0; k < m->t->ntenants; k++) {
        const struct srv_table_tenant *e = &m->t->tenants[k];
        tenant_sum(m, k, F_CALLS, &n);
        evbuffer_add_printf(out, "%s{\"name\":\"", k ? "," : "");
        put_escaped(out, e->name);
        evbuffer_add_printf(out,
                            "\",\"in_config\":%s,\"weight\":%u,\"cap\":%.3f,\"class\":\"%s\","
                            "\"max_sessions\":%u,\"mem_quota_bytes\":%llu,\"sessions\":%d",
                            e->in_config ? "true" : "false", e->weight, e->cap_permille / 1000.0,
                            e->best_effort ? "best-effort" : "guaranteed", e->max_sessions,
                            (unsigned long long)e->mem_quota, n);
        json_fields(m, out, -1, k);
        evbuffer_add_printf(out, "}");
    }
    evbuffer_add_printf(out, "]");
}

static void json_sessions(struct srv_metrics *m, struct evbuffer *out)
{
    int hi = atomic_load(&m->t->hiwater);
    bool first = true;

    evbuffer_add_printf(out, "\"sessions\":[");
    for (int i = 0; i < hi; i++) {
        struct srv_table_slot *sl = &m->t->slots[i];
        int32_t pid = atomic_load(&sl->pid);
        if (pid == 0)
            continue;
        evbuffer_add_printf(out, "%s{\"id\":%llu,\"pid\":%d,\"tenant\":\"", first ? "" : ",",
                            (unsigned long long)sl->session, (int)pid);
        put_escaped(out, srv_table_tenant_name(m->t, i));
        evbuffer_add_printf(out, "\",\"peer\":\"");
        put_escaped(out, sl->peer);
        evbuffer_add_printf(out, "\",\"client\":\"");
        put_escaped(out, sl->client);
        evbuffer_add_printf(out, "\",\"started_unix_seconds\":%llu,\"gpu_mask\":%u,\"gpu\":%d",
                            (unsigned long long)sl->started, sl->gpu_mask,
                            (int)atomic_load(&sl->gate_gpu));
        json_fields(m, out, i, -1);
        evbuffer_add_printf(out, "}");
        first = false;
    }
    evbuffer_add_printf(out, "]");
}

/* GPU g's name as the first probe found it ("" before any probe). */
static const char *gpu_name(struct srv_metrics *m, int g)
{
    if (!atomic_load(&m->t->probe_ready))
        return "";
    for (int k = 0; k < m->t->probe_ngpus && k < SRV_TABLE_GPUS; k++)
        if (m->t->probe_gpus[k].index == g)
            return m->t->probe_gpus[k].name;
    return "";
}

static void json_gpus(struct srv_metrics *m, struct evbuffer *out)
{
    bool first = true;

    evbuffer_add_printf(out, "\"gpus\":[");
    for (int g = 0; g < SRV_TABLE_GPUS; g++) {
        if (atomic_load(&m->t->gpus[g].total_mem) == 0)
            continue;
        evbuffer_add_printf(out, "%s{\"index\":%d,\"name\":\"", first ? "" : ",", g);
        put_escaped(out, gpu_name(m, g));
        evbuffer_add_printf(out, "\"");
        for (int f = 0; f < G_COUNT; f++)
            evbuffer_add_printf(out, f == G_UTIL ? ",\"%s\":%.4f" : ",\"%s\":%.17g",
                                gpu_fields[f].json, gpu_value(m, g, f));
        evbuffer_add_printf(out, "}");
        first = false;
    }
    evbuffer_add_printf(out, "]");
}

void srv_metrics_json(struct srv_metrics *m, struct evbuffer *out)
{
    evbuffer_add_printf(out, "{\"schema\":%d,\"kind\":\"server-status\",\"server\":\"",
                        SRV_STATUS_SCHEMA);
    put_escaped(out, m->name);
    evbuffer_add_printf(out, "\",");
    json_gpus(m, out);
    evbuffer_add_printf(out, ",\"tenants_configured\":%d,", (int)m->t->tenants_configured);
    json_tenants(m, out);
    evbuffer_add_printf(out, ",");
    json_sessions(m, out);
    evbuffer_add_printf(out, "}\n");
}

/* ---- HTTP -------------------------------------------------------------------------------- */

/* With metrics_token set, every request of the private listener but /healthz must carry it
 * ("Authorization: Bearer TOKEN"). */
static bool authorized(const struct http_ep *ep, struct evhttp_request *req)
{
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    uint8_t d[RG_SHA256_LEN];

    if (!ep->has_token)
        return true;
    if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0)
        return false;
    rg_sha256(auth + 7, strlen(auth + 7), d);
    return rg_secret_equal(d, ep->token_sha256, RG_SHA256_LEN);
}

/* Counting connections. evhttp has no hook for a connection's end in libevent 2.1, so each
 * connection's bufferevent is made here (evhttp_set_bevcb) with one more reference: once evhttp
 * has freed it (its callbacks are cleared), a sweep drops that reference, which closes the
 * socket. At the cap the listener stops accepting; a 250 ms timer sweeps and resumes it. */
static void accepting(struct http_ep *ep, bool on)
{
    if (on == !ep->paused)
        return;
    ep->paused = !on;
    if (on)
        evconnlistener_enable(ep->listener);
    else
        evconnlistener_disable(ep->listener);
}

static void sweep(struct http_ep *ep)
{
    for (int i = 0; i < ep->conns;) {
        bufferevent_data_cb r, w;
        bufferevent_event_cb e;
        void *arg;
        bufferevent_getcb(ep->bevs[i], &r, &w, &e, &arg);
        if (r != NULL || w != NULL || e != NULL) {
            i++;
            continue;
        }
        bufferevent_decref(ep->bevs[i]); /* evhttp let it go: ours was the last reference */
        ep->bevs[i] = ep->bevs[--ep->conns];
    }
}

static void pause_a_while(struct http_ep *ep, int us)
{
    struct timeval tv = {us / 1000000, us % 1000000};

    accepting(ep, false);
    evtimer_add(ep->resume, &tv);
}

static struct bufferevent *conn_new(struct event_base *base, void *arg)
{
    struct http_ep *ep = arg;
    struct bufferevent *bev;

    sweep(ep);
    if (ep->conns >= HTTP_MAX_CONNS) /* not reached: the listener pauses at the cap */
        return NULL;
    if ((bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)) == NULL)
        return NULL;
    bufferevent_incref(bev);
    ep->bevs[ep->conns++] = bev;
    if (ep->conns >= HTTP_MAX_CONNS)
        pause_a_while(ep, 250000);
    return bev;
}

/* accept failed (out of descriptors): pause 1 s instead of retrying at once, which would log
 * an error per try. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    rg_warn("metrics: accept failed: %m; not accepting for 1 s");
    pause_a_while(arg, 1000000);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http_ep *ep = arg;

    sweep(ep);
    if (ep->conns < HTTP_MAX_CONNS)
        accepting(ep, true);
    else
        pause_a_while(ep, 250000);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct http_ep *ep = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    struct evbuffer *out = evbuffer_new();
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    if (out == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    path = path != NULL ? path : "";
    if (strcmp(path, "/healthz") == 0) { /* alive: the supervisor's loop answers; nothing more */
        evbuffer_add_printf(out, "ok\n");
        evhttp_add_header(h, "Content-Type", "text/plain");
    } else if (!ep->public && !authorized(ep, req)) {
        evbuffer_free(out);
        evhttp_add_header(h, "WWW-Authenticate", "Bearer");
        evhttp_send_error(req, 401, "metrics_token required (Authorization: Bearer TOKEN)");
        return;
    } else if (strcmp(path, "/metrics") == 0) {
        srv_metrics_prometheus(ep->m, out);
        evhttp_add_header(h, "Content-Type", "text/plain; version=0.0.4");
    } else if (strcmp(path, "/status") == 0 && !ep->public) {
        srv_metrics_json(ep->m, out);
        evhttp_add_header(h, "Content-Type", "application/json");
    } else {
        evbuffer_free(out);
        evhttp_send_error(req, HTTP_NOTFOUND,
                          ep->public ? "try /metrics or /healthz (/status: on metrics_listen)"
                                     : "try /metrics, /status or /healthz");
        return;
    }
    evhttp_send_reply(req, HTTP_OK, "OK", out);
    evbuffer_free(out);
}

static void log_bound(const struct http_ep *ep, struct evhttp_bound_socket *bs)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[64] = "?";
    int port = 0;

    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &len) == 0 &&
        ss.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        evutil_inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        port = ntohs(sin->sin_port);
    }
    if (ep->public)
        rg_info("public metrics on http://%s:%d/metrics and /healthz (no token)", host, port);
    else
        rg_info("metrics on http://%s:%d/metrics, /status and /healthz", host, port);
}

static bool loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* Where and to whom (the private listener): a loopback address, or any address with a token. */
static rg_status_t check_exposure(struct http_ep *ep, const char *listen, const char *host,
                                  const char *token)
{
    if (token != NULL && token[0] != '\0') {
        ep->has_token = true;
        rg_sha256(token, strlen(token), ep->token_sha256);
        return RG_OK;
    }
    if (loopback(host))
        return RG_OK;
    rg_error("metrics_listen = %s is not a loopback address: set metrics_token too, or /status "
             "would show every tenant's sessions to anyone who can reach it (for Prometheus "
             "without a token: metrics_public_listen = ADDR:PORT serves /metrics and /healthz "
             "alone)",
             listen);
    return RG_ERR_INVALID;
}

static void ep_free(struct http_ep *ep)
{
    if (ep->http != NULL)
        evhttp_free(ep->http);
    sweep(ep);
    if (ep->resume != NULL)
        event_free(ep->resume);
    memset(ep, 0, sizeof(*ep));
}

/* One listener on listen ("ADDR:PORT"). */
static rg_status_t ep_start(struct srv_metrics *m, struct event_base *base, struct http_ep *ep,
                            const char *key, const char *listen, bool public, const char *token)
{
    struct evhttp_bound_socket *bs;
    char host[128], port[16], *end;
    unsigned long portnum;

    *ep = (struct http_ep){.m = m, .public = public};
    if (rg_split_hostport(listen, host, sizeof(host), port, sizeof(port), "9400") != RG_OK ||
        (portnum = strtoul(port, &end, 10), end == port || *end != '\0' || portnum > 65535)) {
        rg_error("%s = %s: expected ADDR:PORT (port 0 to 65535)", key, listen);
        return RG_ERR_INVALID;
    }
    if (!public && check_exposure(ep, listen, host, token) != RG_OK)
        return RG_ERR_INVALID;
    ep->http = evhttp_new(base);
    if (ep->http == NULL ||
        (bs = evhttp_bind_socket_with_handle(ep->http, host, (uint16_t)portnum)) == NULL) {
        rg_error("cannot serve %s on %s: %m", key, listen);
        ep_free(ep);
        return RG_ERR_IO;
    }
    evhttp_set_allowed_methods(ep->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(ep->http, on_request, ep);
    evhttp_set_timeout(ep->http, HTTP_TIMEOUT_S);
    evhttp_set_max_headers_size(ep->http, 8192);
    evhttp_set_max_body_size(ep->http, 0);
    evhttp_set_bevcb(ep->http, conn_new, ep);
    ep->listener = evhttp_bound_socket_get_listener(bs);
    evconnlistener_set_error_cb(ep->listener, on_accept_error);
    ep->resume = evtimer_new(base, on_resume, ep);
    log_bound(ep, bs);
    return RG_OK;
}

rg_status_t srv_metrics_start(struct event_base *base, const struct srv_metrics_conf *conf,
                              struct srv_table *table, const char *server_name,
                              struct srv_metrics **m_p)
{
    struct srv_metrics *m = calloc(1, sizeof(*m));
    struct timeval second = {1, 0};
    rg_status_t st = RG_OK;

    if (m == NULL)
        return RG_ERR_NOMEM;
    m->t = table;
    snprintf(m->name, sizeof(m->name), "%s", server_name);
    if (conf->listen != NULL && conf->listen[0] != '\0')
        st = ep_start(m, base, &m->eps[m->neps++], "metrics_listen", conf->listen, false,
                      conf->token);
    if (st == RG_OK && conf->public_listen != NULL && conf->public_listen[0] != '\0')
        st = ep_start(m, base, &m->eps[m->neps++], "metrics_public_listen", conf->public_listen,
                      true, NULL);
    if (st != RG_OK) {
        for (int e = 0; e < m->neps; e++)
            ep_free(&m->eps[e]);
        free(m);
        return st;
    }
    m->last_tick_ns = srv_now_ns();
    m->tick = event_new(base, -1, EV_PERSIST, on_tick, m);
    event_add(m->tick, &second);
    *m_p = m;
    return RG_OK;
}

void srv_metrics_stop(struct srv_metrics *m)
{
    if (m == NULL)
        return;
    event_free(m->tick);
    for (int e = 0; e < m->neps; e++)
        ep_free(&m->eps[e]);
    free(m);
}
