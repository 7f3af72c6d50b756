/* Backoff with jitter (common/backoff.h), for clients refused for load: each wait lies in the
 * upper half of its step, steps double up to the cap, a server's hint raises the step, and two
 * clients refused together do not wait alike. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "common/backoff.h"

static void test_steps(void **state)
{
    struct rg_backoff b;
    int step = 50;

    rg_backoff_init(&b, 50, 1000);
    for (int i = 0; i < 10; i++) {
        int w = rg_backoff_next(&b, 0);
        assert_true(w >= step / 2 && w < step);
        step = step * 2 < 1000 ? step * 2 : 1000;
    }
    rg_backoff_init(&b, 50, 1000);
    int w = rg_backoff_next(&b, 400); /* the server's hint */
    assert_true(w >= 200 && w < 400);
    w = rg_backoff_next(&b, 5000); /* capped */
    assert_true(w >= 500 && w < 1000);
}

static void test_jitter(void **state)
{
    struct rg_backoff a, b;
    int same = 0;

    rg_backoff_init(&a, 1000, 1000);
    rg_backoff_init(&b, 1000, 1000);
    for (int i = 0; i < 20; i++)
        same += rg_backoff_next(&a, 0) == rg_backoff_next(&b, 0);
    assert_true(same < 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_jitter),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
