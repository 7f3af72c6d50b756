/* SHA-256 by OpenSSL's libcrypto, which uses the CPU's SHA instructions where there are some:
 * module images of hundreds of MiB are hashed on both sides at every program start (a portable
 * C version ran at about 240 MB/s). */
#include "common/sha256.h"

#include <openssl/evp.h>
#include <stdlib.h>

void rg_sha256_init(struct rg_sha256 *c)
{
    c->evp = EVP_MD_CTX_new();
    if (c->evp == NULL || EVP_DigestInit_ex(c->evp, EVP_sha256(), NULL) != 1)
        abort(); /* out of memory: nothing sensible to hash with */
}

void rg_sha256_update(struct rg_sha256 *c, const void *data, size_t len)
{
    if (len > 0 && EVP_DigestUpdate(c->evp, data, len) != 1)
        abort();
}

void rg_sha256_final(struct rg_sha256 *c, uint8_t out[RG_SHA256_LEN])
{
    unsigned n = 0;

    if (EVP_DigestFinal_ex(c->evp, out, &n) != 1 || n != RG_SHA256_LEN)
        abort();
    EVP_MD_CTX_free(c->evp);
    c->evp = NULL;
}

void rg_sha256(const void *data, size_t len, uint8_t out[RG_SHA256_LEN])
{
    unsigned n = 0;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != RG_SHA256_LEN)
        abort();
}

void rg_sha256_hex(const uint8_t hash[RG_SHA256_LEN], char out[2 * RG_SHA256_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < RG_SHA256_LEN; i++) {
        out[2 * i] = digits[hash[i] >> 4];
        out[2 * i + 1] = digits[hash[i] & 15];
    }
    out[2 * RG_SHA256_LEN] = '\0';
}
