/* The one escaping function for strings a peer sent (common/log.h rg_log_escape): a newline,
 * backslashes and bytes outside printable ASCII become \xNN, so no peer can start a forged log
 * line; a string too long is cut and says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "common/log.h"

static void test_escapes(void **state)
{
    char out[64];

    assert_string_equal(rg_log_escape(out, sizeof(out), "alpha-1"), "alpha-1");
    assert_string_equal(rg_log_escape(out, sizeof(out), "a\nFORGED"), "a\\x0aFORGED");
    assert_string_equal(rg_log_escape(out, sizeof(out), "it's \"x\" \\ y"), "it's \"x\" \\x5c y");
    assert_string_equal(rg_log_escape(out, sizeof(out), "\x1b[31m\xff"), "\\x1b[31m\\xff");
    assert_string_equal(rg_log_escape(out, sizeof(out), NULL), "");
    assert_string_equal(rg_log_escape(out, sizeof(out), ""), "");
}

static void test_cut(void **state)
{
    char out[12], big[200];

    assert_string_equal(rg_log_escape(out, sizeof(out), "0123456789abcdef"), "01234567...");
    assert_string_equal(rg_log_escape(out, sizeof(out), "01234567890"), "01234567890");
    assert_string_equal(rg_log_escape(out, 4, "abcdef"), "...");
    assert_string_equal(rg_log_escape(out, 3, "abcdef"), "..");
    assert_string_equal(rg_log_escape(out, 1, "abcdef"), "");
    memset(big, '\n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(strlen(RG_PEER_STR(big)), RG_PEER_STR_MAX - 1);
    assert_null(strchr(RG_PEER_STR(big), '\n'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cut),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
