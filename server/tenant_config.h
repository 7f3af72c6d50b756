/* Tenants from the server config: "[tenant NAME]" sections with a token, a memory quota per GPU,
 * a compute weight, an optional cap on its GPU-time share, a class and a session limit.
 * With no tenant configured the server is open (any client, no quota, one class): it says so
 * at warn level, and require_tenants = yes refuses to start (or reload) that way. */
#ifndef RGPU_SERVER_TENANT_CONFIG_H
#define RGPU_SERVER_TENANT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/status.h"

#define SRV_MAX_TENANTS 64

struct srv_tenant {
    char name[64];
    char token[128];          /* plain token (accepted, but token_sha256 is preferred) */
    uint8_t token_sha256[32]; /* SHA-256 of the token, from "token_sha256 = <hex>" */
    bool hashed;
    uint64_t mem_quota;    /* bytes per GPU; 0 = the whole GPU */
    uint32_t weight;       /* compute weight (default 1) */
    uint32_t cap_permille; /* hard cap on its GPU-time share ("cap = 20%"); 0 = none */
    bool best_effort;      /* "class = best-effort" (default guaranteed) */
    uint32_t max_sessions; /* 0 = no limit */
};

struct srv_tenants {
    struct srv_tenant list[SRV_MAX_TENANTS];
    int n;
};

/* The keys of a "[tenant NAME]" section (token, token_sha256, mem_quota, weight, cap, class,
 * max_sessions), one row each (common/config.h); server/config.c puts them in the server's
 * schema. */
#define SRV_TENANT_NKEYS 7
extern const struct rg_conf_key srv_tenant_keys[SRV_TENANT_NKEYS];
/* The tenant called name, added (with its defaults) when new; NULL with the reason in why when
 * the name is empty or too long, or SRV_MAX_TENANTS are there already. */
struct srv_tenant *srv_tenant_open(struct srv_tenants *tenants, const char *name, char *why,
                                   size_t why_len);
/* One "key = value" of tenant name (opened as above), checked as in a file: an unknown key or a
 * value that does not parse is RG_ERR_INVALID. For tests and tools; files go through the
 * parser, which also refuses a second [tenant NAME] of one name. */
rg_status_t srv_tenant_key(struct srv_tenants *tenants, const char *name, const char *key,
                           const char *value);
/* The tenant a Hello names, if its token matches (compared in constant time); NULL and a reason
 * otherwise. */
const struct srv_tenant *srv_tenant_auth(const struct srv_tenants *tenants, const char *name,
                                         const char *token, const char **why_p);
/* The hex SHA-256 of token (65 bytes with the NUL), for "token_sha256" in the config. */
void srv_token_hash_hex(const char *token, char hex[65]);
#endif
