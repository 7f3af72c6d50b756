/* The client's configuration (client/session/config.h). */
#include "client/session/config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"

/* A pool or server entry: HOST, HOST:PORT or [V6]:PORT, with a port from 1 to 65535. */
static bool entry_valid(const char *entry)
{
    char host[256], port[16], *end;
    long p;

    if (rg_split_hostport(entry, host, sizeof(host), port, sizeof(port), CLI_DEFAULT_PORT) !=
            RG_OK ||
        host[0] == '\0')
        return false;
    p = strtol(port, &end, 10);
    return port[0] >= '0' && port[0] <= '9' && *end == '\0' && p >= 1 && p <= 65535;
}

rg_status_t cli_conf_add_pool(struct cli_conf *conf, const char *list, char *why, size_t why_len)
{
    char buf[4096], *tok, *save = NULL;

    if (strlen(list) >= sizeof(buf)) {
        snprintf(why, why_len, "expected a list of at most %zu characters", sizeof(buf) - 1);
        return RG_ERR_INVALID;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (conf->npool == CLI_POOL_MAX) {
            snprintf(why, why_len, "the pool has more than %d entries", CLI_POOL_MAX);
            return RG_ERR_INVALID;
        }
        if (strlen(tok) >= sizeof(conf->pool[0])) {
            snprintf(why, why_len, "pool entry '%.40s...' is too long", tok);
            return RG_ERR_INVALID;
        }
        if (!entry_valid(tok)) {
            snprintf(why, why_len,
                     "expected HOST, HOST:PORT or [V6]:PORT entries (a port from "
                     "1 to 65535), separated by commas");
            return RG_ERR_INVALID;
        }
        snprintf(conf->pool[conf->npool++], sizeof(conf->pool[0]), "%s", tok);
    }
    if (conf->npool == 0) {
        snprintf(why, why_len, "expected at least one HOST[:PORT]");
        return RG_ERR_INVALID;
    }
    return RG_OK;
}

/* ---- [client]: one row per key (common/config.h) ---------------------------------------- */

static bool parse_pool(void *obj, const char *value, char *why, size_t why_len)
{
    struct cli_conf *conf = obj;

    conf->placed = true;
    return cli_conf_add_pool(conf, value, why, why_len) == RG_OK;
}

static bool parse_server(void *obj, const char *value, char *why, size_t why_len)
{
    return cli_conf_add_pool(obj, value, why, why_len) == RG_OK;
}

/* At most CLI_TOKEN_MAX characters: a longer token is refused, never cut to fit. */
static bool parse_token(void *obj, const char *value, char *why, size_t why_len)
{
    struct cli_conf *conf = obj;

    if (strlen(value) > CLI_TOKEN_MAX) {
        snprintf(why, why_len, "expected a token of at most %d characters (this one has %zu)",
                 CLI_TOKEN_MAX, strlen(value));
        return false;
    }
    snprintf(conf->token, sizeof(conf->token), "%s", value);
    return true;
}

bool cli_parse_share(const char *text, double *share_p)
{
    char *end;
    double v = strtod(text, &end);

    if (end == text || text[0] == ' ' || !isfinite(v))
        return false;
    if (*end == '%') {
        v /= 100;
        end++;
    }
    if (*end != '\0' || !(v > 0 && v <= 1))
        return false;
    *share_p = v;
    return true;
}

/* mem_quota and mem_share are one request: the later set wins (the environment over the file). */
static bool parse_mem_quota(void *obj, const char *value, char *why, size_t why_len)
{
    struct cli_conf *conf = obj;

    if (!rg_parse_size(value, &conf->mem_quota))
        return false;
    conf->mem_share = 0;
    return true;
}

static bool parse_mem_share(void *obj, const char *value, char *why, size_t why_len)
{
    struct cli_conf *conf = obj;

    if (!cli_parse_share(value, &conf->mem_share))
        return false;
    conf->mem_quota = 0;
    return true;
}

/* session_timeout (issue 27 item 8): how long a call may wait without a word from its server.
 * "30s", "500ms", "2m", a bare number of seconds, or 0 for never; session_timeout_ms (and
 * RGPU_SESSION_TIMEOUT_MS) in milliseconds. 1 s to 24 h. */
static bool parse_timeout_in(const char *text, double unit, int *ms_p)
{
    char *end;
    double v = strtod(text, &end);

    while (*end == ' ')
        end++;
    if (end == text || v < 0 || !isfinite(v))
        return false;
    if (unit == 1000 && strcmp(end, "ms") == 0)
        unit = 1;
    else if (unit == 1000 && strcmp(end, "m") == 0)
        unit = 60000;
    else if (!(*end == '\0' || (unit == 1000 && strcmp(end, "s") == 0)))
        return false;
    v *= unit;
    if (v != 0 && (v < 1000 || v > 86400000.0))
        return false;
    *ms_p = (int)v;
    return true;
}

static bool parse_session_timeout(void *obj, const char *value, char *why, size_t why_len)
{
    return parse_timeout_in(value, 1000, &((struct cli_conf *)obj)->session_timeout_ms);
}

static bool parse_session_timeout_ms(void *obj, const char *value, char *why, size_t why_len)
{
    return parse_timeout_in(value, 1, &((struct cli_conf *)obj)->session_timeout_ms);
}

static bool parse_policy(void *obj, const char *value, char *why, size_t why_len)
{
    return sched_policy_parse(value, &((struct cli_conf *)obj)->policy);
}

static bool parse_transport(void *obj, const char *value, char *why, size_t why_len)
{
    struct cli_conf *conf = obj;

    if (strcmp(value, "auto") != 0 && strcmp(value, "rdma") != 0 && strcmp(value, "tcp") != 0)
        return false;
    snprintf(conf->transport, sizeof(conf->transport), "%s", value);
    return true;
}

#define C(member) RG_CONF_FIELD(struct cli_conf, member)
static const struct rg_conf_key client_keys[] = {
    {.name = "pool",
     .type = RG_CONF_CUSTOM,
     C(pool),
     .parse = parse_pool,
     .flags = RG_CONF_LIST,
     .help = "HOST[:PORT] entries separated by commas (a port from 1 to 65535)"},
    {.name = "server",
     .type = RG_CONF_CUSTOM,
     C(pool),
     .parse = parse_server,
     .flags = RG_CONF_LIST,
     .help = "HOST[:PORT] entries separated by commas (a port from 1 to 65535)"},
    {.name = "tenant", .type = RG_CONF_STRING, C(tenant), .min = 1},
    {.name = "token",
     .type = RG_CONF_CUSTOM,
     C(token),
     .parse = parse_token,
     .flags = RG_CONF_SECRET,
     .help = "a token of at most 255 characters"},
    {.name = "token_file", .type = RG_CONF_STRING, C(token_file), .min = 1},
    {.name = "mem_quota",
     .type = RG_CONF_CUSTOM,
     C(mem_quota),
     .parse = parse_mem_quota,
     .help = "a size such as 4GiB (bytes, or KiB, MiB, GiB, TiB)"},
    {.name = "mem_share",
     .type = RG_CONF_CUSTOM,
     C(mem_share),
     .parse = parse_mem_share,
     .help = "a share of the GPU's memory: 0.5 or 50%"},
    {.name = "policy",
     .type = RG_CONF_CUSTOM,
     C(policy),
     .parse = parse_policy,
     .def = "spread",
     .help = "spread, pack or first"},
    {.name = "connect_timeout_ms",
     .type = RG_CONF_DURATION,
     C(connect_timeout_ms),
     .unit = RG_CONF_MS,
     .min = 1,
     .max = 600000,
     .def = "5000"},
    {.name = "probe_timeout_ms",
     .type = RG_CONF_DURATION,
     C(probe_timeout_ms),
     .unit = RG_CONF_MS,
     .min = 1,
     .max = 600000,
     .def = "3000"},
    {.name = "probe_sample",
     .type = RG_CONF_INT,
     C(probe_sample),
     .min = 0,
     .max = 4096,
     .def = "8",
     .help = "a count of servers probed per round, 0 (all) to 4096 (docs/pool.md)"},
    {.name = "transport",
     .type = RG_CONF_CUSTOM,
     C(transport),
     .parse = parse_transport,
     .def = "auto",
     .help = "auto, rdma or tcp"},
    {.name = "session_timeout",
     .type = RG_CONF_CUSTOM,
     C(session_timeout_ms),
     .parse = parse_session_timeout,
     .def = "30",
     .help =
         "a duration from 1s to 24h such as 30s, 1500ms or 2m (plain: seconds), or 0 for never"},
    {.name = "session_timeout_ms",
     .type = RG_CONF_CUSTOM,
     C(session_timeout_ms),
     .parse = parse_session_timeout_ms,
     .help = "milliseconds from 1000 to 86400000, or 0 for never"},
    {.name = "lanes", .type = RG_CONF_INT, C(lanes), .min = 0, .max = CLI_LANES_MAX, .def = "4"},
    {.name = "gpus", .type = RG_CONF_INT, C(gpus), .min = 1, .max = CLI_GPUS_MAX},
};
#undef C

static void *client_open(void *arg, const char *name, char *why, size_t why_len)
{
    return arg;
}

static const struct rg_conf_section client_section = {.name = "client",
                                                      .keys = client_keys,
                                                      .nkeys = sizeof(client_keys) /
                                                               sizeof(client_keys[0]),
                                                      .open = client_open};
static const struct rg_conf_schema client_schema = {&client_section, 1, "client"};

/* The first error in why (the parser's FILE:LINE: ... line), and how many more there were. */
struct first_error {
    char *why;
    size_t why_len;
    int n;
};

static void keep_first(void *arg, const char *message)
{
    struct first_error *f = arg;

    if (f->n++ == 0)
        snprintf(f->why, f->why_len, "%s", message);
}

/* The file's text and mode, parsed over conf; every error to report. A file that sets a token
 * must be readable by its owner alone, as a token_file must: the token is the same secret. */
static rg_status_t read_file(struct cli_conf *conf, const char *path, rg_conf_report_fn report,
                             void *report_arg)
{
    struct rg_conf_parse p = {.schema = &client_schema,
                              .arg = conf,
                              .origin = path,
                              .report = report,
                              .report_arg = report_arg};
    char why[512], *text, before[sizeof(conf->token)];
    struct stat st;
    size_t len;
    rg_status_t status;

    if (rg_conf_read_file(path, &text, &len, &st, why, sizeof(why)) != RG_OK) {
        report(report_arg, why);
        return RG_ERR_INVALID;
    }
    memcpy(before, conf->token, sizeof(before));
    status = rg_conf_parse_text(&p, text, len);
    free(text);
    if (status == RG_OK && conf->token[0] != '\0' &&
        memcmp(before, conf->token, sizeof(before)) != 0 && (st.st_mode & 077) != 0) {
        snprintf(why, sizeof(why),
                 "%s holds a token and is open to its group or others (mode %04o): it must be "
                 "readable only by its owner (chmod 600 %s), or keep the token in a token_file",
                 path, (unsigned)(st.st_mode & 07777), path);
        report(report_arg, why);
        status = RG_ERR_INVALID;
    }
    return status;
}

static void conf_defaults(struct cli_conf *conf)
{
    memset(conf, 0, sizeof(*conf));
    rg_conf_defaults(&client_section, conf);
}

rg_status_t cli_conf_read_file(struct cli_conf *conf, const char *path, char *why, size_t why_len)
{
    struct first_error f = {why, why_len, 0};
    size_t n;

    why[0] = '\0';
    if (read_file(conf, path, keep_first, &f) != RG_OK) {
        n = strlen(why);
        if (f.n > 1 && n < why_len)
            snprintf(why + n, why_len - n,
                     " (and %d more error(s): gpu-server --check-config "
                     "--client %s lists them)",
                     f.n - 1, path);
        return RG_ERR_INVALID;
    }
    snprintf(conf->source, sizeof(conf->source), "%s", path);
    return RG_OK;
}

rg_status_t cli_conf_check_file(const char *path, rg_conf_report_fn report, void *report_arg)
{
    struct cli_conf *conf = malloc(sizeof(*conf));
    rg_status_t st;

    if (conf == NULL)
        return RG_ERR_NOMEM;
    conf_defaults(conf);
    st = read_file(conf, path, report, report_arg);
    free(conf);
    return st;
}

const char *cli_conf_pick(const char *const *paths, int n)
{
    for (int i = 0; i < n; i++)
        if (paths[i] != NULL && paths[i][0] != '\0' && access(paths[i], F_OK) == 0)
            return paths[i];
    return NULL;
}

rg_status_t cli_token_file_read(const char *path, char *token, size_t token_len, char *why,
                                size_t why_len)
{
    struct stat st;
    char buf[CLI_TOKEN_MAX + 3]; /* a longer first line is seen to be longer */
    ssize_t n = 0, got;
    size_t len;
    /* O_NONBLOCK: a FIFO is refused below instead of waiting here for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, why_len, "token_file %s: %s", path, strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "token_file %s is not a regular file", path);
        goto err_close;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, why_len, "token_file %s belongs to uid %u, not to this user (uid %u)", path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        goto err_close;
    }
    if (st.st_mode & 077) {
        snprintf(why, why_len,
                 "token_file %s is open to its group or others (mode %04o); it must be "
                 "readable only by its owner: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 07777), path);
        goto err_close;
    }
    while ((size_t)n < sizeof(buf) - 1 &&
           (got = read(fd, buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
        n += got;
    close(fd);
    buf[n] = '\0';
    len = strcspn(buf, "\r\n");
    buf[len] = '\0';
    if (len > CLI_TOKEN_MAX || len >= token_len) {
        snprintf(why, why_len, "token_file %s: the token is longer than %d characters", path,
                 CLI_TOKEN_MAX);
        return RG_ERR_REFUSED;
    }
    memcpy(token, buf, len + 1);
    return RG_OK;
err_close:
    if (fd >= 0)
        close(fd);
    return RG_ERR_REFUSED;
}

/* One variable through its key's row, as in a file. */
static rg_status_t env_key(struct cli_conf *conf, const char *var, const char *key, char *why,
                           size_t why_len)
{
    const char *v = getenv(var);
    const struct rg_conf_key *k = rg_conf_key_find(&client_section, key);
    char form[320];

    if (v == NULL || v[0] == '\0' ||
        rg_conf_set(&client_section, conf, key, v, form, sizeof(form)) == RG_OK)
        return RG_OK;
    if (k->flags & RG_CONF_SECRET)
        snprintf(why, why_len, "%s: %s", var, form);
    else
        snprintf(why, why_len, "%s = %s: %s", var, v, form);
    return RG_ERR_INVALID;
}

/* Environment over the file. RGPU_SERVER and RGPU_POOL replace the file's pool (RGPU_SERVER:
 * the servers of the process; RGPU_POOL: a pool that places the job on one). */
static rg_status_t apply_env(struct cli_conf *conf, char *why, size_t why_len)
{
    static const char *const map[][2] = {{"RGPU_TENANT", "tenant"},
                                         {"RGPU_TOKEN", "token"},
                                         {"RGPU_TOKEN_FILE", "token_file"},
                                         {"RGPU_MEM_QUOTA", "mem_quota"},
                                         {"RGPU_MEM_SHARE", "mem_share"},
                                         {"RGPU_POLICY", "policy"},
                                         {"RGPU_CONNECT_TIMEOUT_MS", "connect_timeout_ms"},
                                         {"RGPU_PROBE_TIMEOUT_MS", "probe_timeout_ms"},
                                         {"RGPU_PROBE_SAMPLE", "probe_sample"},
                                         {"RGPU_TRANSPORT", "transport"},
                                         {"RGPU_LANES", "lanes"},
                                         {"RGPU_GPUS", "gpus"},
                                         {"RGPU_SESSION_TIMEOUT_MS", "session_timeout_ms"}};
    const char *server = getenv("RGPU_SERVER"), *pool = getenv("RGPU_POOL");
    rg_status_t st = RG_OK;

    const char *token = getenv("RGPU_TOKEN");

    if ((server && server[0]) || (pool && pool[0])) {
        conf->npool = 0;
        conf->placed = !(server && server[0]);
    }
    if (token && token[0]) /* a token in the environment wins over the file's token_file */
        conf->token_file[0] = '\0';
    if (server && server[0])
        st = env_key(conf, "RGPU_SERVER", "server", why, why_len);
    else if (pool && pool[0])
        st = env_key(conf, "RGPU_POOL", "pool", why, why_len);
    for (size_t i = 0; st == RG_OK && i < sizeof(map) / sizeof(map[0]); i++)
        st = env_key(conf, map[i][0], map[i][1], why, why_len);
    if (st != RG_OK) {
        char inner[256];
        snprintf(inner, sizeof(inner), "%s", why);
        snprintf(why, why_len, "environment: %s", inner);
    }
    return st;
}

rg_status_t cli_conf_load(struct cli_conf *conf, char *why, size_t why_len)
{
    char home_conf[512] = "";
    const char *home = getenv("HOME"), *file;
    const char *paths[3] = {getenv("RGPU_CONFIG"), home_conf, "/etc/rgpu/client.conf"};
    rg_status_t st;

    conf_defaults(conf);
    if (home != NULL && home[0] != '\0')
        snprintf(home_conf, sizeof(home_conf), "%s/.config/rgpu/client.conf", home);
    if (paths[0] != NULL && paths[0][0] != '\0') /* named: that file or an error */
        file = paths[0];
    else
        file = cli_conf_pick(paths + 1, 2);
    if (file != NULL && (st = cli_conf_read_file(conf, file, why, why_len)) != RG_OK)
        return st;
    if ((st = apply_env(conf, why, why_len)) != RG_OK)
        return st;
    if (conf->token_file[0] != '\0' &&
        cli_token_file_read(conf->token_file, conf->token, sizeof(conf->token), why, why_len) !=
            RG_OK)
        return RG_ERR_INVALID;
    if (conf->npool == 0)
        snprintf(conf->pool[conf->npool++], sizeof(conf->pool[0]), "%s", CLI_DEFAULT_SERVER);
    return RG_OK;
}
