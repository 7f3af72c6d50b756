/* Unique ids bound to the tenant: the worker that makes an id writes a MAC into its last
 * NCCL_WIRE_MAC_LEN bytes (which NCCL leaves zero), and every worker checks and clears it before
 * NCCL sees the id (docs/nccl.md, "Who may join"). */
#include <string.h>

#include "common/secret.h"
#include "server/nccl_internal.h"

static uint8_t key_base[RG_SHA256_LEN]; /* SHA-256 of nccl_secret */
static const struct srv_tenants *tenants;

void nccl_id_configure(const struct srv_config *cfg)
{
    rg_sha256(cfg->nccl_secret, strlen(cfg->nccl_secret), key_base);
    tenants = &cfg->tenants;
}

/* MAC over the id's NCCL part with the key SHA-256(nccl_secret's hash, tenant, its token hash):
 * a worker of another tenant, or of a server with another secret, computes another one. */
void nccl_id_mac(const struct srv_session *s, const uint8_t *id, uint8_t mac[RG_SHA256_LEN])
{
    const struct srv_tenant *t = NULL;
    struct rg_sha256 c;
    uint8_t token[RG_SHA256_LEN] = {0};

    for (int i = 0; tenants != NULL && i < tenants->n && t == NULL; i++)
        if (strcmp(tenants->list[i].name, s->tenant) == 0)
            t = &tenants->list[i];
    if (t != NULL && t->hashed)
        memcpy(token, t->token_sha256, sizeof(token));
    else if (t != NULL)
        rg_sha256(t->token, strlen(t->token), token);
    rg_sha256_init(&c);
    rg_sha256_update(&c, "rgpu-nccl-id", 12);
    rg_sha256_update(&c, key_base, sizeof(key_base));
    rg_sha256_update(&c, s->tenant, strlen(s->tenant) + 1);
    rg_sha256_update(&c, token, sizeof(token));
    rg_sha256_update(&c, id, NCCL_WIRE_MAC_OFFSET);
    rg_sha256_final(&c, mac);
}

bool nccl_id_check(const struct srv_session *s, ncclUniqueId *id)
{
    uint8_t mac[RG_SHA256_LEN];
    uint8_t *tail = (uint8_t *)id->internal + NCCL_WIRE_MAC_OFFSET;
    bool ok;

    nccl_id_mac(s, (const uint8_t *)id->internal, mac);
    ok = rg_secret_equal(mac, tail, NCCL_WIRE_MAC_LEN);
    memset(tail, 0, NCCL_WIRE_MAC_LEN);
    return ok;
}
