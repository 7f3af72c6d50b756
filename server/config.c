/* gpu-server's configuration: the [server] table and the schema with [tenant NAME]
 * (server/server.h). Adding a key is adding its row below, its field in struct srv_config, and
 * its line in deploy/server.conf. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "server/server.h"
#include "server/session_table.h"

/* "0,2": driver ordinals 0..63, no repeats, at most SRV_CONFIG_DEVICES_MAX; kept as written
 * once checked (the workers and the probe read it, and it is passed on to workers). */
static bool parse_devices(void *obj, const char *value, char *why, size_t why_len)
{
    struct srv_config *c = obj;
    char buf[sizeof(c->devices)], *tok, *save = NULL;
    uint64_t seen = 0;
    int n = 0;

    if (strlen(value) >= sizeof(buf))
        goto err;
    snprintf(buf, sizeof(buf), "%s", value);
    for (tok = strtok_r(buf, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        char *end;
        long ord = strtol(tok, &end, 10);
        if (tok[0] < '0' || tok[0] > '9' || *end != '\0' || ord > 63 || (seen >> ord & 1) ||
            ++n > SRV_CONFIG_DEVICES_MAX)
            goto err;
        seen |= 1ull << ord;
    }
    snprintf(c->devices, sizeof(c->devices), "%s", value);
    return true;
err:
    snprintf(why, why_len,
             "expected driver ordinals separated by commas, such as 0,2: each "
             "0 to 63, once, at most %d",
             SRV_CONFIG_DEVICES_MAX);
    return false;
}

static const char *const log_levels[] = {"error", "warn", "info", "debug", "trace", NULL};
static const char *const transports[] = {"auto", "rdma", "tcp", NULL};
static const char *const sharings[] = {"time-sliced", "mps", NULL}; /* enum srv_sharing */

#define S(member) RG_CONF_FIELD(struct srv_config, member)
static const struct rg_conf_key server_keys[] = {
    {.name = "listen",
     .type = RG_CONF_STRING,
     S(listen),
     .min = 1,
     .def = "0.0.0.0",
     .help = "an address to listen on: 0.0.0.0, ::, or one of this host's"},
    {.name = "port", .type = RG_CONF_INT, S(port), .min = 0, .max = 65535, .def = "7070"},
    {.name = "devices",
     .type = RG_CONF_CUSTOM,
     S(devices),
     .parse = parse_devices,
     .help = "driver ordinals such as 0,2 (unset: every GPU)"},
    {.name = "driver",
     .type = RG_CONF_STRING,
     S(driver),
     .help = "the CUDA driver library's path (empty or unset: libcuda.so.1)"},
    {.name = "log_level", .type = RG_CONF_ENUM, S(log_level), .names = log_levels, .def = "info"},
    {.name = "name", .type = RG_CONF_STRING, S(name), .min = 1},
    {.name = "busy_poll_us",
     .type = RG_CONF_DURATION,
     S(busy_poll_us),
     .unit = RG_CONF_US,
     .min = 0,
     .max = 1000000,
     .def = "0"},
    {.name = "transport", .type = RG_CONF_ENUM, S(transport), .names = transports, .def = "auto"},
    {.name = "sharing", .type = RG_CONF_ENUM, S(sharing), .names = sharings, .def = "time-sliced"},
    {.name = "module_cache",
     .type = RG_CONF_STRING,
     S(module_cache),
     .min = 1,
     .help = "a directory, or off (unset: under $XDG_RUNTIME_DIR, else /tmp/rgpu-cache-UID)"},
    {.name = "module_cache_max",
     .type = RG_CONF_SIZE,
     S(module_cache_max),
     .min = 1,
     .def = "4GiB"},
    {.name = "host_nvml",
     .type = RG_CONF_STRING,
     S(host_nvml),
     .min = 1,
     .help = "a path, or off (unset: libnvidia-ml.so.1)"},
    {.name = "metrics_listen", .type = RG_CONF_ADDR, S(metrics_listen)},
    {.name = "metrics_token",
     .type = RG_CONF_STRING,
     S(metrics_token),
     .min = 1,
     .flags = RG_CONF_SECRET},
    {.name = "metrics_public_listen", .type = RG_CONF_ADDR, S(metrics_public_listen)},
    {.name = "rdma_direct", .type = RG_CONF_BOOL, S(rdma_direct), .def = "yes"},
    {.name = "nccl_library", .type = RG_CONF_STRING, S(nccl_library), .min = 1},
    {.name = "nccl_secret",
     .type = RG_CONF_STRING,
     S(nccl_secret),
     .min = 1,
     .flags = RG_CONF_SECRET},
    {.name = "nccl_timeout",
     .type = RG_CONF_DURATION,
     S(nccl_timeout_s),
     .unit = RG_CONF_S,
     .min = 1,
     .max = 7 * 86400,
     .def = "600"},
    {.name = "nccl_connect_pairs", .type = RG_CONF_BOOL, S(nccl_connect_pairs), .def = "yes"},
    {.name = "require_tenants", .type = RG_CONF_BOOL, S(require_tenants), .def = "no"},
    {.name = "max_sessions",
     .type = RG_CONF_INT,
     S(max_sessions),
     .min = 1,
     .max = SRV_TABLE_SLOTS,
     .def = "1024"},
    {.name = "max_pending",
     .type = RG_CONF_INT,
     S(max_pending),
     .min = 1,
     .max = 65536,
     .def = "256"},
    {.name = "max_pending_per_peer",
     .type = RG_CONF_INT,
     S(max_pending_per_peer),
     .min = 1,
     .max = 65536,
     .def = "32"},
    {.name = "handshake_timeout_ms",
     .type = RG_CONF_DURATION,
     S(handshake_timeout_ms),
     .unit = RG_CONF_MS,
     .min = 100,
     .max = 600000,
     .def = "5000"},
    {.name = "recv_timeout_ms",
     .type = RG_CONF_DURATION,
     S(recv_timeout_ms),
     .unit = RG_CONF_MS,
     .min = 100,
     .max = 3600000,
     .def = "30000"},
    {.name = "idle_timeout",
     .type = RG_CONF_DURATION,
     S(idle_timeout_s),
     .unit = RG_CONF_S,
     .min = 0,
     .max = 30 * 86400,
     .def = "0"},
};
#undef S

static void *server_open(void *arg, const char *name, char *why, size_t why_len)
{
    return arg;
}

static void *tenant_open(void *arg, const char *name, char *why, size_t why_len)
{
    struct srv_config *c = arg;

    return srv_tenant_open(&c->tenants, name, why, why_len);
}

const struct rg_conf_section srv_config_sections[2] = {
    {.name = "server",
     .keys = server_keys,
     .nkeys = sizeof(server_keys) / sizeof(server_keys[0]),
     .open = server_open},
    {.name = "tenant",
     .named = true,
     .keys = srv_tenant_keys,
     .nkeys = SRV_TENANT_NKEYS,
     .open = tenant_open},
};

void srv_config_init(struct srv_config *c)
{
    memset(c, 0, sizeof(*c));
    rg_conf_defaults(&srv_config_sections[0], c);
    if (gethostname(c->name, sizeof(c->name) - 1) != 0 || c->name[0] == '\0')
        snprintf(c->name, sizeof(c->name), "gpu-server");
}

rg_status_t srv_config_parse(struct srv_config *c, const char *text, size_t len, const char *origin,
                             rg_conf_report_fn report, void *report_arg)
{
    static const struct rg_conf_schema schema = {srv_config_sections, 2, "server"};
    struct rg_conf_parse p = {
        .schema = &schema, .arg = c, .origin = origin, .report = report, .report_arg = report_arg};
    return rg_conf_parse_text(&p, text, len);
}

rg_status_t srv_config_load_file(struct srv_config *c, const char *path, rg_conf_report_fn report,
                                 void *report_arg)
{
    char why[512], *text;
    size_t len;
    rg_status_t st;

    if (rg_conf_read_file(path, &text, &len, NULL, why, sizeof(why)) != RG_OK) {
        if (report != NULL)
            report(report_arg, why);
        else
            rg_error("%s", why);
        return RG_ERR_IO;
    }
    st = srv_config_parse(c, text, len, path, report, report_arg);
    free(text);
    return st;
}

rg_status_t srv_config_set(struct srv_config *c, const char *key, const char *value, char *why,
                           size_t why_len)
{
    return rg_conf_set(&srv_config_sections[0], c, key, value, why, why_len);
}

void srv_config_format(const struct srv_config *c, const char *key, char *buf, size_t len)
{
    const struct rg_conf_key *k = rg_conf_key_find(&srv_config_sections[0], key);

    if (k != NULL)
        rg_conf_format(k, c, buf, len);
    else
        snprintf(buf, len, "?");
}

rg_status_t srv_config_check(const struct srv_config *c, const char *origin,
                             rg_conf_report_fn report, void *report_arg)
{
    char msg[512];

    if (c->tenants.n > 0)
        return RG_OK;
    if (!c->require_tenants) {
        rg_warn("%s: no [tenant NAME] section: this server admits any client that reaches its "
                "port, with no token and no quota (require_tenants = yes refuses to run so)",
                origin);
        return RG_OK;
    }
    snprintf(msg, sizeof(msg),
             "%s: require_tenants = yes and no [tenant NAME] section: add a tenant "
             "(docs/tenants.md), or set require_tenants = no to serve any client",
             origin);
    if (report != NULL)
        report(report_arg, msg);
    else
        rg_error("%s", msg);
    return RG_ERR_INVALID;
}
