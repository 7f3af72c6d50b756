/* The probe's answer (server/probe.c) over a real session table: a tenant sees its own
 * sessions, reservation and use, per-GPU counts that name nobody, and whether a session of its
 * would be admitted now; never another tenant's name or figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/probe.h"
#include "server/server.h"
#include "server/session.h"
#include "server/session_table.h"
#include "server/tenant_config.h"

#define GIB (1ull << 30)

static struct srv_tenants tenants;
static struct srv_table *table;
static const struct srv_probe_gpu gpu0 = {.index = 0, .name = "Fake GPU", .total_mem = 5 * GIB};

static int setup(void **state)
{
    int fd;

    memset(&tenants, 0, sizeof(tenants));
    assert_int_equal(srv_tenant_key(&tenants, "alpha", "token", "a"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "alpha", "mem_quota", "1GiB"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "alpha", "max_sessions", "2"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "secretbeta", "token", "b"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "secretbeta", "mem_quota", "3GiB"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "gamma", "token", "g"), RG_OK);
    assert_int_equal(srv_tenant_key(&tenants, "gamma", "mem_quota", "2GiB"), RG_OK);
    assert_int_equal(srv_table_create(&fd, &table), RG_OK);
    srv_table_set_tenants(table, &tenants);
    return 0;
}

static const struct srv_tenant *tenant(const char *name)
{
    for (int i = 0; i < tenants.n; i++)
        if (strcmp(tenants.list[i].name, name) == 0)
            return &tenants.list[i];
    return NULL;
}

static int admit(const char *name, uint64_t used)
{
    int gpus[1] = {0}, verdict;
    uint64_t totals[1] = {5 * GIB};
    char why[256];
    const struct srv_tenant *t = tenant(name);
    struct srv_admission a = {.tenant = t,
                              .quota = t->mem_quota,
                              .gpus = gpus,
                              .gpu_total = totals,
                              .ngpus = 1,
                              .session = 1,
                              .peer = "10.9.8.7:1234",
                              .client = "hidden-client pid 4242"};
    int slot = srv_table_admit(table, &a, &verdict, why, sizeof(why));

    assert_true(slot >= 0);
    atomic_store(&table->slots[slot].mem_used, used);
    return slot;
}

struct answer {
    Rgpu__ProbeReply reply;
    Rgpu__ProbeGpu msgs[1], *ptrs[1];
    char why[320];
    uint8_t packed[4096];
    size_t len;
};

static void ask_share(const char *name, uint64_t asked, double share, struct answer *a)
{
    rgpu__probe_reply__init(&a->reply);
    srv_probe_answer(table, tenant(name), asked, share, &gpu0, 1, a->msgs, a->ptrs, a->why,
                     sizeof(a->why), &a->reply);
    a->len = rgpu__probe_reply__pack(&a->reply, a->packed);
}

static void ask(const char *name, uint64_t asked, struct answer *a)
{
    ask_share(name, asked, 0, a);
}

static bool contains(const struct answer *a, const void *what, size_t len)
{
    return memmem(a->packed, a->len, what, len) != NULL;
}

static void test_own_figures_and_counts_only(void **state)
{
    struct answer a;
    uint64_t secret_used = 0x5eC2e7ull, three_gib = 3 * GIB;

    admit("secretbeta", secret_used);
    admit("alpha", 123 << 20);
    ask("alpha", 0, &a);
    assert_int_equal(a.reply.n_gpus, 1);
    assert_string_equal(a.reply.gpus[0]->name, "Fake GPU");
    assert_int_equal(a.reply.gpus[0]->total_mem, 5 * GIB);
    assert_int_equal(a.reply.gpus[0]->available, 1 * GIB); /* 5 - 3 - 1 */
    assert_int_equal(a.reply.gpus[0]->reserved, 1 * GIB);  /* alpha's own */
    assert_int_equal(a.reply.gpus[0]->used, 123 << 20);
    assert_int_equal(a.reply.gpus[0]->sessions, 2); /* a count over all tenants */
    assert_int_equal(a.reply.gpus[0]->tenant_sessions, 1);
    assert_int_equal(a.reply.tenant_sessions, 1);
    assert_int_equal(a.reply.max_sessions, 2);
    assert_int_equal(a.reply.quota, 1 * GIB);
    assert_true(a.reply.admit);
    /* Nothing of the other tenant's: its name, its use, its reservation, its client. */
    assert_false(contains(&a, "secretbeta", 10));
    assert_false(contains(&a, "hidden-client", 13));
    assert_false(contains(&a, "10.9.8.7", 8));
    assert_false(contains(&a, &secret_used, 3));
    assert_false(contains(&a, &three_gib, sizeof(three_gib)));
}

static void test_would_refuse_with_reason(void **state)
{
    struct answer a;

    ask("gamma", 0, &a); /* 2 GiB asked, 1 GiB left */
    assert_false(a.reply.admit);
    assert_non_null(strstr(a.reply.why_not, "insufficient GPU memory"));
    assert_int_equal(a.reply.gpus[0]->reserved, 0);
    assert_int_equal(a.reply.gpus[0]->used, 0);
    ask("gamma", 512 << 20, &a); /* asking for less fits */
    assert_true(a.reply.admit);
    assert_int_equal(a.reply.quota, 512 << 20);
    admit("alpha", 0);
    ask("alpha", 0, &a); /* its second session reached max_sessions = 2 */
    assert_false(a.reply.admit);
    assert_non_null(strstr(a.reply.why_not, "session limit reached"));
    assert_int_equal(a.reply.tenant_sessions, 2);
}

/* Issue 27 item 11: more than the tenant's quota (bytes or a share of the GPU) is not admitted,
 * with the reason; it used to be cut down to the quota and reported as admitted. */
static void test_over_quota_not_admitted(void **state)
{
    struct answer a;

    ask("alpha", 2 * GIB, &a); /* alpha's mem_quota is 1 GiB */
    assert_false(a.reply.admit);
    assert_non_null(strstr(a.reply.why_not, "may reserve at most 1.00 GiB"));
    ask_share("alpha", 0, 0.5, &a); /* half of the 5 GiB GPU */
    assert_false(a.reply.admit);
    assert_non_null(strstr(a.reply.why_not, "(50% of a 5.00 GiB GPU)"));
    ask_share("alpha", 0, 0.1, &a); /* 512 MiB fits under 1 GiB */
    assert_true(a.reply.admit);
    assert_int_equal(a.reply.quota, (uint64_t)(0.1 * 5 * GIB));
}

static void test_no_table_answers_totals(void **state)
{
    Rgpu__ProbeReply reply = RGPU__PROBE_REPLY__INIT;
    Rgpu__ProbeGpu msgs[1], *ptrs[1];
    char why[64];

    srv_probe_answer(NULL, NULL, 0, 0, &gpu0, 1, msgs, ptrs, why, sizeof(why), &reply);
    assert_true(reply.admit);
    assert_int_equal(reply.gpus[0]->available, 5 * GIB);
    assert_int_equal(reply.gpus[0]->sessions, 0);
}

/* A second probe reads the GPUs the first recorded in the table, without the driver: here the
 * driver cannot even be opened, so without the record the call would fail. */
static void test_gpus_recorded_once(void **state)
{
    static struct srv_config cfg;
    static struct srv_session s;
    struct srv_probe_gpu gpus[SRV_MAX_DEVICES];

    snprintf(cfg.driver, sizeof(cfg.driver), "/nonexistent/libcuda.so.1");
    cfg.table = table;
    assert_int_equal(srv_probe_gpus(&s, &cfg, gpus), -1);
    table->probe_gpus[0] =
        (struct srv_table_gpu_info){.index = 3, .name = "Recorded", .total_mem = 7 * GIB};
    table->probe_ngpus = 1;
    atomic_store(&table->probe_ready, 1);
    assert_int_equal(srv_probe_gpus(&s, &cfg, gpus), 1);
    assert_int_equal(gpus[0].index, 3);
    assert_string_equal(gpus[0].name, "Recorded");
    assert_int_equal(gpus[0].total_mem, 7 * GIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_figures_and_counts_only),
        cmocka_unit_test(test_over_quota_not_admitted),
        cmocka_unit_test(test_would_refuse_with_reason),
        cmocka_unit_test(test_no_table_answers_totals),
        cmocka_unit_test(test_gpus_recorded_once),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
