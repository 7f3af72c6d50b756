/* SHA-256 (FIPS 180-4), for tenant tokens stored hashed in the server config. */
#ifndef RGPU_SERVER_SHA256_H
#define RGPU_SERVER_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SRV_SHA256_LEN 32

void srv_sha256(const void *data, size_t len, uint8_t out[SRV_SHA256_LEN]);

#endif
