#include "server/tenant_config.h"

#include "common/config.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void srv_token_hash_hex(const char *token, char hex[65])
{
    uint8_t d[RG_SHA256_LEN];

    rg_sha256(token, strlen(token), d);
    for (int i = 0; i < RG_SHA256_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static bool parse_hex32(const char *text, uint8_t out[32])
{
    if (strlen(text) != 64)
        return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(text + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

static struct srv_tenant *tenant_slot(struct srv_tenants *tenants, const char *name)
{
    for (int i = 0; i < tenants->n; i++)
        if (strcmp(tenants->list[i].name, name) == 0)
            return &tenants->list[i];
    if (tenants->n == SRV_MAX_TENANTS || name[0] == '\0' || strlen(name) >= 64)
        return NULL;
    memset(&tenants->list[tenants->n], 0, sizeof(tenants->list[0]));
    snprintf(tenants->list[tenants->n].name, sizeof(tenants->list[0].name), "%s", name);
    tenants->list[tenants->n].weight = 1;
    return &tenants->list[tenants->n++];
}

/* "20%", "0.2" or "20" (percent when above 1) as permille in 1..1000. */
static bool parse_cap(const char *text, uint32_t *permille_p)
{
    char *end;
    double v = strtod(text, &end);

    while (*end == ' ')
        end++;
    if (end == text || (*end != '\0' && strcmp(end, "%") != 0))
        return false;
    if (*end == '\0' && v <= 1)
        v *= 100;
    if (!(v > 0 && v <= 100))
        return false;
    *permille_p = (uint32_t)(v * 10 + 0.5);
    return true;
}

static bool parse_uint(const char *text, uint32_t min, uint32_t *v_p)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (end == text || *end != '\0' || v < min || v > 1000000)
        return false;
    *v_p = (uint32_t)v;
    return true;
}

/* The compute and admission keys of a tenant. */
static rg_status_t policy_key(struct srv_tenant *t, const char *key, const char *value)
{
    if (strcmp(key, "weight") == 0)
        return parse_uint(value, 1, &t->weight) ? RG_OK : RG_ERR_INVALID;
    if (strcmp(key, "cap") == 0)
        return parse_cap(value, &t->cap_permille) ? RG_OK : RG_ERR_INVALID;
    if (strcmp(key, "max_sessions") == 0) { /* 0 is refused: "unlimited" says it outright */
        if (strcmp(value, "unlimited") == 0) {
            t->max_sessions = 0;
            return RG_OK;
        }
        return parse_uint(value, 1, &t->max_sessions) ? RG_OK : RG_ERR_INVALID;
    }
    if (strcmp(key, "class") == 0) {
        if (strcmp(value, "guaranteed") != 0 && strcmp(value, "best-effort") != 0)
            return RG_ERR_INVALID;
        t->best_effort = strcmp(value, "best-effort") == 0;
        return RG_OK;
    }
    return RG_ERR_INVALID;
}

rg_status_t srv_tenant_key(struct srv_tenants *tenants, const char *name, const char *key,
                           const char *value)
{
    struct srv_tenant *t = tenant_slot(tenants, name);

    if (t == NULL)
        return RG_ERR_INVALID;
    if (strcmp(key, "token") == 0) {
        if (strlen(value) >= sizeof(t->token))
            return RG_ERR_INVALID;
        snprintf(t->token, sizeof(t->token), "%s", value);
        return RG_OK;
    }
    if (strcmp(key, "token_sha256") == 0) {
        if (!parse_hex32(value, t->token_sha256))
            return RG_ERR_INVALID;
        t->hashed = true;
        return RG_OK;
    }
    if (strcmp(key, "mem_quota") == 0)
        return rg_parse_size(value, &t->mem_quota) ? RG_OK : RG_ERR_INVALID;
    return policy_key(t, key, value);
}

static rg_status_t tenant_section_key(void *arg, const char *section, const char *key,
                                      const char *value)
{
    /* A tenant setting that does not parse fails the whole load: ignored, a bad token_sha256
     * left the tenant with no token at all, and a bad mem_quota with no quota. */
    if (strncmp(section, "tenant ", 7) == 0)
        return srv_tenant_key(arg, section + 7, key, value);
    return RG_OK;
}

rg_status_t srv_tenants_load(const char *path, struct srv_tenants *tenants)
{
    memset(tenants, 0, sizeof(*tenants));
    return rg_config_parse_file(path, tenant_section_key, tenants);
}

/* name into a zero-padded field of SRV_TENANT_NAME bytes; false (and zeros) when it does not
 * fit, so that it matches no tenant. */
static bool name_field(char field[sizeof(((struct srv_tenant *)0)->name)], const char *name)
{
    size_t cap = sizeof(((struct srv_tenant *)0)->name), n = name ? strnlen(name, cap) : 0;

    memset(field, 0, cap);
    if (n == cap)
        return false;
    memcpy(field, name, n);
    return true;
}

/* The same work whatever the peer sent, so that the time to refuse tells nothing (docs/
 * security.md): every tenant's name is compared, in full and in constant time; the token given
 * is hashed; so is the plain token of the tenant named, or a dummy of a typical token's length
 * (a tenant with token_sha256, or none named); and the two digests are compared in constant
 * time. Only the reason for the log differs. */
const struct srv_tenant *srv_tenant_auth(const struct srv_tenants *tenants, const char *name,
                                         const char *token, const char **why_p)
{
    static const char dummy[] = "rgpu-dummy-token-for-the-unknown";
    char want[sizeof(((struct srv_tenant *)0)->name)], have[sizeof(want)];
    uint8_t given[RG_SHA256_LEN], plain[RG_SHA256_LEN];
    const struct srv_tenant *found = NULL;
    bool fits = name_field(want, name), ok;

    for (int i = 0; i < tenants->n; i++) {
        name_field(have, tenants->list[i].name);
        if (rg_secret_equal(have, want, sizeof(want)))
            found = &tenants->list[i];
    }
    token = token ? token : "";
    rg_sha256(token, strlen(token), given);
    if (found != NULL && !found->hashed)
        rg_sha256(found->token, strlen(found->token), plain);
    else
        rg_sha256(dummy, sizeof(dummy) - 1, plain);
    ok = rg_secret_equal(given, found != NULL && found->hashed ? found->token_sha256 : plain,
                         RG_SHA256_LEN);
    if (found != NULL && fits && ok)
        return found;
    *why_p = found != NULL && fits
                 ? "authentication failed: wrong token for the tenant"
                 : "authentication failed: unknown tenant (set RGPU_TENANT and RGPU_TOKEN)";
    return NULL;
}
