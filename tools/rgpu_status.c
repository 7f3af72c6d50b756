/* rgpu status and rgpu top: the pool as its tenant may see it, one row per server and GPU
 * (kubectl's conventions: a header row, units in the cells, columns as wide as their cells,
 * -o wide for more, -o json for scripts, --no-headers; nvidia-smi's --query-gpu and
 * --format=csv for one line per GPU). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgpu.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* ---- the table --------------------------------------------------------------------------- */

enum col {
    C_SERVER,
    C_GPU,
    C_NAME,
    C_MEMORY,
    C_FREE,
    C_RESERVED,
    C_USED,
    C_SESSIONS,
    C_UTIL,
    C_SHARE,
    C_RTT,
    C_ADMIT,
    C_QUOTA,
    C_LIMIT,
    C_HOST,
    C_WHY,
    C_NCOLS
};

static const char *const heads[C_NCOLS] = {
    "SERVER", "GPU",   "NAME", "MEMORY", "FREE",  "RESERVED",        "USED",        "SESSIONS",
    "UTIL",   "SHARE", "RTT",  "ADMIT",  "QUOTA", "TENANT-SESSIONS", "SERVER-NAME", "WHY-NOT"};
static const bool right[C_NCOLS] = {false, true, false, true,  true, true, true,  true,
                                    true,  true, true,  false, true, true, false, false};

static void gpu_row(struct rgpu_table *t, const struct cli_server *s, const Rgpu__ProbeGpu *g)
{
    char gpu[16], total[16], avail[16], rsv[16], used[16], sess[32], util[16], share[32], rtt[16],
        quota[16], limit[32];
    const Rgpu__ProbeReply *r = s->reply;
    const char *cells[C_NCOLS] = {s->addr,
                                  gpu,
                                  g->name ? g->name : "",
                                  rgpu_bytes(g->total_mem, total, sizeof(total)),
                                  rgpu_bytes(g->available, avail, sizeof(avail)),
                                  rgpu_bytes(g->reserved, rsv, sizeof(rsv)),
                                  rgpu_bytes(g->used, used, sizeof(used)),
                                  sess,
                                  util,
                                  share,
                                  rtt,
                                  r->admit ? "yes" : "no",
                                  quota,
                                  limit,
                                  r->server_name ? r->server_name : "",
                                  r->admit ? "" : (r->why_not ? r->why_not : "")};

    snprintf(gpu, sizeof(gpu), "%d", g->index);
    snprintf(sess, sizeof(sess), "%u/%u", g->tenant_sessions, g->sessions);
    snprintf(util, sizeof(util), "%.0f%%", g->utilization * 100);
    /* the tenant's share of the GPU's time now / the share the gate gives it (docs/tenants.md) */
    snprintf(share, sizeof(share), "%.0f/%.0f%%", g->tenant_share * 100, g->tenant_share_due * 100);
    snprintf(rtt, sizeof(rtt), "%.1fms", s->rtt_ms);
    if (r->quota != 0)
        rgpu_bytes(r->quota, quota, sizeof(quota));
    else
        snprintf(quota, sizeof(quota), r->admit ? "whole" : "-");
    if (r->max_sessions != 0)
        snprintf(limit, sizeof(limit), "%u/%u", r->tenant_sessions, r->max_sessions);
    else
        snprintf(limit, sizeof(limit), "%u", r->tenant_sessions);
    rgpu_table_row(t, cells, NULL);
}

static void table(FILE *out, const struct rgpu_opts *opts, const struct cli_conf *conf,
                  const struct cli_pool *pool)
{
    int order[pool->n > 0 ? pool->n : 1], placed = cli_pool_order(pool, conf, order);
    int answered = 0;
    struct rgpu_table t;

    rgpu_table_init(&t, opts->output == RGPU_OUT_WIDE ? C_NCOLS : C_ADMIT + 1, heads, right);
    for (int i = 0; i < pool->n; i++) {
        const struct cli_server *s = &pool->servers[i];
        const char *first = s->addr[0] ? s->addr : s->name;
        if (!s->answered) {
            rgpu_table_row(&t, &first, s->why);
            continue;
        }
        answered++;
        for (size_t g = 0; g < s->reply->n_gpus; g++)
            gpu_row(&t, s, s->reply->gpus[g]);
        if (s->reply->n_gpus == 0)
            rgpu_table_row(&t, &first, "no GPU served");
    }
    rgpu_table_print(&t, out, !opts->no_headers);
    rgpu_table_free(&t);
    if (opts->no_headers)
        return;
    fprintf(out,
            "%d of %d server(s) answered. Tenant %s: RESERVED, USED, the first SESSIONS "
            "figure and SHARE (of the GPU now / due from the compute gate) are yours.\n",
            answered, pool->n, conf->tenant[0] ? conf->tenant : "(none)");
    if (placed > 0)
        fprintf(out, "The next job goes to %s (policy %s).\n", pool->servers[order[0]].addr,
                sched_policy_name(conf->policy));
    else
        fprintf(out, "No server would take a job now.\n");
}

/* ---- --query-gpu (nvidia-smi's names and units) ------------------------------------------- */

enum qfield {
    Q_SERVER,
    Q_SERVER_NAME,
    Q_INDEX,
    Q_NAME,
    Q_MEM_TOTAL,
    Q_MEM_FREE,
    Q_MEM_USED,
    Q_MEM_RESERVED,
    Q_UTIL,
    Q_SESSIONS,
    Q_SESSIONS_TENANT,
    Q_ADMIT,
    Q_RTT,
    Q_COUNT
};

static const struct {
    const char *name, *unit;
} qfields[Q_COUNT] = {
    [Q_SERVER] = {"server", NULL},
    [Q_SERVER_NAME] = {"server.name", NULL},
    [Q_INDEX] = {"index", NULL},
    [Q_NAME] = {"name", NULL},
    [Q_MEM_TOTAL] = {"memory.total", "MiB"},
    [Q_MEM_FREE] = {"memory.free", "MiB"},
    [Q_MEM_USED] = {"memory.used", "MiB"},
    [Q_MEM_RESERVED] = {"memory.reserved", "MiB"},
    [Q_UTIL] = {"utilization.gpu", "%"},
    [Q_SESSIONS] = {"sessions", NULL},
    [Q_SESSIONS_TENANT] = {"sessions.tenant", NULL},
    [Q_ADMIT] = {"admit", NULL},
    [Q_RTT] = {"rtt", "us"},
};

/* The fields asked for, in order; their count, or -1 (reported) on an unknown one. */
static int query_fields(const char *query, enum qfield *out, int cap)
{
    char buf[512], *tok, *save = NULL;
    int n = 0;

    snprintf(buf, sizeof(buf), "%s", query);
    for (tok = strtok_r(buf, ",", &save); tok && n < cap; tok = strtok_r(NULL, ",", &save)) {
        int f;
        while (*tok == ' ')
            tok++;
        for (f = 0; f < Q_COUNT && strcmp(qfields[f].name, tok) != 0; f++)
            ;
        if (f == Q_COUNT) {
            fprintf(stderr, "rgpu: field \"%s\" is not a valid field to query (valid: ", tok);
            for (int k = 0; k < Q_COUNT; k++)
                fprintf(stderr, "%s%s", k ? ", " : "", qfields[k].name);
            fprintf(stderr, ")\n");
            return -1;
        }
        out[n++] = (enum qfield)f;
    }
    return n;
}

static void csv_value(FILE *out, const struct rgpu_opts *opts, const struct cli_server *s,
                      const Rgpu__ProbeGpu *g, enum qfield f)
{
    const Rgpu__ProbeReply *r = s->reply;
    const char *unit = opts->csv_nounits ? NULL : qfields[f].unit;
    unsigned long long mib = 0;

    switch (f) {
    case Q_SERVER:
        fputs(s->addr, out);
        return;
    case Q_SERVER_NAME:
        fputs(r->server_name ? r->server_name : "", out);
        return;
    case Q_INDEX:
        fprintf(out, "%d", g->index);
        return;
    case Q_NAME:
        fputs(g->name ? g->name : "", out);
        return;
    case Q_MEM_TOTAL:
        mib = g->total_mem >> 20;
        break;
    case Q_MEM_FREE:
        mib = g->available >> 20;
        break;
    case Q_MEM_USED:
        mib = g->used >> 20;
        break;
    case Q_MEM_RESERVED:
        mib = g->reserved >> 20;
        break;
    case Q_UTIL:
        fprintf(out, "%.0f", g->utilization * 100);
        break;
    case Q_SESSIONS:
        fprintf(out, "%u", g->sessions);
        return;
    case Q_SESSIONS_TENANT:
        fprintf(out, "%u", g->tenant_sessions);
        return;
    case Q_ADMIT:
        fputs(r->admit ? "yes" : "no", out);
        return;
    case Q_RTT:
        fprintf(out, "%.0f", s->rtt_ms * 1000);
        break;
    case Q_COUNT:
        return;
    }
    if (f >= Q_MEM_TOTAL && f <= Q_MEM_RESERVED)
        fprintf(out, "%llu", mib);
    if (unit)
        fprintf(out, " %s", unit);
}

static int csv(FILE *out, const struct rgpu_opts *opts, const struct cli_pool *pool)
{
    enum qfield f[64];
    int n = query_fields(opts->query, f, 64);

    if (n < 0)
        return 2;
    for (int k = 0; k < n && !opts->csv_noheader; k++)
        fprintf(out, qfields[f[k]].unit ? "%s%s [%s]" : "%s%s", k ? ", " : "", qfields[f[k]].name,
                qfields[f[k]].unit);
    if (!opts->csv_noheader)
        fputc('\n', out);
    for (int i = 0; i < pool->n; i++) {
        const struct cli_server *s = &pool->servers[i];
        if (!s->answered) {
            fprintf(stderr, "rgpu: %s: %s\n", s->addr[0] ? s->addr : s->name, s->why);
            continue;
        }
        for (size_t g = 0; g < s->reply->n_gpus; g++) {
            for (int k = 0; k < n; k++) {
                fputs(k ? ", " : "", out);
                csv_value(out, opts, s, s->reply->gpus[g], f[k]);
            }
            fputc('\n', out);
        }
    }
    return 0;
}

/* ---- JSON (docs/status-schema.md) --------------------------------------------------------- */

static void json_gpu(FILE *out, const Rgpu__ProbeGpu *g, bool last)
{
    fprintf(out, "{\"index\":%d,\"name\":", g->index);
    rgpu_json_str(out, g->name);
    fprintf(out,
            ",\"memory_total_bytes\":%llu,\"memory_free_bytes\":%llu,"
            "\"memory_reserved_bytes\":%llu,\"memory_used_bytes\":%llu,\"sessions\":%u,"
            "\"tenant_sessions\":%u,\"utilization\":%.4f,\"tenant_gpu_share\":%.4f,"
            "\"tenant_gpu_share_due\":%.4f}%s",
            (unsigned long long)g->total_mem, (unsigned long long)g->available,
            (unsigned long long)g->reserved, (unsigned long long)g->used, g->sessions,
            g->tenant_sessions, g->utilization, g->tenant_share, g->tenant_share_due,
            last ? "" : ",");
}

static void json_server(FILE *out, const struct cli_server *s, bool placed_first)
{
    fprintf(out, "{\"entry\":");
    rgpu_json_str(out, s->name);
    fprintf(out, ",\"address\":");
    rgpu_json_str(out, s->addr);
    fprintf(out, ",\"answered\":%s", s->answered ? "true" : "false");
    if (!s->answered) {
        fprintf(out, ",\"error\":");
        rgpu_json_str(out, s->why);
        fputc('}', out);
        return;
    }
    fprintf(out, ",\"server_name\":");
    rgpu_json_str(out, s->reply->server_name);
    fprintf(out,
            ",\"probe_rtt_us\":%.0f,\"tenant_sessions\":%u,\"max_sessions\":%u,"
            "\"memory_quota_bytes\":%llu,\"admit\":%s,\"next_job\":%s,\"why_not\":",
            s->rtt_ms * 1000, s->reply->tenant_sessions, s->reply->max_sessions,
            (unsigned long long)s->reply->quota, s->reply->admit ? "true" : "false",
            placed_first ? "true" : "false");
    rgpu_json_str(out, s->reply->admit ? "" : s->reply->why_not);
    fprintf(out, ",\"gpus\":[");
    for (size_t g = 0; g < s->reply->n_gpus; g++)
        json_gpu(out, s->reply->gpus[g], g + 1 == s->reply->n_gpus);
    fprintf(out, "]}");
}

static void json(FILE *out, const struct cli_conf *conf, const struct cli_pool *pool)
{
    int order[pool->n > 0 ? pool->n : 1], placed = cli_pool_order(pool, conf, order);

    rgpu_json_begin(out, "status");
    fprintf(out, ",\"tenant\":");
    rgpu_json_str(out, conf->tenant);
    fprintf(out,
            ",\"policy\":\"%s\",\"request\":{\"gpus\":%d,\"memory_bytes\":%llu,"
            "\"mem_share\":%g},\"servers\":[",
            sched_policy_name(conf->policy), conf->gpus, (unsigned long long)conf->mem_quota,
            conf->mem_share);
    for (int i = 0; i < pool->n; i++) {
        json_server(out, &pool->servers[i], placed > 0 && order[0] == i);
        fputs(i + 1 < pool->n ? "," : "", out);
    }
    fprintf(out, "]}\n");
}

/* ---- status, top ------------------------------------------------------------------------- */

static int any_answered(const struct cli_pool *pool)
{
    for (int i = 0; i < pool->n; i++)
        if (pool->servers[i].answered)
            return 1;
    return 0;
}

/* One look at the pool; the exit status (1 when no server answered). top: its header line
 * (and clear: the screen first). */
static int show(const struct rgpu_opts *opts, const struct cli_conf *conf, bool top, bool clear)
{
    struct cli_pool pool;
    time_t now = time(NULL);
    char when[32];
    int rc;

    rgpu_probe_pool(conf, &pool);
    rc = any_answered(&pool) ? 0 : 1;
    if (opts->output == RGPU_OUT_JSON) {
        json(stdout, conf, &pool);
    } else if (opts->output == RGPU_OUT_CSV) {
        rc = csv(stdout, opts, &pool) != 0 ? 2 : rc;
    } else {
        if (clear)
            fputs("\033[H\033[2J", stdout);
        if (top && !opts->no_headers) {
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
            printf("rgpu top - %s - every %.1fs, Ctrl-C to stop\n", when, opts->interval);
        }
        table(stdout, opts, conf, &pool);
    }
    fflush(stdout);
    cli_pool_free(&pool);
    return rc;
}

/* --query-gpu's fields checked before any probe. */
static bool query_ok(const struct rgpu_opts *opts)
{
    enum qfield f[64];

    return opts->output != RGPU_OUT_CSV || query_fields(opts->query, f, 64) >= 0;
}

int rgpu_cmd_status(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    int first, rc = rgpu_parse_opts(RGPU_STATUS, argc, argv, &opts, &conf, &first);

    if (rc >= 0)
        return rc;
    return query_ok(&opts) ? show(&opts, &conf, false, false) : 2;
}

int rgpu_cmd_top(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    int first, rc = rgpu_parse_opts(RGPU_TOP, argc, argv, &opts, &conf, &first);
    struct timespec pause;

    if (rc >= 0)
        return rc;
    if (!query_ok(&opts))
        return 2;
    if (opts.once)
        return show(&opts, &conf, true, false);
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    /* the interval is at least RGPU_INTERVAL_MIN (checked): one probe of the pool per period */
    pause.tv_sec = (time_t)opts.interval;
    pause.tv_nsec = (long)((opts.interval - (double)pause.tv_sec) * 1e9);
    while (!interrupted) {
        struct timespec left = pause;
        rc = show(&opts, &conf, true,
                  isatty(STDOUT_FILENO) && opts.output != RGPU_OUT_JSON &&
                      opts.output != RGPU_OUT_CSV);
        while (!interrupted && nanosleep(&left, &left) != 0)
            ;
    }
    return rc == 2 ? 2 : rc;
}
