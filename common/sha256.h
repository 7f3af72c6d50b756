/* SHA-256 (FIPS 180-4): tenant tokens stored hashed in the server config, and the content hash
 * of module images in the module cache (client and server). */
#ifndef RGPU_COMMON_SHA256_H
#define RGPU_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define RG_SHA256_LEN 32

/* Incremental form: init, update with any number of pieces, final. */
struct rg_sha256 {
    uint32_t h[8];
    uint8_t block[64];
    size_t fill;    /* bytes in block */
    uint64_t total; /* bytes hashed so far */
};

void rg_sha256_init(struct rg_sha256 *c);
void rg_sha256_update(struct rg_sha256 *c, const void *data, size_t len);
void rg_sha256_final(struct rg_sha256 *c, uint8_t out[RG_SHA256_LEN]);

/* One-shot: the hash of len bytes at data. */
void rg_sha256(const void *data, size_t len, uint8_t out[RG_SHA256_LEN]);
/* out gets 64 lowercase hex digits and a NUL. */
void rg_sha256_hex(const uint8_t hash[RG_SHA256_LEN], char out[2 * RG_SHA256_LEN + 1]);

#endif
