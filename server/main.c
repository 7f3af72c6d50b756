/* gpu-server: serve this host's GPUs to rgpu clients.
 *   gpu-server [--config FILE] [--listen ADDR] [--port N] [--devices 0,2] [--driver PATH]
 *              [--log-level LEVEL] [--name NAME]
 * The config file has a [server] section with the same keys (listen, port, devices, driver,
 * log_level, name); flags override it. */
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "server/server.h"
#include "server/session.h"
#include "server/session_table.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpu-server [--config FILE] [--listen ADDR] [--port N] [--devices LIST]\n"
            "                  [--driver PATH] [--log-level error|warn|info|debug] [--name NAME]\n"
            "                  [--busy-poll-us N] [--metrics-listen ADDR:PORT]\n"
            "  Serves this host's GPUs to rgpu clients: one worker process, with its own CUDA\n"
            "  context, per client session. Defaults: --listen 0.0.0.0 --port %d, all GPUs,\n"
            "  the driver libcuda.so.1. Config file keys (section [server]) match the flags.\n"
            "  --busy-poll-us N: workers spin up to N us for the next call before blocking.\n"
            "  --transport auto|rdma|tcp: auto (default) moves a session to RDMA when the client\n"
            "  asks and both hosts can; rdma requires it; tcp never offers it.\n"
            "  Config-only keys: module_cache = DIR|off (images kept by hash; default under\n"
            "  $XDG_RUNTIME_DIR or /tmp/rgpu-cache-UID), module_cache_max = SIZE (4GiB).\n"
            "  host_nvml = PATH|off: the NVML that GPU utilization is read from.\n"
            "  nccl_library = PATH (libnccl.so.2), nccl_secret = S, nccl_timeout = SECONDS\n"
            "  (600): the NCCL the workers run for rgpu's NCCL shim (docs/nccl.md).\n"
            "  rdma_direct = on|off: one-sided copies of RDMA sessions go straight to device\n"
            "  memory where the host can (GPUDirect RDMA; default on; RGPU_RDMA_DIRECT=0 too).\n"
            "  --metrics-listen ADDR:PORT: serve /metrics (Prometheus) and /status (JSON) there;\n"
            "  a loopback address unless metrics_token = TOKEN is set (then required of readers).\n"
            "  Tenants: [tenant NAME] sections with token_sha256 (or token), mem_quota = SIZE,\n"
            "  weight = N, cap = PERCENT, class = guaranteed|best-effort, max_sessions = N.\n"
            "  SIGHUP reloads the tenants; running sessions go on.\n"
            "  Bounds (docs/security.md): max_sessions = N (%d), max_pending = N (256),\n"
            "  max_pending_per_peer = N (32), handshake_timeout_ms = N (5000),\n"
            "  recv_timeout_ms = N (30000), idle_timeout = SECONDS (0 = none).\n"
            "  gpu-server --hash-token TOKEN prints the token_sha256 value for a tenant.\n",
            SRV_DEFAULT_PORT, SRV_TABLE_SLOTS);
}

/* A whole decimal number in [min, max] into *out. */
static rg_status_t set_int(int *out, const char *value, long min, long max)
{
    char *end;
    long v = strtol(value, &end, 10);

    if (end == value || *end != '\0' || v < min || v > max)
        return RG_ERR_INVALID;
    *out = (int)v;
    return RG_OK;
}

/* The bounds of docs/security.md; false when key is not one of them. */
static bool limit_key(struct srv_config *c, const char *key, const char *value, rg_status_t *st)
{
    static const struct { const char *key; size_t off; long min, max; } keys[] = {
        {"max_sessions", offsetof(struct srv_config, max_sessions), 1, SRV_TABLE_SLOTS},
        {"max_pending", offsetof(struct srv_config, max_pending), 1, 65536},
        {"max_pending_per_peer", offsetof(struct srv_config, max_pending_per_peer), 1, 65536},
        {"handshake_timeout_ms", offsetof(struct srv_config, handshake_timeout_ms), 100, 600000},
        {"recv_timeout_ms", offsetof(struct srv_config, recv_timeout_ms), 100, 3600000},
        {"idle_timeout", offsetof(struct srv_config, idle_timeout_s), 0, 30 * 86400},
    };

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(key, keys[i].key) == 0) {
            *st = set_int((int *)((char *)c + keys[i].off), value, keys[i].min, keys[i].max);
            if (*st != RG_OK)
                rg_error("config: %s = '%s': expected a whole number from %ld to %ld", key,
                         value, keys[i].min, keys[i].max);
            return true;
        }
    return false;
}

static rg_status_t set_key(struct srv_config *c, const char *key, const char *value)
{
    rg_status_t st;

    if (limit_key(c, key, value, &st))
        return st;
#define SET(field) snprintf(c->field, sizeof(c->field), "%s", value)
    if (strcmp(key, "listen") == 0)
        SET(listen);
    else if (strcmp(key, "port") == 0)
        c->port = atoi(value);
    else if (strcmp(key, "devices") == 0)
        SET(devices);
    else if (strcmp(key, "driver") == 0)
        SET(driver);
    else if (strcmp(key, "log_level") == 0 || strcmp(key, "log-level") == 0)
        SET(log_level);
    else if (strcmp(key, "name") == 0)
        SET(name);
    else if (strcmp(key, "busy_poll_us") == 0 || strcmp(key, "busy-poll-us") == 0)
        SET(busy_poll_us);
    else if (strcmp(key, "transport") == 0 && (strcmp(value, "auto") == 0 ||
                                               strcmp(value, "rdma") == 0 ||
                                               strcmp(value, "tcp") == 0))
        SET(transport);
    else if (strcmp(key, "module_cache") == 0)
        SET(module_cache);
    else if (strcmp(key, "module_cache_max") == 0)
        SET(module_cache_max);
    else if (strcmp(key, "host_nvml") == 0)
        SET(host_nvml);
    else if (strcmp(key, "nccl_library") == 0)
        SET(nccl_library);
    else if (strcmp(key, "nccl_secret") == 0)
        SET(nccl_secret);
    else if (strcmp(key, "nccl_timeout") == 0)
        SET(nccl_timeout);
    else if (strcmp(key, "metrics_listen") == 0 || strcmp(key, "metrics-listen") == 0)
        SET(metrics_listen);
    else if (strcmp(key, "metrics_token") == 0 && strlen(value) < sizeof(c->metrics_token))
        SET(metrics_token);
    else if (strcmp(key, "rdma_direct") == 0 &&
             (strcmp(value, "on") == 0 || strcmp(value, "off") == 0))
        SET(rdma_direct);
    else if (strcmp(key, "sharing") == 0 &&
             (strcmp(value, "time-sliced") == 0 || strcmp(value, "mps") == 0))
        SET(sharing);
    else
        return RG_ERR_INVALID;
#undef SET
    return RG_OK;
}

static rg_status_t conf_key(void *arg, const char *section, const char *key, const char *value)
{
    struct srv_config *c = arg;
    rg_status_t st;

    if (strncmp(section, "tenant ", 7) == 0) /* a bad tenant setting fails the load */
        return srv_tenant_key(&c->tenants, section + 7, key, value);
    if (strcmp(section, "server") != 0 && section[0] != '\0')
        return RG_OK;
    if (limit_key(c, key, value, &st)) /* a bad bound is an error, never a silent default */
        return st;
    if (set_key(arg, key, value) != RG_OK)
        rg_warn("config: unknown key '%s' ignored", key);
    return RG_OK;
}

static rg_status_t parse_file(const char *path, struct srv_config *c)
{
    return rg_config_parse_file(path, conf_key, c);
}

struct worker_args {
    int fd;
    int table_fd; /* the supervisor's session table, -1 = none */
    uint64_t session;
    char peer[64];
};

static int parse_args(int argc, char **argv, struct srv_config *c, struct worker_args *w)
{
    static const struct option opts[] = {
        {"config", 1, 0, 'c'}, {"listen", 1, 0, 'l'}, {"port", 1, 0, 'p'},
        {"devices", 1, 0, 'd'}, {"driver", 1, 0, 'D'}, {"log-level", 1, 0, 'L'},
        {"name", 1, 0, 'n'}, {"worker-fd", 1, 0, 'W'}, {"session", 1, 0, 'S'},
        {"peer", 1, 0, 'P'}, {"busy-poll-us", 1, 0, 'B'}, {"transport", 1, 0, 'T'},
        {"table-fd", 1, 0, 'F'}, {"metrics-listen", 1, 0, 'M'}, {"help", 0, 0, 'h'},
        {"hello-fd", 1, 0, 'H'},
        {0, 0, 0, 0}};
    int o;

    /* The config file first, so flags override it wherever they appear. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0 &&
            (snprintf(c->config_path, sizeof(c->config_path), "%s", argv[i + 1]) < 0 ||
             parse_file(argv[i + 1], c) != RG_OK)) {
            fprintf(stderr, "gpu-server: cannot read config file %s\n", argv[i + 1]);
            return 2;
        }
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': break;
        case 'l': set_key(c, "listen", optarg); break;
        case 'p': set_key(c, "port", optarg); break;
        case 'd': set_key(c, "devices", optarg); break;
        case 'D': set_key(c, "driver", optarg); break;
        case 'L': set_key(c, "log_level", optarg); break;
        case 'n': set_key(c, "name", optarg); break;
        case 'B': set_key(c, "busy_poll_us", optarg); break;
        case 'T':
            if (set_key(c, "transport", optarg) != RG_OK) {
                fprintf(stderr, "gpu-server: --transport takes auto, rdma or tcp\n");
                return 2;
            }
            break;
        case 'W': w->fd = atoi(optarg); break;
        case 'F': w->table_fd = atoi(optarg); break;
        case 'H': c->hello_fd = atoi(optarg); break;
        case 'M': set_key(c, "metrics_listen", optarg); break;
        case 'S': w->session = strtoull(optarg, NULL, 10); break;
        case 'P': snprintf(w->peer, sizeof(w->peer), "%s", optarg); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    return optind < argc ? (usage(stderr), 2) : 0;
}

/* Check in a child process, so the supervisor itself never holds a CUDA context. */
int srv_driver_check(const struct srv_config *cfg)
{
    pid_t pid = fork();
    int status = 1;

    if (pid == 0) {
        struct srv_driver drv;
        int n = 0;
        CUresult res;
        if (srv_driver_open(cfg->driver[0] ? cfg->driver : NULL, &drv) != RG_OK)
            _exit(1);
        if ((res = drv.cuInit(0)) != CUDA_SUCCESS || drv.cuDeviceGetCount(&n) != CUDA_SUCCESS ||
            n == 0) {
            const char *name = "?";
            drv.cuGetErrorName(res, &name);
            rg_error("the CUDA driver %s finds no GPU (cuInit: %s)", drv.path, name);
            _exit(1);
        }
        for (int i = 0; i < n; i++) {
            char dev_name[256] = "";
            size_t mem = 0;
            drv.cuDeviceGetName(dev_name, sizeof(dev_name), i);
            drv.cuDeviceTotalMem(&mem, i);
            rg_info("GPU %d: %s, %.1f GiB", i, dev_name, mem / 1073741824.0);
        }
        _exit(0);
    }
    if (pid > 0)
        waitpid(pid, &status, 0);
    return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    struct srv_config cfg = {.listen = "0.0.0.0", .port = SRV_DEFAULT_PORT, .log_level = "info",
                             .transport = "auto", .max_sessions = SRV_TABLE_SLOTS,
                             .max_pending = 256, .max_pending_per_peer = 32,
                             .handshake_timeout_ms = 5000, .recv_timeout_ms = 30000,
                             .parse_file = parse_file};
    struct worker_args w = {.fd = -1, .table_fd = -1};
    char self[4096];
    ssize_t n;
    int rc;

    if (argc == 3 && strcmp(argv[1], "--hash-token") == 0) { /* for token_sha256 in the config */
        char hex[65];
        srv_token_hash_hex(argv[2], hex);
        printf("%s\n", hex);
        return 0;
    }
    gethostname(cfg.name, sizeof(cfg.name) - 1);
    if ((rc = parse_args(argc, argv, &cfg, &w)) != 0)
        return rc;
    rg_log_set_level_str(cfg.log_level);
    if (w.fd >= 0) {
        if (w.table_fd >= 0 && srv_table_map(w.table_fd, &cfg.table) != RG_OK)
            return 1;
        srv_rdma_direct_configure(cfg.rdma_direct);
        return srv_worker_run(&cfg, w.fd, w.session, w.peer);
    }
    rg_log_set_prefix("gpu-server");
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
