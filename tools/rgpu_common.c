/* What the rgpu commands share: one option table, strict numbers, the library directory,
 * the table printer, formatting. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "proto/frame.h"
#include "rgpu.h"

#ifndef RGPU_VERSION
#define RGPU_VERSION "unknown"
#endif

/* ---- options ----------------------------------------------------------------------------- */

enum {
    O_CONFIG = 256,
    O_POOL,
    O_TENANT,
    O_TOKEN_FILE,
    O_POLICY,
    O_JSON,
    O_NO_HEADERS,
    O_QUERY,
    O_FORMAT,
    O_ONCE,
    O_BANDWIDTH,
    O_VERSION
};

#define ALL  (RGPU_RUN | RGPU_STATUS | RGPU_TOP | RGPU_PING)
#define POOL (RGPU_STATUS | RGPU_TOP | RGPU_PING)

/* Every option of every command, once: its name, value, short form (Bitfusion's -n and -p,
 * kubectl's -o and -s, ping's -c, top's -d), the commands that take it, and its help. */
static const struct opt_def {
    const char *name;
    int has_arg;
    int val; /* the short option letter, or a code from 256 */
    unsigned cmds;
    const char *arg;
    const char *help;
} defs[] = {
    {"server", 1, 's', ALL, "HOST:PORT[,...]",
     "the servers of the job, over the configuration's pool (RGPU_SERVER)"},
    {"pool", 1, O_POOL, ALL, "LIST", "a pool: the placement policy picks the server (RGPU_POOL)"},
    {"config", 1, O_CONFIG, ALL, "FILE", "the client configuration (RGPU_CONFIG)"},
    {"tenant", 1, O_TENANT, ALL, "NAME", "the tenant (RGPU_TENANT)"},
    {"token-file", 1, O_TOKEN_FILE, ALL, "PATH",
     "its token, a file only you can read "
     "(RGPU_TOKEN_FILE)"},
    {"policy", 1, O_POLICY, ALL, "spread|pack|first", "placement over a pool (RGPU_POLICY)"},
    {"gpus", 1, 'n', ALL, "N", "GPUs the job asks for, 1 to 64 (RGPU_GPUS)"},
    {"memory", 1, 'm', ALL, "SIZE",
     "memory the job reserves on each GPU, e.g. 4GiB "
     "(RGPU_MEM_QUOTA); refused above the tenant's quota"},
    {"share", 1, 'p', ALL, "P",
     "or that share of each GPU's memory, 0.5 or 50% "
     "(RGPU_MEM_SHARE); refused above the tenant's quota"},
    {"output", 1, 'o', POOL, "json|wide",
     "JSON for scripts (docs/status-schema.md), or the "
     "table with more columns"},
    {"json", 0, O_JSON, POOL, NULL, "the same as -o json"},
    {"no-headers", 0, O_NO_HEADERS, POOL, NULL, "the table without its header and notes"},
    {"query-gpu", 1, O_QUERY, RGPU_STATUS | RGPU_TOP, "FIELD,...",
     "nvidia-smi style, one line per GPU: server, server.name, index, name, memory.total, "
     "memory.free, memory.used, memory.reserved, utilization.gpu, sessions, sessions.tenant, "
     "admit, rtt"},
    {"format", 1, O_FORMAT, RGPU_STATUS | RGPU_TOP, "csv[,noheader][,nounits]",
     "the format of --query-gpu (csv, the default)"},
    {"once", 0, O_ONCE, RGPU_STATUS | RGPU_TOP, NULL,
     "top: one screen, then exit (status always shows one)"},
    {"interval", 1, 'd', RGPU_TOP, "SECONDS", "between refreshes, 0.1 to 86400 (default 2)"},
    {"count", 1, 'c', RGPU_PING, "N", "round trips per server, 1 to 100000 (default 10)"},
    {"bandwidth", 0, O_BANDWIDTH, RGPU_PING, NULL,
     "also copies through a session (4 x 64 MiB each way) and the raw TCP ceiling "
     "(128 MiB per stream): heavy, so not by default"},
    {"help", 0, 'h', ALL, NULL, "this help"},
    {"version", 0, O_VERSION, ALL, NULL, "rgpu's version and protocol"},
};
#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const struct {
    enum rgpu_cmd cmd;
    const char *name, *synopsis, *what;
} cmds[] = {
    {RGPU_RUN, "run", "[OPTIONS] [--] CMD [ARGS...]",
     "Runs CMD with rgpu's libcuda.so.1 (and NVML and NCCL shims) first in its library path, so\n"
     "  every CUDA call goes to a gpu-server: --server, --pool, RGPU_SERVER, or the client config\n"
     "  (RGPU_CONFIG, ~/.config/rgpu/client.conf, /etc/rgpu/client.conf). RGPU_NCCL=0: no NCCL\n"
     "  shim. Bitfusion's habit: rgpu run -n 2 -p 0.5 -- python train.py"},
    {RGPU_STATUS, "status", "[OPTIONS]",
     "The pool as your tenant sees it, per server and GPU: memory, your sessions, utilization,\n"
     "  the probe's round trip, and whether a job asking what you ask (--gpus, --memory,\n"
     "  --share) would be admitted now. Exit 1 when no server answers."},
    {RGPU_TOP, "top", "[OPTIONS]", "The same as status, refreshed until interrupted."},
    {RGPU_PING, "ping", "[OPTIONS]",
     "Round-trip percentiles of small echoes per server (light); with --bandwidth also the copy\n"
     "  bandwidth of a session and the raw TCP ceiling (heavy)."},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

void rgpu_version(FILE *out)
{
    fprintf(out, "rgpu %s (protocol %u.%u, JSON schema %d)\n", RGPU_VERSION, PROTO_VERSION,
            PROTO_VERSION_MINOR, RGPU_SCHEMA);
}

/* Each option of cmd: its forms in a column, its help wrapped beside it. */
static void usage_options(FILE *out, unsigned cmd)
{
    enum { LEFT = 34, WIDTH = 98 };

    for (size_t i = 0; i < NDEFS; i++) {
        char left[80];
        const char *h = defs[i].help;
        int col;
        if (!(defs[i].cmds & cmd))
            continue;
        snprintf(left, sizeof(left), "%s--%s%s%s", defs[i].val < 256 ? "" : "    ", defs[i].name,
                 defs[i].arg ? " " : "", defs[i].arg ? defs[i].arg : "");
        if (defs[i].val < 256)
            fprintf(out, "  -%c, %s", defs[i].val, left);
        else
            fprintf(out, "  %s", left);
        col = 2 + (int)strlen(left) + (defs[i].val < 256 ? 4 : 0);
        while (*h) {
            int room = WIDTH - LEFT, n = (int)strlen(h);
            if (n > room) /* break at the last blank that fits */
                for (n = room; n > 0 && h[n] != ' '; n--)
                    ;
            if (n <= 0)
                n = (int)strlen(h);
            if (col >= LEFT) {
                fputc('\n', out);
                col = 0;
            }
            fprintf(out, "%*s%.*s", LEFT - col, "", n, h);
            col = LEFT + n;
            h += n;
            while (*h == ' ')
                h++;
        }
        fputc('\n', out);
    }
}

void rgpu_usage(FILE *out, unsigned cmd)
{
    if (cmd == 0) {
        fprintf(out, "usage: rgpu COMMAND [OPTIONS]   (rgpu COMMAND --help for its options)\n");
        for (size_t c = 0; c < NCMDS; c++)
            fprintf(out, "  rgpu %-7s %s\n", cmds[c].name, cmds[c].synopsis);
        fprintf(out, "  rgpu --version\nOptions take --opt VALUE or --opt=VALUE.\n");
        return;
    }
    for (size_t c = 0; c < NCMDS; c++) {
        if (cmds[c].cmd != cmd)
            continue;
        fprintf(out, "usage: rgpu %s %s\n  %s\noptions:\n", cmds[c].name, cmds[c].synopsis,
                cmds[c].what);
        usage_options(out, cmd);
    }
}

static const char *cmd_name(enum rgpu_cmd cmd)
{
    for (size_t c = 0; c < NCMDS; c++)
        if (cmds[c].cmd == cmd)
            return cmds[c].name;
    return "?";
}

/* A whole number in [min, max]: no trailing text, no blanks, no overflow. */
static bool parse_long(const char *text, long min, long max, long *v_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || text[0] == ' ' || errno != 0 || v < min || v > max)
        return false;
    *v_p = v;
    return true;
}

/* Seconds in [min, max]: finite, no trailing text. */
static bool parse_seconds(const char *text, double min, double max, double *v_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || text[0] == ' ' || !isfinite(v) || v < min || v > max)
        return false;
    *v_p = v;
    return true;
}

static bool parse_format(const char *text, struct rgpu_opts *opts)
{
    char buf[128], *tok, *save = NULL;
    bool csv = false;

    snprintf(buf, sizeof(buf), "%s", text);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (strcmp(tok, "csv") == 0)
            csv = true;
        else if (strcmp(tok, "noheader") == 0)
            opts->csv_noheader = true;
        else if (strcmp(tok, "nounits") == 0)
            opts->csv_nounits = true;
        else
            return false;
    }
    return csv;
}

/* One option's value: checked, then stored or put into the environment. 0, or 2 when bad (the
 * message printed). */
static int take(enum rgpu_cmd cmd, const struct opt_def *d, const char *v, struct rgpu_opts *o)
{
    const char *form = NULL;
    uint64_t bytes;
    double share;
    long n;
    enum sched_policy policy;

    switch (d->val) {
    case 's':
        setenv("RGPU_SERVER", v, 1);
        break;
    case O_POOL:
        setenv("RGPU_POOL", v, 1);
        unsetenv("RGPU_SERVER"); /* RGPU_SERVER would win over the pool */
        break;
    case O_CONFIG:
        setenv("RGPU_CONFIG", v, 1);
        break;
    case O_TENANT:
        setenv("RGPU_TENANT", v, 1);
        break;
    case O_TOKEN_FILE:
        setenv("RGPU_TOKEN_FILE", v, 1);
        break;
    case O_POLICY:
        if (!sched_policy_parse(v, &policy))
            form = "spread, pack or first";
        else
            setenv("RGPU_POLICY", v, 1);
        break;
    case 'n':
        if (!parse_long(v, 1, CLI_GPUS_MAX, &n))
            form = "a whole number from 1 to 64";
        else
            setenv("RGPU_GPUS", v, 1);
        break;
    case 'm':
        if (!rg_parse_size(v, &bytes) || bytes == 0)
            form = "a size such as 4GiB or 512MiB";
        else {
            setenv("RGPU_MEM_QUOTA", v, 1);
            unsetenv("RGPU_MEM_SHARE");
        }
        break;
    case 'p':
        if (!cli_parse_share(v, &share))
            form = "a share above 0 and at most 1, such as 0.5 or 50%";
        else {
            setenv("RGPU_MEM_SHARE", v, 1);
            unsetenv("RGPU_MEM_QUOTA");
        }
        break;
    case 'o':
        if (strcmp(v, "json") == 0)
            o->output = RGPU_OUT_JSON;
        else if (strcmp(v, "wide") == 0)
            o->output = RGPU_OUT_WIDE;
        else
            form = "json or wide";
        break;
    case O_JSON:
        o->output = RGPU_OUT_JSON;
        break;
    case O_NO_HEADERS:
        o->no_headers = true;
        break;
    case O_QUERY:
        if (v[0] == '\0' || strlen(v) >= sizeof(o->query))
            form = "fields separated by commas (rgpu status --help lists them)";
        else
            snprintf(o->query, sizeof(o->query), "%s", v);
        break;
    case O_FORMAT:
        if (!parse_format(v, o))
            form = "csv, with noheader and nounits if wanted: csv,noheader,nounits";
        break;
    case O_ONCE:
        o->once = true;
        break;
    case 'd':
        if (!parse_seconds(v, RGPU_INTERVAL_MIN, RGPU_INTERVAL_MAX, &o->interval))
            form = "seconds from 0.1 to 86400";
        break;
    case 'c':
        if (!parse_long(v, 1, RGPU_COUNT_MAX, &o->count))
            form = "a whole number from 1 to 100000";
        break;
    case O_BANDWIDTH:
        o->bandwidth = true;
        break;
    }
    if (form == NULL)
        return 0;
    fprintf(stderr, "rgpu %s: --%s %s: not valid (expected %s)\n", cmd_name(cmd), d->name, v, form);
    return 2;
}

int rgpu_parse_opts(enum rgpu_cmd cmd, int argc, char **argv, struct rgpu_opts *opts,
                    struct cli_conf *conf, int *first_p)
{
    struct option longs[NDEFS + 1];
    char shorts[2 * NDEFS + 3] = "+:", why[512];
    bool memory = false, share = false, format = false;
    int n = 0, c, idx, rc;

    *opts = (struct rgpu_opts){.interval = 2, .count = 10};
    for (size_t i = 0; i < NDEFS; i++) {
        if (!(defs[i].cmds & cmd))
            continue;
        longs[n++] = (struct option){defs[i].name, defs[i].has_arg, NULL, defs[i].val};
        if (defs[i].val < 256) {
            size_t len = strlen(shorts);
            shorts[len] = (char)defs[i].val;
            shorts[len + 1] = defs[i].has_arg ? ':' : '\0';
            shorts[len + 2] = '\0';
        }
    }
    longs[n] = (struct option){0, 0, 0, 0};
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shorts, longs, &idx)) != -1) {
        const struct opt_def *d = NULL;
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            if (c == '?' && optopt != 0 && bad[0] == '-' && bad[1] != '-')
                fprintf(stderr, "rgpu %s: unknown option -%c", cmd_name(cmd), optopt);
            else
                fprintf(stderr,
                        c == ':' ? "rgpu %s: %s needs a value"
                                 : "rgpu %s: unknown "
                                   "option %s",
                        cmd_name(cmd), bad);
            fprintf(stderr, " (rgpu %s --help lists the options)\n", cmd_name(cmd));
            return 2;
        }
        for (size_t i = 0; i < NDEFS && d == NULL; i++)
            if (defs[i].val == c)
                d = &defs[i];
        if (c == 'h') {
            rgpu_usage(stdout, cmd);
            return 0;
        }
        if (c == O_VERSION) {
            rgpu_version(stdout);
            return 0;
        }
        memory |= c == 'm';
        share |= c == 'p';
        format |= c == O_FORMAT;
        if ((rc = take(cmd, d, optarg, opts)) != 0)
            return rc;
    }
    if (memory && share) {
        fprintf(stderr, "rgpu %s: --memory and --share ask for the same thing: give one\n",
                cmd_name(cmd));
        return 2;
    }
    if (format && opts->query[0] == '\0') {
        fprintf(stderr, "rgpu %s: --format goes with --query-gpu\n", cmd_name(cmd));
        return 2;
    }
    if (opts->query[0] != '\0') {
        if (opts->output != RGPU_OUT_TABLE) {
            fprintf(stderr, "rgpu %s: --query-gpu prints CSV: not with -o\n", cmd_name(cmd));
            return 2;
        }
        opts->output = RGPU_OUT_CSV;
    }
    if (cmd != RGPU_RUN && optind < argc) {
        fprintf(stderr, "rgpu %s: unexpected argument '%s' (rgpu %s --help)\n", cmd_name(cmd),
                argv[optind], cmd_name(cmd));
        return 2;
    }
    if (cmd == RGPU_RUN && optind >= argc) {
        fprintf(stderr, "rgpu run: no command to run (rgpu run [OPTIONS] [--] CMD [ARGS...])\n");
        return 2;
    }
    *first_p = optind;
    if (conf != NULL && cli_conf_load(conf, why, sizeof(why)) != RG_OK) {
        fprintf(stderr, "rgpu %s: client configuration: %s\n", cmd_name(cmd), why);
        return 2;
    }
    return -1;
}

/* ---- the library directory, the pool -------------------------------------------------------- */

int rgpu_find_libdir(char *buf, size_t len)
{
    char exe[PATH_MAX], *dir;
    ssize_t n;
    const char *env = getenv("RGPU_LIBDIR");

    if (env != NULL && env[0] != '\0')
        return snprintf(buf, len, "%s", env) < (int)len ? 0 : -1;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0)
        return -1;
    exe[n] = '\0';
    dir = dirname(exe);
    if (snprintf(buf, len, "%s/../lib/rgpu/libcuda.so.1", dir) < (int)len && access(buf, R_OK) == 0)
        return snprintf(buf, len, "%s/../lib/rgpu", dir) < (int)len ? 0 : -1;
    return snprintf(buf, len, "%s/../lib", dir) < (int)len ? 0 : -1;
}

void rgpu_probe_pool(const struct cli_conf *conf, struct cli_pool *pool)
{
    if (cli_pool_resolve(conf, pool) == RG_OK)
        cli_pool_probe(pool, conf, conf->probe_timeout_ms);
}

/* ---- formatting ------------------------------------------------------------------------------ */

const char *rgpu_bytes(unsigned long long bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 || v >= 100 ? "%.0f%s" : v < 10 ? "%.2f%s" : "%.1f%s", v, units[u]);
    return buf;
}

void rgpu_json_str(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void rgpu_json_begin(FILE *out, const char *kind)
{
    fprintf(out, "{\"schema\":%d,\"kind\":\"%s\"", RGPU_SCHEMA, kind);
}

/* ---- tables ---------------------------------------------------------------------------------- */

void rgpu_table_init(struct rgpu_table *t, int ncols, const char *const *head, const bool *right)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols < RGPU_TABLE_COLS ? ncols : RGPU_TABLE_COLS;
    for (int c = 0; c < t->ncols; c++) {
        t->head[c] = head[c];
        t->right[c] = right[c];
    }
}

static char *dup_or_die(const char *s)
{
    char *d = strdup(s ? s : "");

    if (d == NULL) {
        fprintf(stderr, "rgpu: out of memory\n");
        exit(1);
    }
    return d;
}

void rgpu_table_row(struct rgpu_table *t, const char *const *cells, const char *note)
{
    char *(*rows)[RGPU_TABLE_COLS + 1] = realloc(t->rows, (size_t)(t->nrows + 1) * sizeof(*rows));

    if (rows == NULL) {
        fprintf(stderr, "rgpu: out of memory\n");
        exit(1);
    }
    t->rows = rows;
    memset(rows[t->nrows], 0, sizeof(rows[0]));
    for (int c = 0; c < (note ? 1 : t->ncols); c++)
        rows[t->nrows][c] = dup_or_die(cells[c]);
    rows[t->nrows][RGPU_TABLE_COLS] = note ? dup_or_die(note) : NULL;
    t->nrows++;
}

void rgpu_table_print(const struct rgpu_table *t, FILE *out, bool headers)
{
    size_t width[RGPU_TABLE_COLS] = {0}, len;
    char *line = NULL;

    for (int c = 0; c < t->ncols; c++) {
        width[c] = headers ? strlen(t->head[c]) : 0;
        for (int r = 0; r < t->nrows; r++)
            if (t->rows[r][c] != NULL && (t->rows[r][RGPU_TABLE_COLS] == NULL || c == 0) &&
                strlen(t->rows[r][c]) > width[c])
                width[c] = strlen(t->rows[r][c]);
    }
    for (int r = -1; r < t->nrows; r++) {
        const char *note = r >= 0 ? t->rows[r][RGPU_TABLE_COLS] : NULL;
        FILE *buf;
        if (r < 0 && !headers)
            continue;
        if ((buf = open_memstream(&line, &len)) == NULL)
            return;
        for (int c = 0; c < (note ? 1 : t->ncols); c++)
            fprintf(buf, t->right[c] ? "%s%*s" : "%s%-*s", c > 0 ? "  " : "", (int)width[c],
                    r < 0 ? t->head[c] : t->rows[r][c]);
        if (note)
            fprintf(buf, "  %s", note);
        fclose(buf);
        while (len > 0 && line[len - 1] == ' ') /* no blanks at the end of a line */
            line[--len] = '\0';
        fprintf(out, "%s\n", line);
        free(line);
        line = NULL;
    }
}

void rgpu_table_free(struct rgpu_table *t)
{
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c <= RGPU_TABLE_COLS; c++)
            free(t->rows[r][c]);
    free(t->rows);
    t->rows = NULL;
    t->nrows = 0;
}
