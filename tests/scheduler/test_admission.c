/* Admission and quota arithmetic (scheduler/admission.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/admission.h"

#define GIB (1ull << 30)

static void test_grant_quota(void **state)
{
    assert_int_equal(sched_grant_quota(0, 0), 0);
    assert_int_equal(sched_grant_quota(8 * GIB, 0), 8 * GIB);
    assert_int_equal(sched_grant_quota(0, 2 * GIB), 2 * GIB);
    assert_int_equal(sched_grant_quota(8 * GIB, 2 * GIB), 2 * GIB);
    assert_int_equal(sched_grant_quota(8 * GIB, 16 * GIB), 8 * GIB);
}

static void test_quota_fits(void **state)
{
    assert_true(sched_quota_fits(0, UINT64_MAX, UINT64_MAX));
    assert_true(sched_quota_fits(100, 40, 60));
    assert_false(sched_quota_fits(100, 41, 60));
    assert_false(sched_quota_fits(100, 0, 101));
    assert_false(sched_quota_fits(100, 200, 0)); /* already over (a reset quota) */
    assert_false(sched_quota_fits(100, 50, UINT64_MAX)); /* no overflow */
}

static void test_admit_fits(void **state)
{
    struct sched_gpu g[2] = {{80 * GIB, 60 * GIB, 3}, {80 * GIB, 0, 0}};
    struct sched_request r = {.tenant = "a", .quota = 20 * GIB};
    char why[256] = "";

    assert_int_equal(sched_admit(&r, g, 2, why, sizeof(why)), SCHED_ADMIT);
    r.quota = 0; /* no quota reserves nothing */
    g[0].reserved = 80 * GIB;
    assert_int_equal(sched_admit(&r, g, 2, why, sizeof(why)), SCHED_ADMIT);
    assert_string_equal(why, "");
}

static void test_admit_over_capacity(void **state)
{
    struct sched_gpu g[2] = {{80 * GIB, 0, 0}, {80 * GIB, 64 * GIB, 2}};
    struct sched_request r = {.tenant = "big", .quota = 20 * GIB};
    char why[256];

    assert_int_equal(sched_admit(&r, g, 2, why, sizeof(why)), SCHED_NO_MEMORY);
    assert_non_null(strstr(why, "insufficient GPU memory"));
    assert_non_null(strstr(why, "tenant 'big' needs a 20.00 GiB quota but GPU 1 has 16.00 GiB"));
    assert_non_null(strstr(why, "reserved by 2 session(s)"));
    g[1].reserved = 90 * GIB; /* over-reserved (after a reload): nothing left, no underflow */
    r.quota = 1;
    assert_int_equal(sched_admit(&r, g, 2, why, sizeof(why)), SCHED_NO_MEMORY);
    assert_non_null(strstr(why, "has 0.00 GiB left"));
}

static void test_admit_session_limit(void **state)
{
    struct sched_gpu g[1] = {{80 * GIB, 0, 0}};
    struct sched_request r = {.tenant = "t", .tenant_sessions = 1, .max_sessions = 2};
    char why[256];

    assert_int_equal(sched_admit(&r, g, 1, why, sizeof(why)), SCHED_ADMIT);
    r.tenant_sessions = 2;
    assert_int_equal(sched_admit(&r, g, 1, why, sizeof(why)), SCHED_SESSION_LIMIT);
    assert_string_equal(why, "session limit reached: tenant 't' already has 2 session(s) "
                             "(max_sessions = 2)");
    r.max_sessions = 0;
    assert_int_equal(sched_admit(&r, g, 1, why, sizeof(why)), SCHED_ADMIT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grant_quota),
        cmocka_unit_test(test_quota_fits),
        cmocka_unit_test(test_admit_fits),
        cmocka_unit_test(test_admit_over_capacity),
        cmocka_unit_test(test_admit_session_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
