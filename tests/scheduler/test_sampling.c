/* Placement over a bounded sample (scheduler/placement.c, docs/pool.md "Pools that scale"): the
 * probe order, the round's size, the hedge, and what each policy does when a job sees only d
 * servers of the pool: spread (power of d choices) keeps the busiest server near the mean, pack
 * leaves more servers empty than spread, first picks what probing every server would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/placement.h"

#define GIB (1ull << 30)

static void test_first_probes_in_list_order(void **state)
{
    int order[7];
    uint64_t seed = 42;

    sched_probe_order(SCHED_FIRST, 7, &seed, order);
    for (int i = 0; i < 7; i++)
        assert_int_equal(order[i], i);
}

static void test_spread_and_pack_probe_a_random_permutation(void **state)
{
    enum sched_policy policies[] = {SCHED_SPREAD, SCHED_PACK};

    for (int p = 0; p < 2; p++) {
        int a[100], b[100], seen[100] = {0}, same = 0;
        uint64_t s1 = 1, s2 = 2;
        sched_probe_order(policies[p], 100, &s1, a);
        sched_probe_order(policies[p], 100, &s2, b);
        for (int i = 0; i < 100; i++) {
            assert_true(a[i] >= 0 && a[i] < 100);
            seen[a[i]]++;
            same += a[i] == b[i];
        }
        for (int i = 0; i < 100; i++)
            assert_int_equal(seen[i], 1); /* a permutation */
        assert_true(same < 20);           /* two jobs do not probe the same servers first */
    }
}

/* Every server is as likely to be probed first: 20,000 draws over 10 servers. */
static void test_probe_order_is_uniform(void **state)
{
    int first[10] = {0}, order[10];
    uint64_t seed = 7;

    for (int k = 0; k < 20000; k++) {
        sched_probe_order(SCHED_SPREAD, 10, &seed, order);
        first[order[0]]++;
    }
    for (int i = 0; i < 10; i++)
        assert_true(first[i] > 1700 && first[i] < 2300);
}

static void test_round_size(void **state)
{
    assert_int_equal(sched_probe_round(0, 1, 100), 100); /* 0: all at once */
    assert_int_equal(sched_probe_round(8, 1, 100), 8);
    assert_int_equal(sched_probe_round(8, 6, 100), 12); /* room for 2 x the GPUs asked */
    assert_int_equal(sched_probe_round(8, 1, 5), 5);    /* never more than the pool */
    assert_int_equal(sched_probe_round(8, 1, 0), 0);
    assert_int_equal(sched_probe_round(2, 0, 10), 2);
}

static void test_hedge(void **state)
{
    assert_true(sched_hedge_ms(1.0) == SCHED_HEDGE_MIN_MS);
    assert_true(sched_hedge_ms(20.0) == 20.0 * SCHED_HEDGE_FACTOR);
}

/* A pool of S one-GPU servers of 80 GiB, each session holding 10 GiB (8 fit); jobs arrive one
 * after another and never end; each probes the first d servers of its probe order and goes to
 * the first placement choice among them (or the next round when none fits). */
#define S   100
#define PER 10 /* GiB a session holds */

struct sim {
    int sessions[S];
    uint64_t seed;
};

static struct sched_candidate server(const struct sim *sim, int i)
{
    return (struct sched_candidate){.answered = true,
                                    .fits = (uint64_t)(sim->sessions[i] + 1) * PER <= 80,
                                    .total_mem = 80 * GIB,
                                    .free_mem = (80 - (uint64_t)sim->sessions[i] * PER) * GIB,
                                    .sessions = (uint32_t)sim->sessions[i],
                                    .ngpus = 1};
}

/* One job: rounds of d; returns the server, -1 when the pool is full. */
static int place_one(struct sim *sim, enum sched_policy policy, int d)
{
    int perm[S], order[S];
    struct sched_candidate c[S];

    sched_probe_order(policy, S, &sim->seed, perm);
    for (int next = 0; next < S; next += d) {
        int k = S - next < d ? S - next : d;
        for (int j = 0; j < k; j++)
            c[j] = server(sim, perm[next + j]);
        if (sched_place(policy, c, k, &sim->seed, order) > 0)
            return perm[next + order[0]];
    }
    return -1;
}

static void run(struct sim *sim, enum sched_policy policy, int d, int jobs)
{
    memset(sim->sessions, 0, sizeof(sim->sessions));
    sim->seed = 12345;
    for (int j = 0; j < jobs; j++) {
        int s = place_one(sim, policy, d);
        assert_true(s >= 0);
        sim->sessions[s]++;
    }
}

static int busiest(const struct sim *sim)
{
    int m = 0;

    for (int i = 0; i < S; i++)
        m = sim->sessions[i] > m ? sim->sessions[i] : m;
    return m;
}

static int empty(const struct sim *sim)
{
    int e = 0;

    for (int i = 0; i < S; i++)
        e += sim->sessions[i] == 0;
    return e;
}

/* 300 jobs on 100 servers (3 a server on average): d = 1 is a random server; spread with d = 2
 * and d = 8 keeps the busiest server closer to the mean. */
static void test_spread_power_of_d_choices(void **state)
{
    struct sim sim;
    int one, two, eight;

    run(&sim, SCHED_SPREAD, 1, 300);
    one = busiest(&sim);
    run(&sim, SCHED_SPREAD, 2, 300);
    two = busiest(&sim);
    run(&sim, SCHED_SPREAD, 8, 300);
    eight = busiest(&sim);
    print_message("spread, 300 jobs on 100 servers: busiest %d (d=1), %d (d=2), %d (d=8)\n", one,
                  two, eight);
    assert_true(one >= 7); /* random placement: ln n / ln ln n above the mean */
    assert_true(two < one);
    assert_true(eight <= 4);
    run(&sim, SCHED_SPREAD, S, 300); /* probing all: perfectly even */
    assert_int_equal(busiest(&sim), 3);
}

/* pack with d = 8 leaves servers empty that spread fills; probing all, pack fills 38 servers
 * (300 sessions, 8 each) and leaves 62 empty. */
static void test_pack_keeps_servers_empty(void **state)
{
    struct sim sim;
    int pack8, spread8;

    run(&sim, SCHED_PACK, 8, 300);
    pack8 = empty(&sim);
    run(&sim, SCHED_SPREAD, 8, 300);
    spread8 = empty(&sim);
    print_message("300 jobs on 100 servers, d=8: %d empty (pack), %d (spread)\n", pack8, spread8);
    assert_int_equal(spread8, 0);
    assert_true(pack8 > 20);
    run(&sim, SCHED_PACK, S, 300);
    assert_int_equal(empty(&sim), 62);
}

/* first in rounds picks the first server of the list that fits, as probing all does: the
 * servers fill in list order. */
static void test_first_in_rounds_fills_in_list_order(void **state)
{
    struct sim sim;

    run(&sim, SCHED_FIRST, 8, 300);
    for (int i = 0; i < S; i++)
        assert_int_equal(sim.sessions[i], i < 37 ? 8 : i == 37 ? 4 : 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_probes_in_list_order),
        cmocka_unit_test(test_spread_and_pack_probe_a_random_permutation),
        cmocka_unit_test(test_probe_order_is_uniform),
        cmocka_unit_test(test_round_size),
        cmocka_unit_test(test_hedge),
        cmocka_unit_test(test_spread_power_of_d_choices),
        cmocka_unit_test(test_pack_keeps_servers_empty),
        cmocka_unit_test(test_first_in_rounds_fills_in_list_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
