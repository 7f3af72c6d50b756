/* Compute shares and launch order (scheduler/share.c): weights, caps with water-filling,
 * classes, and a simulated GPU on which sessions take turns as sched_pick says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "scheduler/share.h"

#define MS 1000000ull
#define EPS 1e-9

static const struct sched_params params = {.window_ns = 1000 * MS, .quantum_ns = 10 * MS};

static void test_weights_divide(void **state)
{
    struct sched_tenant t[3] = {{.weight = 1}, {.weight = 3}, {.weight = 4}};
    bool active[3] = {true, true, false};
    double share[3];

    sched_shares(t, 3, active, share);
    assert_true(share[0] > 0.25 - EPS && share[0] < 0.25 + EPS);
    assert_true(share[1] > 0.75 - EPS && share[1] < 0.75 + EPS);
    assert_true(share[2] == 0);
    active[2] = true;
    sched_shares(t, 3, active, share);
    assert_true(share[0] > 0.125 - EPS && share[0] < 0.125 + EPS);
    assert_true(share[2] > 0.5 - EPS && share[2] < 0.5 + EPS);
}

static void test_zero_weight_is_one(void **state)
{
    struct sched_tenant t[2] = {{.weight = 0}, {.weight = 1}};
    bool active[2] = {true, true};
    double share[2];

    sched_shares(t, 2, active, share);
    assert_true(share[0] > 0.5 - EPS && share[0] < 0.5 + EPS);
}

/* A capped tenant alone keeps its cap; the rest of the GPU stays idle. */
static void test_cap_alone(void **state)
{
    struct sched_tenant t[1] = {{.weight = 1, .cap_permille = 200}};
    bool active[1] = {true};
    double share[1];

    sched_shares(t, 1, active, share);
    assert_true(share[0] > 0.2 - EPS && share[0] < 0.2 + EPS);
    assert_int_equal(sched_cap_room(&t[0], 150 * MS, 1000 * MS), 50 * MS);
    assert_int_equal(sched_cap_room(&t[0], 250 * MS, 1000 * MS), 0);
    t[0].cap_permille = 0;
    assert_true(sched_cap_room(&t[0], 999999 * MS, 1000 * MS) == UINT64_MAX);
}

/* Water-filling: a tenant capped below its weighted part gives the excess to the others. */
static void test_cap_redistributes(void **state)
{
    struct sched_tenant t[3] = {{.weight = 2, .cap_permille = 100}, {.weight = 1}, {.weight = 1}};
    bool active[3] = {true, true, true};
    double share[3];

    sched_shares(t, 3, active, share);
    assert_true(share[0] > 0.1 - EPS && share[0] < 0.1 + EPS);
    assert_true(share[1] > 0.45 - EPS && share[1] < 0.45 + EPS);
    assert_true(share[2] > 0.45 - EPS && share[2] < 0.45 + EPS);
}

/* Best effort gets nothing while a guaranteed tenant is active, everything otherwise, and what
 * capped guaranteed tenants leave. */
static void test_classes(void **state)
{
    struct sched_tenant t[2] = {{.weight = 1}, {.weight = 100, .best_effort = true}};
    bool active[2] = {true, true};
    double share[2];

    sched_shares(t, 2, active, share);
    assert_true(share[0] > 1 - EPS && share[1] == 0);
    active[0] = false;
    sched_shares(t, 2, active, share);
    assert_true(share[0] == 0 && share[1] > 1 - EPS);
    t[0].cap_permille = 300;
    active[0] = true;
    sched_shares(t, 2, active, share);
    assert_true(share[0] > 0.3 - EPS && share[0] < 0.3 + EPS);
    assert_true(share[1] > 0.7 - EPS && share[1] < 0.7 + EPS);
}

static void test_pick_owner_keeps_within_quantum(void **state)
{
    struct sched_tenant t[2] = {{.weight = 1}, {.weight = 1}};
    struct sched_session s[2] = {
        {.tenant = 0, .active = true, .wants = true, .owner = true, .used_ns = 5 * MS},
        {.tenant = 1, .active = true, .wants = true, .used_ns = 0}};
    double share[2];

    /* owner is 10 ms (normalized by share 0.5) ahead: within the quantum of 10 ms? 5/0.5=10 */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, share), 1);
    s[0].used_ns = 4 * MS; /* 8 ms normalized: keeps it */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, share), 0);
    assert_true(share[0] > 0.5 - EPS);
    s[1].wants = false; /* the other does not contend: the owner goes on whatever its usage */
    s[0].used_ns = 900 * MS;
    assert_int_equal(sched_pick(t, 2, s, 2, &params, NULL), 0);
}

static void test_pick_cap_blocks_even_alone(void **state)
{
    struct sched_tenant t[1] = {{.weight = 1, .cap_permille = 200}};
    struct sched_session s[1] = {
        {.tenant = 0, .active = true, .wants = true, .owner = true, .used_ns = 199 * MS}};

    assert_int_equal(sched_pick(t, 1, s, 1, &params, NULL), 0);
    s[0].used_ns = 200 * MS;
    assert_int_equal(sched_pick(t, 1, s, 1, &params, NULL), -1);
}

/* Best effort waits while a guaranteed session is active, even between its launches. */
static void test_pick_best_effort_yields(void **state)
{
    struct sched_tenant t[2] = {{.weight = 1}, {.weight = 1, .best_effort = true}};
    struct sched_session s[2] = {
        {.tenant = 0, .active = true, .wants = false, .owner = true, .used_ns = 50 * MS},
        {.tenant = 1, .active = true, .wants = true, .used_ns = 0}};

    assert_int_equal(sched_pick(t, 2, s, 2, &params, NULL), -1);
    s[0].active = false; /* idle past the horizon: best effort takes the GPU */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, NULL), 1);
}

/* Within a tenant: the owner if it wants, else the session with the least time. */
static void test_pick_session_within_tenant(void **state)
{
    struct sched_tenant t[1] = {{.weight = 1}};
    struct sched_session s[3] = {{.tenant = 0, .wants = true, .used_ns = 30 * MS},
                                 {.tenant = 0, .wants = true, .used_ns = 10 * MS},
                                 {.tenant = 0, .wants = false, .used_ns = 0}};

    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 1);
    s[0].owner = true;
    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 0);
    s[2].tenant = 7; /* out of range: ignored */
    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 0);
}

/* A GPU simulated in 100 us steps: whoever sched_pick names runs for the step. Saturating
 * tenants with weights 1:3 get 25/75; a 20% cap alone gets 20%. */
static void simulate(const struct sched_tenant *t, int n, uint64_t total_ns, uint64_t *got)
{
    struct sched_session s[4] = {{0}};
    const uint64_t step = 100000;

    for (int i = 0; i < n; i++)
        s[i] = (struct sched_session){.tenant = i, .active = true, .wants = true};
    for (uint64_t now = 0; now < total_ns; now += step) {
        int p;
        if (now % params.window_ns == 0)
            for (int i = 0; i < n; i++)
                s[i].used_ns = 0;
        p = sched_pick(t, n, s, n, &params, NULL);
        for (int i = 0; i < n; i++)
            s[i].owner = i == p;
        if (p >= 0) {
            s[p].used_ns += step;
            got[p] += step;
        }
    }
}

static void test_simulated_weights_and_cap(void **state)
{
    struct sched_tenant w[2] = {{.weight = 1}, {.weight = 3}};
    struct sched_tenant c[1] = {{.weight = 1, .cap_permille = 200}};
    uint64_t got[2] = {0}, total = 30000 * MS;

    simulate(w, 2, total, got);
    assert_true(got[0] > total / 100 * 24 && got[0] < total / 100 * 26);
    assert_true(got[1] > total / 100 * 74 && got[1] < total / 100 * 76);
    got[0] = 0;
    simulate(c, 1, total, got);
    assert_true(got[0] > total / 100 * 19 && got[0] < total / 100 * 21);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_divide),
        cmocka_unit_test(test_zero_weight_is_one),
        cmocka_unit_test(test_cap_alone),
        cmocka_unit_test(test_cap_redistributes),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_pick_owner_keeps_within_quantum),
        cmocka_unit_test(test_pick_cap_blocks_even_alone),
        cmocka_unit_test(test_pick_best_effort_yields),
        cmocka_unit_test(test_pick_session_within_tenant),
        cmocka_unit_test(test_simulated_weights_and_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
