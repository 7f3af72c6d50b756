/* MD2 message digest, written from RFC 1319, and HMAC-MD2 after RFC 2104. */
#include "client/api/md2.h"

#include <string.h>

/* RFC 1319 §3.2: a permutation of 0..255 built from the digits of pi. */
static const uint8_t md2_pi_subst[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20,
};

void md2_init(struct md2_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
}

/* One 16-byte block: update the running checksum (§3.2) and the state (§3.4). */
static void md2_block(struct md2_ctx *ctx, const uint8_t block[MD2_BLOCK])
{
    uint8_t *x = ctx->state;
    uint8_t t = ctx->checksum[MD2_BLOCK - 1];

    for (int j = 0; j < MD2_BLOCK; j++) {
        ctx->checksum[j] ^= md2_pi_subst[block[j] ^ t];
        t = ctx->checksum[j];
    }
    for (int j = 0; j < MD2_BLOCK; j++) {
        x[16 + j] = block[j];
        x[32 + j] = (uint8_t)(block[j] ^ x[j]);
    }
    t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = x[k] ^= md2_pi_subst[t];
        t = (uint8_t)(t + round);
    }
}

void md2_update(struct md2_ctx *ctx, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len > 0) {
        size_t n = MD2_BLOCK - ctx->buf_len;
        if (n > len)
            n = len;
        memcpy(ctx->buf + ctx->buf_len, p, n);
        ctx->buf_len += n;
        p += n;
        len -= n;
        if (ctx->buf_len == MD2_BLOCK) {
            md2_block(ctx, ctx->buf);
            ctx->buf_len = 0;
        }
    }
}

void md2_final(struct md2_ctx *ctx, uint8_t digest[MD2_DIGEST])
{
    uint8_t pad = (uint8_t)(MD2_BLOCK - ctx->buf_len); /* 1..16, §3.1 */
    uint8_t checksum[MD2_BLOCK];

    memset(ctx->buf + ctx->buf_len, pad, pad);
    md2_block(ctx, ctx->buf);
    memcpy(checksum, ctx->checksum, MD2_BLOCK); /* §3.2: append the checksum as a block */
    md2_block(ctx, checksum);
    memcpy(digest, ctx->state, MD2_DIGEST);
    memset(ctx, 0, sizeof(*ctx));
}

void md2(const void *data, size_t len, uint8_t digest[MD2_DIGEST])
{
    struct md2_ctx ctx;

    md2_init(&ctx);
    md2_update(&ctx, data, len);
    md2_final(&ctx, digest);
}

void hmac_md2(const void *key, size_t key_len, const struct md2_part *parts, size_t n_parts,
              uint8_t mac[MD2_DIGEST])
{
    uint8_t k[MD2_BLOCK] = {0}, pad[MD2_BLOCK], inner[MD2_DIGEST];
    struct md2_ctx ctx;

    if (key_len > MD2_BLOCK)
        md2(key, key_len, k);
    else
        memcpy(k, key, key_len);

    for (int i = 0; i < MD2_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    md2_init(&ctx);
    md2_update(&ctx, pad, sizeof(pad));
    for (size_t i = 0; i < n_parts; i++)
        md2_update(&ctx, parts[i].data, parts[i].len);
    md2_final(&ctx, inner);

    for (int i = 0; i < MD2_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    md2_init(&ctx);
    md2_update(&ctx, pad, sizeof(pad));
    md2_update(&ctx, inner, sizeof(inner));
    md2_final(&ctx, mac);
}
