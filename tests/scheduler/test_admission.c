/* Admission and quota arithmetic (scheduler/admission.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/admission.h"

#define GIB (1ull << 30)

static void test_request_quota(void **state)
{
    uint64_t q = 1;
    char why[256] = "";

    /* nothing asked: the tenant's quota (0 = none) */
    assert_int_equal(sched_request_quota("a", 0, 0, 0, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(q, 0);
    assert_int_equal(sched_request_quota("a", 8 * GIB, 0, 0, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(q, 8 * GIB);
    /* bytes asked: exactly that, up to the tenant's quota */
    assert_int_equal(sched_request_quota("a", 0, 2 * GIB, 0, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(q, 2 * GIB);
    assert_int_equal(sched_request_quota("a", 8 * GIB, 8 * GIB, 0, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(q, 8 * GIB);
    /* issue 27 item 11: above the tenant's quota is refused, not cut down to it */
    q = 7;
    assert_int_equal(sched_request_quota("a", 8 * GIB, 16 * GIB, 0, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
    assert_int_equal(q, 7);
    assert_non_null(strstr(why, "tenant 'a' may reserve at most 8.00 GiB"));
    assert_non_null(strstr(why, "asked for 16.00 GiB"));
    /* a share of the smallest GPU */
    assert_int_equal(sched_request_quota("a", 0, 0, 0.25, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(q, 20 * GIB);
    assert_int_equal(sched_request_quota("a", 20 * GIB, 0, 0.25, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_ADMIT);
    assert_int_equal(sched_request_quota("a", 20 * GIB, 0, 0.5, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
    assert_non_null(strstr(why, "(50% of a 80.00 GiB GPU)"));
    /* shares out of range, NaN, and both forms at once */
    assert_int_equal(sched_request_quota("a", 0, 0, 1.5, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
    assert_int_equal(sched_request_quota("a", 0, 0, -0.5, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
    assert_int_equal(sched_request_quota("a", 0, 0, NAN, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
    assert_int_equal(sched_request_quota("a", 0, GIB, 0.5, 80 * GIB, &q, why, sizeof(why)),
                     SCHED_NOT_ENTITLED);
}

static void test_quota_fits(void **state)
{
    assert_true(sched_quota_fits(0, UINT64_MAX, UINT64_MAX));
    assert_true(sched_quota_fits(100, 40, 60));
    assert_false(sched_quota_fits(100, 41, 60));
    assert_false(sched_quota_fits(100, 0, 101));
    assert_false(sched_quota_fits(100, 200, 0));         /* already over (a reset quota) */
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
        cmocka_unit_test(test_request_quota),       cmocka_unit_test(test_quota_fits),
        cmocka_unit_test(test_admit_fits),          cmocka_unit_test(test_admit_over_capacity),
        cmocka_unit_test(test_admit_session_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
