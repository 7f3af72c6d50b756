/* MD2 (RFC 1319) and HMAC-MD2 (RFC 2104 with MD2's 16-byte block), for the INTEGRITY_CHECK
 * export table. Hidden: never exported from libcuda.so.1. */
#ifndef RGPU_CLIENT_MD2_H
#define RGPU_CLIENT_MD2_H

#include <stddef.h>
#include <stdint.h>

#define MD2_BLOCK  16
#define MD2_DIGEST 16

struct md2_ctx {
    uint8_t state[48]; /* X: 16 bytes of state, then the block, then state ^ block */
    uint8_t checksum[MD2_BLOCK];
    uint8_t buf[MD2_BLOCK];
    size_t buf_len;
};

__attribute__((visibility("hidden"))) void md2_init(struct md2_ctx *ctx);
__attribute__((visibility("hidden"))) void md2_update(struct md2_ctx *ctx, const void *data,
                                                      size_t len);
__attribute__((visibility("hidden"))) void md2_final(struct md2_ctx *ctx,
                                                     uint8_t digest[MD2_DIGEST]);
__attribute__((visibility("hidden"))) void md2(const void *data, size_t len,
                                               uint8_t digest[MD2_DIGEST]);

/* HMAC-MD2 over a message given in pieces (n_parts (data, len) pairs), so callers need not
 * assemble one buffer. Keys longer than the block are hashed first, as RFC 2104 says. */
struct md2_part {
    const void *data;
    size_t len;
};
__attribute__((visibility("hidden"))) void hmac_md2(const void *key, size_t key_len,
                                                    const struct md2_part *parts, size_t n_parts,
                                                    uint8_t mac[MD2_DIGEST]);

#endif
