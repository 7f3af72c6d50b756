/* rg_array_grow: grows only when full, doubles from the first capacity, keeps the contents,
 * and refuses a capacity whose size would not fit in a size_t, leaving the array as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/array_grow.h"

static void test_doubles_when_full(void **state)
{
    int *a = NULL;
    size_t cap = 0, n = 0;

    (void)state;
    for (int i = 0; i < 100; i++) {
        assert_true(rg_array_grow((void **)&a, &cap, n, sizeof(*a), 4));
        a[n++] = i;
        assert_true(cap >= n);
    }
    assert_int_equal(cap, 128); /* 4, 8, ..., 128 */
    for (int i = 0; i < 100; i++)
        assert_int_equal(a[i], i);
    assert_true(rg_array_grow((void **)&a, &cap, 50, sizeof(*a), 4)); /* room left: no change */
    assert_int_equal(cap, 128);
    free(a);
}

static void test_overflow_refused(void **state)
{
    char one = 7, *a = &one;
    size_t cap = SIZE_MAX / 2 + 1;

    (void)state;
    assert_false(rg_array_grow((void **)&a, &cap, cap, 1, 16));
    assert_ptr_equal(a, &one);
    assert_int_equal(cap, SIZE_MAX / 2 + 1);
    cap = SIZE_MAX / 16;
    assert_false(rg_array_grow((void **)&a, &cap, cap, 16, 16));
    assert_ptr_equal(a, &one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doubles_when_full),
        cmocka_unit_test(test_overflow_refused),
    };
    return cmocka_run_group_tests_name("common array_grow", tests, NULL, NULL);
}
