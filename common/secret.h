/* Comparing secrets (tokens, their hashes, connection secrets, MACs): the one comparison every
 * secret in the tree goes through, in time that depends only on the length compared (libcrypto's
 * CRYPTO_memcmp, which the compiler cannot turn back into an early exit). */
#ifndef RGPU_COMMON_SECRET_H
#define RGPU_COMMON_SECRET_H

#include <stdbool.h>
#include <stddef.h>

/* true when the len bytes at a and b are equal; the time does not depend on where they differ. */
bool rg_secret_equal(const void *a, const void *b, size_t len);

#endif
