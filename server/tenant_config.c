#include "server/tenant_config.h"

#include "common/config.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_token_hash_hex(const char *token, char hex[65])
{
    uint8_t d[RG_SHA256_LEN];

    rg_sha256(token, strlen(token), d);
    for (int i = 0; i < RG_SHA256_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* ---- [tenant NAME]: one row per key ----------------------------------------------------- */

static bool parse_token(void *obj, const char *value, char *why, size_t why_len)
{
    struct srv_tenant *t = obj;
    size_t n = strlen(value);

    if (t->hashed) {
        snprintf(why, why_len,
                 "token and token_sha256 are both set: keep one (token_sha256 "
                 "is preferred: gpu-server --hash-token TOKEN)");
        return false;
    }
    if (n == 0 || n >= sizeof(t->token)) {
        snprintf(why, why_len,
                 "expected a token of 1 to %zu characters (a longer one: put its "
                 "hash in token_sha256)",
                 sizeof(t->token) - 1);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f) {
            snprintf(why, why_len, "expected a token of printable characters");
            return false;
        }
    memcpy(t->token, value, n + 1);
    return true;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool parse_token_sha256(void *obj, const char *value, char *why, size_t why_len)
{
    struct srv_tenant *t = obj;
    uint8_t d[RG_SHA256_LEN];

    if (t->token[0] != '\0') {
        snprintf(why, why_len,
                 "token and token_sha256 are both set: keep one (token_sha256 "
                 "is preferred)");
        return false;
    }
    if (strlen(value) != 2 * RG_SHA256_LEN)
        goto err;
    for (int i = 0; i < RG_SHA256_LEN; i++) {
        int hi = hex_digit(value[2 * i]), lo = hex_digit(value[2 * i + 1]);
        if (hi < 0 || lo < 0)
            goto err;
        d[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(t->token_sha256, d, sizeof(d));
    t->hashed = true;
    return true;
err:
    snprintf(why, why_len,
             "expected 64 hex digits (0-9, a-f), as gpu-server --hash-token "
             "TOKEN prints them");
    return false;
}

/* "20%", "0.2" or "20" (percent when above 1) as permille in 1..1000: a cap that rounds to
 * 0 would be no cap at all, so it is refused rather than quietly lifted. */
static bool parse_cap(void *obj, const char *value, char *why, size_t why_len)
{
    struct srv_tenant *t = obj;
    size_t digits = strspn(value, "0123456789.");
    const char *rest = value + digits;
    double v;

    while (*rest == ' ')
        rest++;
    if (digits == 0 || (*rest != '\0' && strcmp(rest, "%") != 0) ||
        strchr(value, '.') != strrchr(value, '.'))
        goto err;
    v = strtod(value, NULL);
    if (*rest == '\0' && v <= 1)
        v *= 100;
    if (!(v > 0 && v <= 100))
        goto err;
    if ((uint32_t)(v * 10 + 0.5) == 0) {
        snprintf(why, why_len, "below the smallest cap this server can hold, 0.1%%");
        return false;
    }
    t->cap_permille = (uint32_t)(v * 10 + 0.5);
    return true;
err:
    snprintf(why, why_len, "expected a share of GPU time from 0.1%% to 100%%: 20%%, or 0.2");
    return false;
}

static const char *const tenant_classes[] = {"guaranteed", "best-effort", NULL};

#define T(member) RG_CONF_FIELD(struct srv_tenant, member)
/* [] here against [SRV_TENANT_NKEYS] in the header: a count that drifts does not compile */
const struct rg_conf_key srv_tenant_keys[] = {
    {.name = "token",
     .type = RG_CONF_CUSTOM,
     T(token),
     .parse = parse_token,
     .flags = RG_CONF_SECRET,
     .help = "a token of 1 to 127 printable characters (token_sha256 is preferred)"},
    {.name = "token_sha256",
     .type = RG_CONF_CUSTOM,
     T(token_sha256),
     .parse = parse_token_sha256,
     .flags = RG_CONF_SECRET,
     .help = "64 hex digits from gpu-server --hash-token TOKEN"},
    {.name = "mem_quota", .type = RG_CONF_SIZE, T(mem_quota)},
    {.name = "weight", .type = RG_CONF_INT, T(weight), .min = 1, .max = 1000000, .def = "1"},
    {.name = "cap",
     .type = RG_CONF_CUSTOM,
     T(cap_permille),
     .parse = parse_cap,
     .help = "a share of GPU time from 0.1% to 100%: 20%, or 0.2"},
    {.name = "class",
     .type = RG_CONF_ENUM,
     T(best_effort),
     .names = tenant_classes,
     .def = "guaranteed"},
    {.name = "max_sessions",
     .type = RG_CONF_INT,
     T(max_sessions),
     .min = 1,
     .max = 1000000,
     .zero_word = "unlimited",
     .def = "unlimited"},
};
#undef T
static const struct rg_conf_section tenant_section = {
    .name = "tenant", .named = true, .keys = srv_tenant_keys, .nkeys = SRV_TENANT_NKEYS};

struct srv_tenant *srv_tenant_open(struct srv_tenants *tenants, const char *name, char *why,
                                   size_t why_len)
{
    struct srv_tenant *t;

    for (int i = 0; i < tenants->n; i++)
        if (strcmp(tenants->list[i].name, name) == 0)
            return &tenants->list[i];
    if (name[0] == '\0' || strlen(name) >= sizeof(t->name)) {
        snprintf(why, why_len, "a tenant name is 1 to %zu characters", sizeof(t->name) - 1);
        return NULL;
    }
    if (tenants->n == SRV_MAX_TENANTS) {
        snprintf(why, why_len, "more than %d tenants: a server holds at most %d", SRV_MAX_TENANTS,
                 SRV_MAX_TENANTS);
        return NULL;
    }
    t = &tenants->list[tenants->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    rg_conf_defaults(&tenant_section, t);
    return t;
}

rg_status_t srv_tenant_key(struct srv_tenants *tenants, const char *name, const char *key,
                           const char *value)
{
    char why[256];
    struct srv_tenant *t = srv_tenant_open(tenants, name, why, sizeof(why));

    return t == NULL ? RG_ERR_INVALID
           : rg_conf_set(&tenant_section, t, key, value, why, sizeof(why)) == RG_OK
               ? RG_OK
               : RG_ERR_INVALID;
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
