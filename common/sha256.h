/* SHA-256 (FIPS 180-4, computed by OpenSSL's libcrypto): tenant tokens stored hashed in the
 * server config, the content hash of module images in the module cache (client and server),
 * NVRTC's compile cache keys. */
#ifndef RGPU_COMMON_SHA256_H
#define RGPU_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define RG_SHA256_LEN 32

/* Incremental form: init, update with any number of pieces, final (which frees the state:
 * every init must reach a final). */
struct rg_sha256 {
    void *evp; /* EVP_MD_CTX */
};

void rg_sha256_init(struct rg_sha256 *c);
void rg_sha256_update(struct rg_sha256 *c, const void *data, size_t len);
void rg_sha256_final(struct rg_sha256 *c, uint8_t out[RG_SHA256_LEN]);

/* One-shot: the hash of len bytes at data. */
void rg_sha256(const void *data, size_t len, uint8_t out[RG_SHA256_LEN]);
/* out gets 64 lowercase hex digits and a NUL. */
void rg_sha256_hex(const uint8_t hash[RG_SHA256_LEN], char out[2 * RG_SHA256_LEN + 1]);

#endif
