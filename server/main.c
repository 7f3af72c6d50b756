/* gpu-server: serve this host's GPUs to rgpu clients.
 *   gpu-server [--config FILE] [--listen ADDR] [--port N] [--devices 0,2] [--driver PATH]
 *              [--log-level LEVEL] [--name NAME] [--busy-poll-us N] [--transport T]
 *              [--metrics-listen ADDR:PORT]
 *   gpu-server --check-config [--client] FILE...
 *   gpu-server --hash-token TOKEN
 * The config file has a [server] section with the same keys (listen, port, ...; the table is
 * server/config.c) and [tenant NAME] sections; flags override it and are checked the same way. */
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/session/config.h"
#include "common/config.h"
#include "common/log.h"
#include "server/server.h"
#include "server/session.h"
#include "server/session_table.h"
#include "proto/frame.h"

#ifndef RGPU_VERSION
#define RGPU_VERSION "unknown"
#endif

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpu-server [--config FILE] [--listen ADDR] [--port N] [--devices LIST]\n"
            "                  [--driver PATH] [--log-level error|warn|info|debug] [--name NAME]\n"
            "                  [--busy-poll-us N] [--transport auto|rdma|tcp]\n"
            "                  [--metrics-listen ADDR:PORT]\n"
            "       gpu-server --check-config [--client] FILE...\n"
            "       gpu-server --hash-token TOKEN\n"
            "  Serves this host's GPUs to rgpu clients: one worker process, with its own CUDA\n"
            "  context, per client session. Defaults: --listen 0.0.0.0 --port %d, all GPUs,\n"
            "  the driver libcuda.so.1. Config file keys (section [server]) match the flags;\n"
            "  a flag overrides the file and is checked as the key is.\n"
            "  --busy-poll-us N: workers spin up to N us for the next call before blocking.\n"
            "  --transport auto|rdma|tcp: auto (default) moves a session to RDMA when the client\n"
            "  asks and both hosts can; rdma requires it; tcp never offers it.\n"
            "  --metrics-listen ADDR:PORT: serve /metrics (Prometheus) and /status (JSON) there;\n"
            "  a loopback address unless metrics_token = TOKEN is set (then required of readers).\n"
            "  metrics_public_listen = ADDR:PORT (config only): /metrics and /healthz without a\n"
            "  token, on a listener of their own (cluster scraping and probes).\n"
            "  Tenants: [tenant NAME] sections with token_sha256 (or token), mem_quota = SIZE,\n"
            "  weight = N, cap = PERCENT, class = guaranteed|best-effort, max_sessions = N.\n"
            "  With no tenant the server admits any client (a warning says so);\n"
            "  require_tenants = yes refuses to start, or to reload, without one.\n"
            "  SIGHUP reloads the tenants; running sessions go on. A file with an error is not\n"
            "  taken, at start or on SIGHUP (the running config stays): every unknown section or\n"
            "  key and every bad value is reported as FILE:LINE with the accepted form.\n"
            "  --check-config FILE...: check server config files as a start would (exit 0 when\n"
            "  valid, 1 with the errors); --client: check rgpu client config files instead.\n"
            "  --hash-token TOKEN prints the token_sha256 value for a tenant; --version the\n"
            "  version and protocol.\n"
            "  Sizes: 4GiB, 512MiB, 4096 (bytes). Durations: 500ms, 30s, 5min, or a plain\n"
            "  number in the key's own unit (the _ms keys: milliseconds; _us: microseconds;\n"
            "  nccl_timeout and idle_timeout: seconds). Booleans: yes|no, on|off, true|false.\n"
            "Config keys, what they take and their default (deploy/server.conf has the prose):\n",
            SRV_DEFAULT_PORT);
    for (int s = 0; s < 2; s++) {
        const struct rg_conf_section *sec = &srv_config_sections[s];
        struct srv_config *defaults = calloc(1, sizeof(*defaults));
        struct srv_tenant tenant_defaults;
        const void *obj = defaults;

        if (defaults == NULL)
            return;
        srv_config_init(defaults);
        if (s == 1) {
            char why[64];
            memset(&defaults->tenants, 0, sizeof(defaults->tenants));
            tenant_defaults = *srv_tenant_open(&defaults->tenants, "x", why, sizeof(why));
            obj = &tenant_defaults;
        }
        fprintf(out, "  [%s%s]\n", sec->name, sec->named ? " NAME" : "");
        for (size_t i = 0; i < sec->nkeys; i++) {
            const struct rg_conf_key *k = &sec->keys[i];
            char form[320], def[64] = "";
            rg_conf_describe(k, form, sizeof(form));
            if (k->def != NULL)
                rg_conf_format(k, obj, def, sizeof(def));
            fprintf(out, "    %-21s %s%s%s%s\n", k->name, form, def[0] ? " (default " : "", def,
                    def[0] ? ")" : "");
        }
        free(defaults);
    }
}

/* Each error of --check-config on its own line, as the parser wrote it (FILE:LINE: ...). */
static void print_error(void *arg, const char *message)
{
    fprintf(stderr, "%s\n", message);
}

/* gpu-server --check-config [--client] FILE...: 0 when every file is valid, else 1. */
static int check_config(int argc, char **argv)
{
    bool client = argc > 0 && strcmp(argv[0], "--client") == 0;
    int bad = 0;

    argc -= client;
    argv += client;
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    rg_log_set_prefix("gpu-server");
    for (int i = 0; i < argc; i++) {
        if (client) {
            if (cli_conf_check_file(argv[i], print_error, NULL) != RG_OK)
                bad++;
            else
                printf("%s: valid (rgpu client config)\n", argv[i]);
            continue;
        }
        struct srv_config *c = malloc(sizeof(*c));
        if (c == NULL)
            return 1;
        srv_config_init(c);
        if (srv_config_load_file(c, argv[i], print_error, NULL) != RG_OK ||
            srv_config_check(c, argv[i], print_error, NULL) != RG_OK)
            bad++;
        else
            printf("%s: valid (gpu-server config, %d tenant(s))\n", argv[i], c->tenants.n);
        free(c);
    }
    return bad > 0;
}

struct worker_args {
    int fd;
    int table_fd; /* the supervisor's session table, -1 = none */
    uint64_t session;
    char peer[64];
};

/* A whole number in [min, max], for the flags the supervisor gives its workers. */
static bool parse_whole(const char *text, long long min, long long max, long long *v_p)
{
    char *end;
    long long v;

    if (text[0] < '0' || text[0] > '9')
        return false;
    v = strtoll(text, &end, 10);
    if (*end != '\0' || v < min || v > max)
        return false;
    *v_p = v;
    return true;
}

/* The config file named by --config FILE (or --config=FILE), read before the flags so that
 * they override it wherever they appear. 0, or the exit status. */
static int load_config_file(int argc, char **argv, struct srv_config *c)
{
    const char *path = NULL;

    for (int i = 1; i < argc; i++) {
        const char *p = strcmp(argv[i], "--config") == 0 && i + 1 < argc ? argv[i + 1]
                        : strncmp(argv[i], "--config=", 9) == 0          ? argv[i] + 9
                                                                         : NULL;
        if (p == NULL)
            continue;
        if (path != NULL) {
            fprintf(stderr, "gpu-server: --config is given twice\n");
            return 2;
        }
        path = p;
    }
    if (path == NULL)
        return 0;
    if (path[0] == '\0' || strlen(path) >= sizeof(c->config_path)) {
        fprintf(stderr, "gpu-server: --config: expected a path of 1 to %zu characters\n",
                sizeof(c->config_path) - 1);
        return 2;
    }
    snprintf(c->config_path, sizeof(c->config_path), "%s", path);
    if (srv_config_load_file(c, path, NULL, NULL) != RG_OK) {
        rg_error("not started: %s is not a valid config (the errors above)", path);
        return 2;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct srv_config *c, struct worker_args *w)
{
    /* The flags that are config keys: the option's index here is its row. */
    static const char *const flag_keys[] = {"listen",       "port",      "devices",
                                            "driver",       "log_level", "name",
                                            "busy_poll_us", "transport", "metrics_listen"};
    static const struct option opts[] = {{"listen", 1, 0, 0},
                                         {"port", 1, 0, 0},
                                         {"devices", 1, 0, 0},
                                         {"driver", 1, 0, 0},
                                         {"log-level", 1, 0, 0},
                                         {"name", 1, 0, 0},
                                         {"busy-poll-us", 1, 0, 0},
                                         {"transport", 1, 0, 0},
                                         {"metrics-listen", 1, 0, 0},
                                         {"config", 1, 0, 'c'},
                                         {"worker-fd", 1, 0, 'W'},
                                         {"session", 1, 0, 'S'},
                                         {"peer", 1, 0, 'P'},
                                         {"table-fd", 1, 0, 'F'},
                                         {"help", 0, 0, 'h'},
                                         {"hello-fd", 1, 0, 'H'},
                                         {0, 0, 0, 0}};
    char why[512];
    long long v;
    int o, index;
    int rc = load_config_file(argc, argv, c);

    if (rc != 0)
        return rc;
    while ((o = getopt_long(argc, argv, "h", opts, &index)) != -1) {
        bool ok = true;
        switch (o) {
        case 0:
            if (srv_config_set(c, flag_keys[index], optarg, why, sizeof(why)) != RG_OK) {
                fprintf(stderr, "gpu-server: --%s %s: %s\n", opts[index].name, optarg, why);
                return 2;
            }
            break;
        case 'c':
            break;
        case 'W':
            ok = parse_whole(optarg, 0, 1 << 20, &v) && ((w->fd = (int)v), true);
            break;
        case 'F':
            ok = parse_whole(optarg, 0, 1 << 20, &v) && ((w->table_fd = (int)v), true);
            break;
        case 'H':
            ok = parse_whole(optarg, 0, 1 << 20, &v) && ((c->hello_fd = (int)v), true);
            break;
        case 'S':
            ok = parse_whole(optarg, 0, LLONG_MAX, &v) && ((w->session = (uint64_t)v), true);
            break;
        case 'P':
            snprintf(w->peer, sizeof(w->peer), "%s", optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "gpu-server: --%s %s: expected a whole number\n", opts[index].name,
                    optarg);
            return 2;
        }
    }
    return optind < argc ? (usage(stderr), 2) : 0;
}

int main(int argc, char **argv)
{
    struct srv_config cfg;
    struct worker_args w = {.fd = -1, .table_fd = -1};
    char self[4096];
    ssize_t n;
    int rc;

    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("gpu-server %s (protocol %u.%u)\n", RGPU_VERSION, PROTO_VERSION,
               PROTO_VERSION_MINOR);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--hash-token") == 0) { /* for token_sha256 in the config */
        char hex[65];
        srv_token_hash_hex(argv[2], hex);
        printf("%s\n", hex);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--check-config") == 0)
        return check_config(argc - 2, argv + 2);
    rg_log_set_prefix("gpu-server");
    srv_config_init(&cfg);
    if ((rc = parse_args(argc, argv, &cfg, &w)) != 0)
        return rc;
    rg_log_set_level((enum rg_log_level)cfg.log_level);
    if (w.fd >= 0) {
        if (w.table_fd >= 0 && srv_table_map(w.table_fd, &cfg.table) != RG_OK)
            return 1;
        srv_rdma_direct_configure(cfg.rdma_direct ? "on" : "off");
        return srv_worker_run(&cfg, w.fd, w.session, w.peer);
    }
    if (srv_driver_check(&cfg) != 0) {
        rg_error("no usable CUDA driver or GPU here: gpu-server must run on a host with an "
                 "NVIDIA GPU and its driver (or --driver PATH)");
        return 1;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return 1;
    self[n] = '\0';
    return srv_supervisor_run(&cfg, self);
}
