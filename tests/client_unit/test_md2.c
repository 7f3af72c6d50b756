/* MD2 against the RFC 1319 test suite (appendix A.5), and HMAC-MD2 against its definition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "client/api/md2.h"

static void hex(const uint8_t d[MD2_DIGEST], char out[2 * MD2_DIGEST + 1])
{
    for (int i = 0; i < MD2_DIGEST; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_rfc1319_vectors(void **state)
{
    static const char *const v[][2] = {
        {"", "8350e5a3e24c153df2275c9f80692773"},
        {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
        {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
        {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
        {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "da33def2a42df13975352846c30338cd"},
        {"1234567890123456789012345678901234567890123456789012345678901234567890123456"
         "7890",
         "d5976f79d83d3a0dc9806c3c66f3efd8"},
    };
    uint8_t d[MD2_DIGEST];
    char h[2 * MD2_DIGEST + 1];

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        md2(v[i][0], strlen(v[i][0]), d);
        hex(d, h);
        assert_string_equal(h, v[i][1]);
    }
}

/* Feeding the message in odd pieces gives the same digest as one call. */
static void test_incremental(void **state)
{
    const char *m = "12345678901234567890123456789012345678901234567890123456789012345678901234"
                    "567890";
    uint8_t one[MD2_DIGEST], pieces[MD2_DIGEST];
    struct md2_ctx ctx;

    md2(m, strlen(m), one);
    md2_init(&ctx);
    for (size_t off = 0, n = 1; off < strlen(m); off += n, n = n % 7 + 3) {
        size_t left = strlen(m) - off;
        md2_update(&ctx, m + off, n < left ? n : left);
    }
    md2_final(&ctx, pieces);
    assert_memory_equal(one, pieces, MD2_DIGEST);
}

/* HMAC = H((K ^ opad) || H((K ^ ipad) || m)), K zero-padded to MD2's 16-byte block. */
static void hmac_by_definition(const uint8_t *key, size_t key_len, const char *m,
                               uint8_t out[MD2_DIGEST])
{
    uint8_t k[MD2_BLOCK] = {0}, buf[MD2_BLOCK + 256], inner[MD2_DIGEST];
    size_t len = strlen(m);

    memcpy(k, key, key_len);
    for (int i = 0; i < MD2_BLOCK; i++)
        buf[i] = k[i] ^ 0x36;
    memcpy(buf + MD2_BLOCK, m, len);
    md2(buf, MD2_BLOCK + len, inner);
    for (int i = 0; i < MD2_BLOCK; i++)
        buf[i] = k[i] ^ 0x5c;
    memcpy(buf + MD2_BLOCK, inner, MD2_DIGEST);
    md2(buf, MD2_BLOCK + MD2_DIGEST, out);
}

static void test_hmac(void **state)
{
    static const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
    const char *m = "what do ya want for nothing?";
    uint8_t want[MD2_DIGEST], got[MD2_DIGEST];
    struct md2_part parts[3] = {{m, 5}, {m + 5, 0}, {m + 5, strlen(m) - 5}};

    hmac_by_definition(key, sizeof(key), m, want);
    hmac_md2(key, sizeof(key), parts, 3, got);
    assert_memory_equal(want, got, MD2_DIGEST);

    hmac_by_definition((const uint8_t *)"Jefe", 4, m, want);
    hmac_md2("Jefe", 4, &(struct md2_part){m, strlen(m)}, 1, got);
    assert_memory_equal(want, got, MD2_DIGEST);
}

/* A key longer than the block is hashed first (RFC 2104 §2). */
static void test_hmac_long_key(void **state)
{
    uint8_t key[40], hashed[MD2_DIGEST], a[MD2_DIGEST], b[MD2_DIGEST];
    struct md2_part part = {"abc", 3};

    for (int i = 0; i < 40; i++)
        key[i] = (uint8_t)i;
    md2(key, sizeof(key), hashed);
    hmac_md2(key, sizeof(key), &part, 1, a);
    hmac_md2(hashed, sizeof(hashed), &part, 1, b);
    assert_memory_equal(a, b, MD2_DIGEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc1319_vectors),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_hmac),
        cmocka_unit_test(test_hmac_long_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
