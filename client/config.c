/* The client's configuration (client/config.h). */
#include "client/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"

#define DEFAULT_LANES              4 /* measured on the H100 host: see client/lanes.c */
#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_PROBE_TIMEOUT_MS   3000
#define DEFAULT_PROBE_SAMPLE       8    /* servers probed per round (docs/pool.md) */
#define PROBE_SAMPLE_MAX           4096

struct parse_ctx {
    struct cli_conf *conf;
    char *why;
    size_t why_len;
};

static bool parse_ms(const char *text, int *ms_p)
{
    char *end;
    long v = strtol(text, &end, 10);

    if (end == text || *end != '\0' || v <= 0 || v > 600000)
        return false;
    *ms_p = (int)v;
    return true;
}

rg_status_t cli_conf_add_pool(struct cli_conf *conf, const char *list, char *why, size_t why_len)
{
    char buf[4096], *tok, *save = NULL;

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
        snprintf(conf->pool[conf->npool++], sizeof(conf->pool[0]), "%s", tok);
    }
    return RG_OK;
}

static bool parse_gpus(const char *value, int *gpus_p)
{
    char *end;
    long n = strtol(value, &end, 10);

    if (end == value || *end != '\0' || n < 1 || n > CLI_GPUS_MAX)
        return false;
    *gpus_p = (int)n;
    return true;
}

static bool parse_sample(const char *value, int *sample_p)
{
    char *end;
    long n = strtol(value, &end, 10);

    if (end == value || *end != '\0' || n < 0 || n > PROBE_SAMPLE_MAX)
        return false;
    *sample_p = (int)n;
    return true;
}

/* One key; every value is checked, and a bad one is an error naming the key. */
static rg_status_t set_key(struct cli_conf *conf, const char *key, const char *value, char *why,
                           size_t why_len)
{
    bool ok = true;

    if (strcmp(key, "pool") == 0)
        conf->placed = true;
    if (strcmp(key, "server") == 0 || strcmp(key, "pool") == 0)
        return cli_conf_add_pool(conf, value, why, why_len);
    if (strcmp(key, "tenant") == 0)
        snprintf(conf->tenant, sizeof(conf->tenant), "%s", value);
    else if (strcmp(key, "token") == 0)
        snprintf(conf->token, sizeof(conf->token), "%s", value);
    else if (strcmp(key, "token_file") == 0)
        snprintf(conf->token_file, sizeof(conf->token_file), "%s", value);
    else if (strcmp(key, "transport") == 0)
        snprintf(conf->transport, sizeof(conf->transport), "%s", value);
    else if (strcmp(key, "mem_quota") == 0)
        ok = rg_parse_size(value, &conf->mem_quota);
    else if (strcmp(key, "policy") == 0)
        ok = sched_policy_parse(value, &conf->policy);
    else if (strcmp(key, "connect_timeout_ms") == 0)
        ok = parse_ms(value, &conf->connect_timeout_ms);
    else if (strcmp(key, "probe_timeout_ms") == 0)
        ok = parse_ms(value, &conf->probe_timeout_ms);
    else if (strcmp(key, "probe_sample") == 0)
        ok = parse_sample(value, &conf->probe_sample);
    else if (strcmp(key, "lanes") == 0)
        conf->lanes = atoi(value);
    else if (strcmp(key, "gpus") == 0)
        ok = parse_gpus(value, &conf->gpus);
    /* other keys are for other readers (the NVML shim, later versions): ignored */
    if (!ok)
        snprintf(why, why_len, "%s = %s is not valid (%s)", key, value,
                 strcmp(key, "policy") == 0      ? "spread, pack or first"
                 : strcmp(key, "mem_quota") == 0 ? "a size such as 4GiB"
                 : strcmp(key, "gpus") == 0      ? "a count, 1 to 64"
                 : strcmp(key, "probe_sample") == 0 ? "a count of servers, 0 (all) to 4096"
                                                 : "milliseconds, 1 to 600000");
    return ok ? RG_OK : RG_ERR_INVALID;
}

static rg_status_t file_key(void *arg, const char *section, const char *key, const char *value)
{
    struct parse_ctx *ctx = arg;

    if (section[0] != '\0' && strcmp(section, "client") != 0)
        return RG_OK;
    return set_key(ctx->conf, key, value, ctx->why, ctx->why_len);
}

rg_status_t cli_conf_read_file(struct cli_conf *conf, const char *path, char *why, size_t why_len)
{
    struct parse_ctx ctx = {conf, why, why_len};

    why[0] = '\0';
    if (rg_config_parse_file(path, file_key, &ctx) != RG_OK) {
        if (why[0] == '\0')
            snprintf(why, why_len, "cannot read %s", path);
        else {
            char inner[256];
            snprintf(inner, sizeof(inner), "%s", why);
            snprintf(why, why_len, "%s: %s", path, inner);
        }
        return RG_ERR_INVALID;
    }
    snprintf(conf->source, sizeof(conf->source), "%s", path);
    return RG_OK;
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
    char buf[512];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

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
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    snprintf(token, token_len, "%s", buf);
    return RG_OK;
err_close:
    if (fd >= 0)
        close(fd);
    return RG_ERR_REFUSED;
}

static rg_status_t env_key(struct cli_conf *conf, const char *var, const char *key, char *why,
                           size_t why_len)
{
    const char *v = getenv(var);

    return v == NULL || v[0] == '\0' ? RG_OK : set_key(conf, key, v, why, why_len);
}

/* Environment over the file. RGPU_SERVER and RGPU_POOL replace the file's pool (RGPU_SERVER:
 * the servers of the process; RGPU_POOL: a pool that places the job on one). */
static rg_status_t apply_env(struct cli_conf *conf, char *why, size_t why_len)
{
    static const char *const map[][2] = {{"RGPU_TENANT", "tenant"},
                                         {"RGPU_TOKEN", "token"},
                                         {"RGPU_TOKEN_FILE", "token_file"},
                                         {"RGPU_MEM_QUOTA", "mem_quota"},
                                         {"RGPU_POLICY", "policy"},
                                         {"RGPU_CONNECT_TIMEOUT_MS", "connect_timeout_ms"},
                                         {"RGPU_PROBE_TIMEOUT_MS", "probe_timeout_ms"},
                                         {"RGPU_PROBE_SAMPLE", "probe_sample"},
                                         {"RGPU_TRANSPORT", "transport"},
                                         {"RGPU_LANES", "lanes"},
                                         {"RGPU_GPUS", "gpus"}};
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
        st = cli_conf_add_pool(conf, server, why, why_len);
    else if (pool && pool[0])
        st = cli_conf_add_pool(conf, pool, why, why_len);
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

    memset(conf, 0, sizeof(*conf));
    conf->lanes = -1;
    conf->policy = SCHED_SPREAD;
    conf->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    conf->probe_timeout_ms = DEFAULT_PROBE_TIMEOUT_MS;
    conf->probe_sample = DEFAULT_PROBE_SAMPLE;
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
    if (conf->lanes < 0)
        conf->lanes = DEFAULT_LANES;
    if (conf->npool == 0)
        snprintf(conf->pool[conf->npool++], sizeof(conf->pool[0]), "%s", CLI_DEFAULT_SERVER);
    if (conf->transport[0] == '\0')
        snprintf(conf->transport, sizeof(conf->transport), "auto");
    return RG_OK;
}
