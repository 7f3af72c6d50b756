#include "common/secret.h"

#include <openssl/crypto.h>

bool rg_secret_equal(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}
