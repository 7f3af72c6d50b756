/* Pool placement policies (scheduler/placement.c): spread, pack, first, random tie-breaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/placement.h"

#define GIB (1ull << 30)

/* Three servers of 80 GiB: A has 60 GiB left, B 20 GiB, C 80 GiB (empty). */
static const struct sched_candidate three[] = {
    {.answered = true, .fits = true, .total_mem = 80 * GIB, .free_mem = 60 * GIB, .sessions = 1},
    {.answered = true, .fits = true, .total_mem = 80 * GIB, .free_mem = 20 * GIB, .sessions = 3},
    {.answered = true, .fits = true, .total_mem = 80 * GIB, .free_mem = 80 * GIB, .sessions = 0},
};

static void test_policy_names(void **state)
{
    enum sched_policy p = SCHED_FIRST;

    assert_true(sched_policy_parse("spread", &p));
    assert_int_equal(p, SCHED_SPREAD);
    assert_true(sched_policy_parse("pack", &p));
    assert_int_equal(p, SCHED_PACK);
    assert_true(sched_policy_parse("first", &p));
    assert_int_equal(p, SCHED_FIRST);
    assert_false(sched_policy_parse("binpack", &p));
    assert_false(sched_policy_parse(NULL, &p));
    assert_int_equal(p, SCHED_FIRST); /* untouched on failure */
    assert_string_equal(sched_policy_name(SCHED_PACK), "pack");
}

static void test_spread_least_loaded_first(void **state)
{
    int order[3];
    uint64_t seed = 1;

    assert_int_equal(sched_place(SCHED_SPREAD, three, 3, &seed, order), 3);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 0);
    assert_int_equal(order[2], 1);
}

static void test_pack_busiest_that_fits_first(void **state)
{
    int order[3];
    uint64_t seed = 1;

    assert_int_equal(sched_place(SCHED_PACK, three, 3, &seed, order), 3);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 0);
    assert_int_equal(order[2], 2);
}

static void test_first_is_list_order(void **state)
{
    int order[3];
    uint64_t seed = 1;

    assert_int_equal(sched_place(SCHED_FIRST, three, 3, &seed, order), 3);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 1);
    assert_int_equal(order[2], 2);
}

/* A server that did not answer or would refuse is never placed, whatever its load. */
static void test_skips_unanswered_and_full(void **state)
{
    struct sched_candidate c[3];
    int order[3];
    uint64_t seed = 7;

    memcpy(c, three, sizeof(c));
    c[2].answered = false; /* the emptiest: dead */
    c[1].fits = false;     /* the busiest: full */
    for (int p = SCHED_SPREAD; p <= SCHED_FIRST; p++) {
        assert_int_equal(sched_place((enum sched_policy)p, c, 3, &seed, order), 1);
        assert_int_equal(order[0], 0);
    }
    c[0].fits = false;
    assert_int_equal(sched_place(SCHED_SPREAD, c, 3, &seed, order), 0);
}

/* Sessions, then utilization, decide between servers with the same memory left. */
static void test_sessions_then_utilization(void **state)
{
    struct sched_candidate c[3] = {
        {.answered = true, .fits = true, .total_mem = GIB, .free_mem = GIB, .sessions = 2},
        {.answered = true,
         .fits = true,
         .total_mem = GIB,
         .free_mem = GIB,
         .sessions = 1,
         .utilization = 0.9},
        {.answered = true,
         .fits = true,
         .total_mem = GIB,
         .free_mem = GIB,
         .sessions = 1,
         .utilization = 0.1},
    };
    int order[3];
    uint64_t seed = 3;

    assert_int_equal(sched_place(SCHED_SPREAD, c, 3, &seed, order), 3);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 1);
    assert_int_equal(order[2], 0);
}

/* Equal servers: the order depends on the seed, each comes first about as often, and one seed
 * always gives the same order (tests can reproduce a placement). */
/* gpus = N: servers taken whole in placement order until N; fewer in all: refused. */
static void test_gpus_prefix(void **state)
{
    struct sched_candidate c[4] = {
        {.answered = true, .fits = true, .total_mem = 80 * GIB, .free_mem = 80 * GIB, .ngpus = 1},
        {.answered = true, .fits = false, .total_mem = 80 * GIB, .free_mem = 0, .ngpus = 8},
        {.answered = true, .fits = true, .total_mem = 80 * GIB, .free_mem = 40 * GIB, .ngpus = 2},
        {.answered = false, .ngpus = 4},
    };
    int order[4], n;
    uint64_t seed = 7;

    n = sched_place(SCHED_SPREAD, c, 4, &seed, order); /* 0 (empty), then 2; 1 and 3 out */
    assert_int_equal(n, 2);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 2);
    assert_int_equal(sched_gpus_prefix(c, order, n, 1), 1);
    assert_int_equal(sched_gpus_prefix(c, order, n, 2), 2); /* 1 + 2: the second server too */
    assert_int_equal(sched_gpus_prefix(c, order, n, 3), 2);
    assert_int_equal(sched_gpus_prefix(c, order, n, 4), 0); /* the full server's 8 never count */
    n = sched_place(SCHED_PACK, c, 4, &seed, order); /* the fuller one first: 2 GPUs at once */
    assert_int_equal(order[0], 2);
    assert_int_equal(sched_gpus_prefix(c, order, n, 2), 1);
    assert_int_equal(sched_gpus_prefix(c, order, 0, 1), 0);
}

static void test_ties_broken_randomly(void **state)
{
    struct sched_candidate c[2] = {
        {.answered = true, .fits = true, .total_mem = GIB, .free_mem = GIB},
        {.answered = true, .fits = true, .total_mem = GIB, .free_mem = GIB},
    };
    int first[2] = {0, 0}, order[2], again[2];
    uint64_t seed = 12345, s1, s2;

    for (int i = 0; i < 1000; i++) {
        assert_int_equal(sched_place(SCHED_SPREAD, c, 2, &seed, order), 2);
        first[order[0]]++;
    }
    assert_true(first[0] > 400 && first[1] > 400);
    s1 = s2 = 99;
    sched_place(SCHED_PACK, c, 2, &s1, order);
    sched_place(SCHED_PACK, c, 2, &s2, again);
    assert_memory_equal(order, again, sizeof(order));
    /* first never reorders equal servers */
    for (int i = 0; i < 10; i++) {
        sched_place(SCHED_FIRST, c, 2, &seed, order);
        assert_int_equal(order[0], 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_spread_least_loaded_first),
        cmocka_unit_test(test_pack_busiest_that_fits_first),
        cmocka_unit_test(test_first_is_list_order),
        cmocka_unit_test(test_skips_unanswered_and_full),
        cmocka_unit_test(test_sessions_then_utilization),
        cmocka_unit_test(test_ties_broken_randomly),
        cmocka_unit_test(test_gpus_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
