/* SHA-256: the FIPS 180-4 examples, and the incremental form agrees with the one-shot form
 * whatever the split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/sha256.h"

static void hex_of(const void *data, size_t len, char hex[65])
{
    uint8_t d[RG_SHA256_LEN];

    rg_sha256(data, len, d);
    rg_sha256_hex(d, hex);
}

static void test_fips_examples(void **state)
{
    static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    char hex[65], *million = malloc(1000000);

    hex_of("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    hex_of("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of(two_blocks, strlen(two_blocks), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    assert_non_null(million);
    memset(million, 'a', 1000000);
    hex_of(million, 1000000, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

static void test_incremental_matches(void **state)
{
    uint8_t data[1000], whole[RG_SHA256_LEN], parts[RG_SHA256_LEN];
    static const size_t splits[] = {0, 1, 55, 56, 63, 64, 65, 127, 128, 500, 999, 1000};

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7 + 3);
    for (size_t len = 0; len <= sizeof(data); len += 37) {
        rg_sha256(data, len, whole);
        for (size_t s = 0; s < sizeof(splits) / sizeof(splits[0]); s++) {
            struct rg_sha256 c;
            size_t cut = splits[s] < len ? splits[s] : len;
            rg_sha256_init(&c);
            rg_sha256_update(&c, data, cut);
            rg_sha256_update(&c, data + cut, len - cut);
            rg_sha256_final(&c, parts);
            assert_memory_equal(whole, parts, RG_SHA256_LEN);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_examples),
        cmocka_unit_test(test_incremental_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
