/* client/api/image_params.c: kernel parameter layouts read from nvcc's output (a cubin, a fatbin,
 * a fatbin of PTX only), and images cut short or damaged read safely (under ASan in CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/api/image_params.h"

static void *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* name's layout in image is n parameters at off[i] of size[i]. */
static void expect_layout(const void *image, size_t len, const char *name, unsigned n,
                          const uint32_t *off, const uint32_t *size)
{
    uint32_t *o = NULL, *s = NULL;
    unsigned got;

    assert_true(cli_image_kernel_params(image, len, name, &got, &o, &s));
    assert_int_equal(got, n);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(o[i], off[i]);
        assert_int_equal(s[i], size[i]);
    }
    free(o);
    free(s);
}

/* What the C ABI gives (int, double *, char, Three, Wide, short) and the rest; the tensor map
 * and aligned32 as nvcc 13.0 places them (offsets within the parameter bank). */
static void expect_all(const void *image, size_t len)
{
    static const uint32_t mixed_off[] = {0, 8, 16, 17, 32, 80}, mixed_size[] = {4, 8, 1, 3, 48, 2};
    static const uint32_t wide_off[] = {0, 48, 96, 144}, wide_size[] = {48, 48, 48, 8};
    static const uint32_t fill_off[] = {0, 8}, fill_size[] = {8, 4};
    static const uint32_t tmap_off[] = {0, 112, 240}, tmap_size[] = {1, 128, 8};
    static const uint32_t a32_off[] = {0, 16, 48}, a32_size[] = {1, 32, 2};
    uint32_t *o, *s;
    unsigned n;

    expect_layout(image, len, "mixed", 6, mixed_off, mixed_size);
    expect_layout(image, len, "wide", 4, wide_off, wide_size);
    expect_layout(image, len, "_Z4fillIfEvPT_S0_", 2, fill_off, fill_size);
    expect_layout(image, len, "none", 0, NULL, NULL);
    expect_layout(image, len, "tensor_map", 3, tmap_off, tmap_size);
    expect_layout(image, len, "aligned32", 3, a32_off, a32_size);
    assert_false(cli_image_kernel_params(image, len, "absent", &n, &o, &s));
    assert_false(cli_image_kernel_params(image, len, "mixe", &n, &o, &s));
}

static void test_cubin(void **state)
{
    size_t len;
    void *image = read_all(PARAMS_CUBIN, &len);

    expect_all(image, len);
    free(image);
}

static void test_fatbin(void **state)
{
    size_t len;
    void *image = read_all(PARAMS_FATBIN, &len);
    uint8_t *shifted = malloc(len + 1);

    expect_all(image, len);
    memcpy(shifted + 1, image, len); /* an image need not be aligned */
    expect_all(shifted + 1, len);
    free(shifted);
    free(image);
}

/* A fatbin of PTX only (compressed, and no layout in PTX): nothing read, the client asks. */
static void test_ptx_only(void **state)
{
    size_t len;
    void *image = read_all(PARAMS_PTX_FATBIN, &len);
    uint32_t *o, *s;
    unsigned n;

    assert_false(cli_image_kernel_params(image, len, "mixed", &n, &o, &s));
    free(image);
}

/* Every prefix of the image, and damaged bytes everywhere: never a read outside it, and any
 * layout found is in order. */
static void test_damaged(void **state)
{
    const char *names[] = {"mixed", "wide", "none", "_Z4fillIfEvPT_S0_", "tensor_map"};
    size_t len;
    uint8_t *image = read_all(PARAMS_CUBIN, &len), *copy = malloc(len);
    uint32_t *o, *s;
    unsigned n, seed = 12345;

    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *p = malloc(cut + 1); /* exactly cut bytes for ASan; +1 for malloc(0) */

        memcpy(p, image, cut);
        for (size_t k = 0; k < 5; k++)
            if (cli_image_kernel_params(p, cut, names[k], &n, &o, &s)) {
                free(o);
                free(s);
            }
        free(p);
    }
    for (int round = 0; round < 20000; round++) {
        memcpy(copy, image, len);
        for (int k = 0; k < 4; k++) {
            seed = seed * 1103515245u + 12345u;
            copy[(seed >> 8) % len] ^= (uint8_t)(1u << (seed % 8));
        }
        if (cli_image_kernel_params(copy, len, names[round % 5], &n, &o, &s)) {
            assert_true(n <= 1024);
            for (unsigned i = 1; i < n; i++) /* in order, not overlapping */
                assert_true(o[i] >= o[i - 1] + (size_t)s[i - 1]);
            free(o);
            free(s);
        }
    }
    free(copy);
    free(image);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cubin),
        cmocka_unit_test(test_fatbin),
        cmocka_unit_test(test_ptx_only),
        cmocka_unit_test(test_damaged),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
