/* The client's configuration: RGPU_CONFIG's [client] section, then RGPU_* variables, then
 * defaults. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "client/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

#define DEFAULT_SERVER "127.0.0.1:7070"
#define DEFAULT_LANES  4 /* measured on the H100 host: see client/lanes.c */

/* ---- configuration ---------------------------------------------------------------------- */

/* A size (rg_parse_size); 0 if malformed (then the tenant's quota applies). */
static uint64_t parse_size(const char *text)
{
    uint64_t v;

    if (!rg_parse_size(text, &v)) {
        rg_error("mem_quota '%s' is not a size (e.g. 4GiB); asking for the tenant's quota", text);
        return 0;
    }
    return v;
}

static rg_status_t conf_key(void *arg, const char *section, const char *key, const char *value)
{
    struct cli_conf *conf = arg;

    if (section[0] != '\0' && strcmp(section, "client") != 0)
        return RG_OK;
    if (strcmp(key, "server") == 0) /* repeated: one more server (one more session) */
        snprintf(conf->server + strlen(conf->server), sizeof(conf->server) - strlen(conf->server),
                 "%s%s", conf->server[0] ? "," : "", value);
    else if (strcmp(key, "tenant") == 0)
        snprintf(conf->tenant, sizeof(conf->tenant), "%s", value);
    else if (strcmp(key, "token") == 0)
        snprintf(conf->token, sizeof(conf->token), "%s", value);
    else if (strcmp(key, "transport") == 0)
        snprintf(conf->transport, sizeof(conf->transport), "%s", value);
    else if (strcmp(key, "mem_quota") == 0)
        conf->mem_quota = parse_size(value);
    else if (strcmp(key, "lanes") == 0)
        conf->lanes = atoi(value);
    return RG_OK;
}

void cli_conf_load(struct cli_conf *conf)
{
    const char *path = getenv("RGPU_CONFIG");
    const char *env;

    memset(conf, 0, sizeof(*conf));
    conf->lanes = -1;
    if (path != NULL && path[0] != '\0' && rg_config_parse_file(path, conf_key, conf) != RG_OK)
        rg_error("cannot read config file %s (RGPU_CONFIG)", path);
    if ((env = getenv("RGPU_SERVER")) != NULL && env[0] != '\0')
        snprintf(conf->server, sizeof(conf->server), "%s", env);
    if ((env = getenv("RGPU_TENANT")) != NULL)
        snprintf(conf->tenant, sizeof(conf->tenant), "%s", env);
    if ((env = getenv("RGPU_TOKEN")) != NULL)
        snprintf(conf->token, sizeof(conf->token), "%s", env);
    if ((env = getenv("RGPU_MEM_QUOTA")) != NULL && env[0] != '\0')
        conf->mem_quota = parse_size(env);
    if ((env = getenv("RGPU_TRANSPORT")) != NULL && env[0] != '\0')
        snprintf(conf->transport, sizeof(conf->transport), "%s", env);
    if ((env = getenv("RGPU_LANES")) != NULL && env[0] != '\0')
        conf->lanes = atoi(env);
    if (conf->lanes < 0)
        conf->lanes = DEFAULT_LANES;
    if (conf->server[0] == '\0')
        snprintf(conf->server, sizeof(conf->server), "%s", DEFAULT_SERVER);
    if (conf->transport[0] == '\0')
        snprintf(conf->transport, sizeof(conf->transport), "auto");
}
