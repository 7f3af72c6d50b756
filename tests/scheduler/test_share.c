/* Compute shares and launch order (scheduler/share.c): weights, caps with water-filling,
 * classes, and a simulated GPU on which sessions take turns as sched_pick says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "scheduler/share.h"

#define MS  1000000ull
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
        {.tenant = 0, .active = true, .wants = true, .owner = true, .vtime = 20 * MS},
        {.tenant = 1, .active = true, .wants = true, .vtime = 0}};
    double share[2];

    /* The owner's virtual time is 20 ms ahead at share 0.5: 10 ms of its own GPU time more than
     * its due, a whole quantum: it hands over. */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, share), 1);
    s[0].vtime = 19 * MS; /* within the quantum: keeps it */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, share), 0);
    assert_true(share[0] > 0.5 - EPS && share[1] > 0.5 - EPS);
    s[1].wants = false; /* the other does not contend: the owner goes on whatever its usage */
    s[0].vtime = 900 * MS;
    assert_int_equal(sched_pick(t, 2, s, 2, &params, NULL), 0);
    /* Virtual time wraps: only the difference counts. */
    s[1].wants = true;
    s[1].vtime = UINT64_MAX - 5 * MS; /* 5 ms before 0 */
    s[0].vtime = 15 * MS;             /* 20 ms after it */
    assert_int_equal(sched_pick(t, 2, s, 2, &params, NULL), 1);
    s[0].vtime = 10 * MS;
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

/* Sessions of one tenant: the least virtual time, the owner only within its quantum (before
 * issue 30 the owner kept the GPU as long as it wanted it, whatever its usage). */
static void test_pick_session_within_tenant(void **state)
{
    struct sched_tenant t[1] = {{.weight = 1}};
    struct sched_session s[3] = {{.tenant = 0, .wants = true, .vtime = 60 * MS},
                                 {.tenant = 0, .wants = true, .vtime = 10 * MS},
                                 {.tenant = 0, .wants = false, .vtime = 0}};
    double share[3];

    assert_int_equal(sched_pick(t, 1, s, 3, &params, share), 1);
    assert_true(share[0] > 0.5 - EPS && share[1] > 0.5 - EPS && share[2] == 0);
    s[0].owner = true; /* 50 ms ahead at share 0.5: 25 ms of its GPU time, past the quantum */
    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 1);
    s[0].vtime = 25 * MS; /* 15 ms ahead: 7.5 ms of its GPU time, within it */
    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 0);
    s[2].tenant = 7; /* out of range: ignored */
    assert_int_equal(sched_pick(t, 1, s, 3, &params, NULL), 0);
}

/* A tenant's share is divided equally among its active sessions. */
static void test_session_shares(void **state)
{
    struct sched_tenant t[2] = {{.weight = 2}, {.weight = 1, .cap_permille = 100}};
    struct sched_session s[5] = {{.tenant = 0, .active = true},
                                 {.tenant = 0, .wants = true},
                                 {.tenant = 0},
                                 {.tenant = 1, .active = true},
                                 {.tenant = 9, .active = true}};
    double share[5];

    sched_session_shares(t, 2, s, 5, share);
    /* tenant 1 is capped at 10%: tenant 0 has 90% for its two active sessions */
    assert_true(share[0] > 0.45 - EPS && share[0] < 0.45 + EPS);
    assert_true(share[1] > 0.45 - EPS && share[1] < 0.45 + EPS);
    assert_true(share[2] == 0 && share[4] == 0);
    assert_true(share[3] > 0.1 - EPS && share[3] < 0.1 + EPS);
}

static void test_vtime_charge_and_join(void **state)
{
    struct sched_session s[3] = {{.wants = true, .vtime = 500 * MS},
                                 {.wants = true, .vtime = 400 * MS},
                                 {.wants = false, .vtime = 7 * MS}};

    assert_int_equal(sched_vtime_charge(10 * MS, 500000), 20 * MS);
    assert_int_equal(sched_vtime_charge(1 * MS, 0), 1000 * MS); /* floored at 0.1% */
    /* Back from idle at share 0.5: one quantum of its time (20 ms of virtual time) behind the
     * least of the others; ahead already: unchanged; nobody else contends: unchanged. */
    assert_int_equal(sched_join_vtime(s, 3, 2, 0.5, &params), 380 * MS);
    s[2].vtime = 390 * MS;
    assert_int_equal(sched_join_vtime(s, 3, 2, 0.5, &params), 390 * MS);
    s[0].wants = s[1].wants = false;
    s[2].vtime = 7 * MS;
    assert_int_equal(sched_join_vtime(s, 3, 2, 0.5, &params), 7 * MS);
}

/* A GPU simulated in 100 us steps: whoever sched_pick names runs for the step and is charged
 * it, in its window and in virtual time. Session i belongs to tenant tenant_of[i] and contends
 * from join[i] on (join[i] == 0: from the start); a session that starts to contend gets
 * sched_join_vtime. got[i] is its GPU time from `from` on; longest[i] the longest run of steps
 * it had the GPU in a row after it joined. */
struct sim {
    const struct sched_tenant *t;
    int nt, n;
    const int *tenant_of;
    const uint64_t *join;
    uint64_t total_ns, from;
    uint64_t got[8], longest[8];
};

static void simulate(struct sim *m)
{
    struct sched_session s[8] = {{0}};
    const uint64_t step = 100000;
    uint64_t run = 0;
    int last = -1;

    for (int i = 0; i < m->n; i++) {
        s[i] = (struct sched_session){.tenant = m->tenant_of ? m->tenant_of[i] : i};
        m->got[i] = m->longest[i] = 0;
    }
    for (uint64_t now = 0; now < m->total_ns; now += step) {
        double share[8];
        int p;
        if (now % params.window_ns == 0)
            for (int i = 0; i < m->n; i++)
                s[i].used_ns = 0;
        for (int i = 0; i < m->n; i++) {
            bool joins = !s[i].wants && (m->join == NULL || m->join[i] <= now);
            if (!joins)
                continue;
            s[i].wants = s[i].active = true;
            sched_session_shares(m->t, m->nt, s, m->n, share);
            s[i].vtime = sched_join_vtime(s, m->n, i, share[i], &params);
        }
        p = sched_pick(m->t, m->nt, s, m->n, &params, share);
        for (int i = 0; i < m->n; i++)
            s[i].owner = i == p;
        run = p == last ? run + step : step;
        last = p;
        if (p < 0)
            continue;
        if (run > m->longest[p])
            m->longest[p] = run;
        s[p].used_ns += step;
        s[p].vtime += sched_vtime_charge(step, (uint32_t)(share[p] * 1e6));
        if (now >= m->from)
            m->got[p] += step;
    }
}

static bool near(uint64_t got, double want, double tol)
{
    return got > want * (1 - tol) && got < want * (1 + tol);
}

/* Saturating tenants with weights 1:3 get 25/75; a 20% cap alone gets 20%. */
static void test_simulated_weights_and_cap(void **state)
{
    struct sched_tenant w[2] = {{.weight = 1}, {.weight = 3}};
    struct sched_tenant c[1] = {{.weight = 1, .cap_permille = 200}};
    struct sim m = {.t = w, .nt = 2, .n = 2, .total_ns = 30000 * MS};

    simulate(&m);
    assert_true(near(m.got[0], 0.25 * m.total_ns, 0.04));
    assert_true(near(m.got[1], 0.75 * m.total_ns, 0.02));
    m = (struct sim){.t = c, .nt = 1, .n = 1, .total_ns = 30000 * MS};
    simulate(&m);
    assert_true(near(m.got[0], 0.2 * m.total_ns, 0.05));
}

/* Issue 30: sessions of one tenant share its time equally (before, the owner kept it), a
 * tenant's weight is divided among its sessions, and turns stay about a quantum long. */
static void test_simulated_sessions(void **state)
{
    struct sched_tenant one[1] = {{.weight = 1}}, two[2] = {{.weight = 2}, {.weight = 1}};
    static const int same[4] = {0, 0, 0, 0}, split[3] = {0, 0, 1};
    struct sim m = {.t = one, .nt = 1, .n = 4, .tenant_of = same, .total_ns = 10000 * MS};

    simulate(&m);
    for (int i = 0; i < 4; i++) {
        assert_true(near(m.got[i], 0.25 * m.total_ns, 0.02));
        assert_true(m.longest[i] <= 2 * params.quantum_ns + 100000);
    }
    m = (struct sim){.t = two, .nt = 2, .n = 3, .tenant_of = split, .total_ns = 10000 * MS};
    simulate(&m);
    for (int i = 0; i < 3; i++)
        assert_true(near(m.got[i], m.total_ns / 3.0, 0.02));
}

/* A session that joins after the others ran for 5 s gets its share from then on, without
 * taking the GPU for longer than two quanta in a row to catch up (its virtual time starts a
 * quantum behind theirs, not at zero), and the sessions that were there keep theirs. */
static void test_simulated_join(void **state)
{
    struct sched_tenant one[1] = {{.weight = 1}};
    static const int same[3] = {0, 0, 0};
    static const uint64_t join[3] = {0, 0, 5000 * MS};
    struct sim m = {.t = one,
                    .nt = 1,
                    .n = 3,
                    .tenant_of = same,
                    .join = join,
                    .total_ns = 8000 * MS,
                    .from = 5000 * MS};

    simulate(&m);
    assert_true(m.longest[2] <= 2 * params.quantum_ns + 100000);
    for (int i = 0; i < 3; i++)
        assert_true(near(m.got[i], 1000 * MS, 0.05));
}

/* Work conservation: a light launch (short work into a shallow queue) goes beside the owner's
 * work unless the session is a quantum ahead of the owner; GPU-bound work never does. */
static void test_light_pass(void **state)
{
    struct sched_light l = {
        .avg_ns = 20000, .inflight = 0, .vtime = 100 * MS, .ref_vtime = 100 * MS, .share = 0.25};

    assert_true(sched_light_pass(&l, &params));
    l.inflight = 24; /* 25 x 20 us = 500 us queued with this launch: still light */
    assert_true(sched_light_pass(&l, &params));
    l.inflight = 25;
    assert_false(sched_light_pass(&l, &params));
    l.inflight = 0;
    l.avg_ns = 600000; /* a 0.6 ms graph replay with a synchronize each: GPU-bound */
    assert_false(sched_light_pass(&l, &params));
    l.avg_ns = 2000000; /* the fake driver's saturating loads (2 ms kernels) */
    assert_false(sched_light_pass(&l, &params));
    l.avg_ns = 0; /* nothing measured yet: its first launch into an empty queue goes */
    assert_true(sched_light_pass(&l, &params));
    l.inflight = 1;
    assert_false(sched_light_pass(&l, &params));
    l.inflight = 0;
    l.avg_ns = 20000;
    /* ahead of the owner by less than quantum / share (10 ms / 0.25 = 40 ms): goes */
    l.vtime = l.ref_vtime + 39 * MS;
    assert_true(sched_light_pass(&l, &params));
    l.vtime = l.ref_vtime + 40 * MS; /* a quantum ahead: takes its turn */
    assert_false(sched_light_pass(&l, &params));
    l.vtime = l.ref_vtime - 1000 * MS; /* far behind: goes */
    assert_true(sched_light_pass(&l, &params));
    l.ref_vtime = UINT64_MAX - 5 * MS; /* wrap-around: 10 ms ahead, still within */
    l.vtime = 5 * MS;
    assert_true(sched_light_pass(&l, &params));
    l.share = 0; /* no share: counts as the minimum, so any lead holds it */
    l.vtime = l.ref_vtime + 20 * MS;
    assert_true(sched_light_pass(&l, &params)); /* 20 ms < 10 ms / 0.001 */
    l.vtime = l.ref_vtime + 20000 * MS;
    assert_false(sched_light_pass(&l, &params));
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
        cmocka_unit_test(test_session_shares),
        cmocka_unit_test(test_vtime_charge_and_join),
        cmocka_unit_test(test_simulated_weights_and_cap),
        cmocka_unit_test(test_simulated_sessions),
        cmocka_unit_test(test_simulated_join),
        cmocka_unit_test(test_light_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
