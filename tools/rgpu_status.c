/* rgpu status and rgpu top: the pool as its tenant may see it, one row per server and GPU
 * (nvidia-smi's and kubectl top's conventions: a header row, units in the cells, a table that
 * fits a terminal; --json for scripts). */
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

static void gpu_row(FILE *out, const struct cli_server *s, const Rgpu__ProbeGpu *g, bool first)
{
    char total[16], avail[16], rsv[16], used[16], sess[16], rtt[16], share[24];

    snprintf(sess, sizeof(sess), "%u/%u", g->tenant_sessions, g->sessions);
    snprintf(rtt, sizeof(rtt), "%.1fms", s->rtt_ms);
    snprintf(share, sizeof(share), "%.0f/%.0f%%", g->tenant_share * 100, g->tenant_share_due * 100);
    fprintf(
        out, "%-21.21s %3d  %-12.12s %7s %7s %7s %7s %8s %4.0f%% %9s %7s %s\n", first ? s->addr : "",
        g->index, g->name ? g->name : "", rgpu_bytes(g->total_mem, total, sizeof(total)),
        rgpu_bytes(g->available, avail, sizeof(avail)), rgpu_bytes(g->reserved, rsv, sizeof(rsv)),
        rgpu_bytes(g->used, used, sizeof(used)), sess, g->utilization * 100, share, first ? rtt : "",
        first ? (s->reply->admit ? "yes" : "no") : "");
}

static void table(FILE *out, const struct cli_conf *conf, const struct cli_pool *pool)
{
    int order[pool->n > 0 ? pool->n : 1], placed = cli_pool_order(pool, conf, order);
    int answered = 0;

    fprintf(out, "%-21s %3s  %-12s %7s %7s %7s %7s %8s %5s %9s %7s %s\n", "SERVER", "GPU", "NAME",
            "MEMORY", "FREE", "RESERVED", "USED", "SESSIONS", "UTIL", "SHARE", "RTT", "ADMIT");
    for (int i = 0; i < pool->n; i++) {
        const struct cli_server *s = &pool->servers[i];
        if (!s->answered) {
            fprintf(out, "%-21.21s   -  %s\n", s->addr[0] ? s->addr : s->name, s->why);
            continue;
        }
        answered++;
        for (size_t g = 0; g < s->reply->n_gpus; g++)
            gpu_row(out, s, s->reply->gpus[g], g == 0);
        if (s->reply->n_gpus == 0)
            fprintf(out, "%-21.21s   -  no GPU served\n", s->addr);
    }
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

static void json_gpu(FILE *out, const Rgpu__ProbeGpu *g, bool last)
{
    fprintf(out, "{\"index\":%d,\"name\":", g->index);
    rgpu_json_str(out, g->name);
    fprintf(out,
            ",\"memory_total\":%llu,\"memory_free\":%llu,\"memory_reserved\":%llu,"
            "\"memory_used\":%llu,\"sessions\":%u,\"tenant_sessions\":%u,"
            "\"utilization\":%.4f,\"tenant_share\":%.4f,\"tenant_share_due\":%.4f}%s",
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
            ",\"rtt_ms\":%.3f,\"tenant_sessions\":%u,\"max_sessions\":%u,\"quota\":%llu,"
            "\"admit\":%s,\"next_job\":%s,\"why_not\":",
            s->rtt_ms, s->reply->tenant_sessions, s->reply->max_sessions,
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

    fprintf(out, "{\"tenant\":");
    rgpu_json_str(out, conf->tenant);
    fprintf(out, ",\"policy\":\"%s\",\"servers\":[", sched_policy_name(conf->policy));
    for (int i = 0; i < pool->n; i++) {
        json_server(out, &pool->servers[i], placed > 0 && order[0] == i);
        fputs(i + 1 < pool->n ? "," : "", out);
    }
    fprintf(out, "]}\n");
}

static int any_answered(const struct cli_pool *pool)
{
    for (int i = 0; i < pool->n; i++)
        if (pool->servers[i].answered)
            return 1;
    return 0;
}

/* One look at the pool; the exit status (1 when no server answered). */
static int show(const struct rgpu_opts *opts, const struct cli_conf *conf, bool clear)
{
    struct cli_pool pool;
    time_t now = time(NULL);
    char when[32];
    int rc;

    rgpu_probe_pool(conf, &pool);
    if (opts->json) {
        json(stdout, conf, &pool);
    } else {
        if (clear)
            fputs("\033[H\033[2J", stdout);
        if (clear || opts->once) {
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
            printf("rgpu top - %s - every %.1fs, Ctrl-C to stop\n", when, opts->interval);
        }
        table(stdout, conf, &pool);
    }
    fflush(stdout);
    rc = any_answered(&pool) ? 0 : 1;
    cli_pool_free(&pool);
    return rc;
}

int rgpu_cmd_status(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    int rc = rgpu_parse_opts(argc, argv, &opts, &conf);

    return rc != 0 ? rc : show(&opts, &conf, false);
}

int rgpu_cmd_top(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    int rc = rgpu_parse_opts(argc, argv, &opts, &conf);

    if (rc != 0)
        return rc;
    if (opts.once)
        return show(&opts, &conf, false);
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    while (!interrupted) {
        rc = show(&opts, &conf, isatty(STDOUT_FILENO) && !opts.json);
        for (double t = 0; t < opts.interval && !interrupted; t += 0.1)
            usleep(100000);
    }
    return rc;
}
