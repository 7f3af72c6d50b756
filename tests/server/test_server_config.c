/* gpu-server's typed configuration (server/config.c, server/tenant_config.c): the issue 27
 * cases (items 1 and 2) each refused with FILE:LINE and the accepted form, once; every row's
 * default; flags through the same setters; require_tenants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/log.h"
#include "common/sha256.h"
#include "server/server.h"

struct errors {
    int n;
    char lines[8][512];
};

static void collect(void *arg, const char *message)
{
    struct errors *e = arg;

    if (e->n < 8)
        snprintf(e->lines[e->n], sizeof(e->lines[0]), "%s", message);
    e->n++;
}

static struct srv_config *cfg;
static struct errors errs;

static rg_status_t parse(const char *text)
{
    srv_config_init(cfg);
    memset(&errs, 0, sizeof(errs));
    return srv_config_parse(cfg, text, strlen(text), "s.conf", collect, &errs);
}

/* Refused with one error naming line and containing want. */
static void refused(const char *text, int line, const char *want)
{
    char at[32];

    if (parse(text) != RG_ERR_INVALID)
        fail_msg("accepted: %s", text);
    snprintf(at, sizeof(at), "s.conf:%d: ", line);
    if (errs.n != 1 || strncmp(errs.lines[0], at, strlen(at)) != 0 ||
        strstr(errs.lines[0], want) == NULL)
        fail_msg("%s\n%d error(s), first: %s\nwanted %s...%s", text, errs.n, errs.lines[0], at,
                 want);
}

static int setup(void **state)
{
    cfg = malloc(sizeof(*cfg));
    return cfg == NULL;
}

static int teardown(void **state)
{
    free(cfg);
    return 0;
}

/* Item 1: every misspelled section was skipped, leaving a server with no tenant open to all. */
static void test_misspelled_sections(void **state)
{
    static const char *const headers[] = {"[Tenant a]", "[tenants a]", "[tenant\ta]", "[tenant ]",
                                          "[sever]",    "[client]",    "[tenant]"};
    char text[128];

    (void)state;
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        snprintf(text, sizeof(text), "[server]\nport = 7070\n%s\ntoken = secret\n", headers[i]);
        refused(text, 3, "expected [");
        assert_int_equal(cfg->tenants.n, 0);
    }
    static const char nul[] = "[server]\nport = 7070\n\0\n[tenant a]\ntoken = secret\n";
    srv_config_init(cfg);
    memset(&errs, 0, sizeof(errs));
    assert_int_equal(srv_config_parse(cfg, nul, sizeof(nul) - 1, "s.conf", collect, &errs),
                     RG_ERR_INVALID);
    assert_int_equal(errs.n, 1);
    assert_non_null(strstr(errs.lines[0], "s.conf:3: a NUL byte"));
}

/* Item 2: values that were taken. */
static void test_bad_values(void **state)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"port = 70000", "'port = 70000': expected a whole number from 0 to 65535"},
        {"port = 99999", "expected a whole number from 0 to 65535"},
        {"port = 52O90", "expected a whole number from 0 to 65535"},
        {"port = seventy", "expected a whole number from 0 to 65535"},
        {"log_level = verbose", "expected one of error, warn, info, debug, trace"},
        {"busy_poll_us = fast", "expected a duration of 0 to 1000000 microseconds"},
        {"nccl_timeout = ten", "expected a duration of 1 to 604800 seconds"},
        {"transport = rmda", "'transport = rmda': expected one of auto, rdma, tcp"},
        {"rdma_direct = maybe", "expected yes or no"},
        {"require_tenants = 1", "expected yes or no"},
        {"module_cache_max = lots", "expected a size"},
        {"metrics_listen = 0.0.0.0", "expected ADDR:PORT"},
        {"metrics_public_listen = 0.0.0.0:99999", "expected ADDR:PORT"},
        {"devices = 0,0", "expected driver ordinals"},
        {"devices = 0;2", "expected driver ordinals"},
        {"devices = x", "expected driver ordinals"},
        {"max_sessions = 0", "invalid setting 'max_sessions = 0'"},
        {"handshake_timeout_ms = 50", "of 100 to 600000 milliseconds"},
        {"polcy = pack", "unknown key 'polcy' in [server]"},
        {"log-level = info", "unknown key 'log-level' in [server] (did you mean 'log_level'?)"},
    };
    char text[128];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "[server]\n%s\n", bad[i].text);
        refused(text, 2, bad[i].want);
    }
}

static void test_good_values(void **state)
{
    (void)state;
    assert_int_equal(parse("[server]\nport = 0\nlog_level = debug\nbusy_poll_us = 50\n"
                           "nccl_timeout = 10min\ntransport = tcp\nrdma_direct = off\n"
                           "nccl_connect_pairs = no\n"
                           "module_cache_max = 512MiB\nhandshake_timeout_ms = 2s\n"
                           "idle_timeout = 1h\nrecv_timeout_ms = 30000\ndevices = 0, 2\n"
                           "metrics_listen = 127.0.0.1:9400\n"
                           "metrics_public_listen = [::]:9401\nrequire_tenants = yes\n"),
                     RG_OK);
    assert_int_equal(cfg->port, 0);
    assert_int_equal(cfg->log_level, RG_LOG_DEBUG);
    assert_int_equal(cfg->busy_poll_us, 50);
    assert_int_equal(cfg->nccl_timeout_s, 600);
    assert_int_equal(cfg->transport, SRV_TRANSPORT_TCP);
    assert_false(cfg->rdma_direct);
    assert_false(cfg->nccl_connect_pairs);
    assert_int_equal(cfg->module_cache_max, 512ull << 20);
    assert_int_equal(cfg->handshake_timeout_ms, 2000);
    assert_int_equal(cfg->idle_timeout_s, 3600);
    assert_string_equal(cfg->devices, "0, 2");
    assert_string_equal(cfg->metrics_public_listen, "[::]:9401");
    assert_true(cfg->require_tenants);
}

/* Every row's default is taken by its own parser, and is what the code had. */
static void test_defaults(void **state)
{
    (void)state;
    srv_config_init(cfg);
    assert_string_equal(cfg->listen, "0.0.0.0");
    assert_int_equal(cfg->port, SRV_DEFAULT_PORT);
    assert_int_equal(cfg->log_level, RG_LOG_INFO);
    assert_int_equal(cfg->transport, SRV_TRANSPORT_AUTO);
    assert_true(cfg->rdma_direct);
    assert_false(cfg->require_tenants);
    assert_int_equal(cfg->nccl_timeout_s, 600);
    assert_true(cfg->nccl_connect_pairs);
    assert_int_equal(cfg->module_cache_max, 4ull << 30);
    assert_int_equal(cfg->max_sessions, 1024);
    assert_int_equal(cfg->max_pending, 256);
    assert_int_equal(cfg->max_pending_per_peer, 32);
    assert_int_equal(cfg->handshake_timeout_ms, 5000);
    assert_int_equal(cfg->recv_timeout_ms, 30000);
    assert_int_equal(cfg->idle_timeout_s, 0);
    assert_true(cfg->name[0] != '\0');
    for (int s = 0; s < 2; s++) /* no row without a name, no custom row without its parser */
        for (size_t i = 0; i < srv_config_sections[s].nkeys; i++) {
            const struct rg_conf_key *k = &srv_config_sections[s].keys[i];
            assert_non_null(k->name);
            assert_true(k->type != RG_CONF_CUSTOM || (k->parse != NULL && k->help != NULL));
        }
}

static void test_tenants(void **state)
{
    char hex[65], text[512];

    (void)state;
    srv_token_hash_hex("t0k", hex);
    snprintf(text, sizeof(text),
             "[tenant a]\ntoken_sha256 = %s\nmem_quota = 4GiB\nweight = 3\ncap = 20%%\n"
             "class = best-effort\nmax_sessions = 8\n[tenant b]\ntoken = b-secret\n"
             "cap = 0.1%%\nmax_sessions = unlimited\n",
             hex);
    assert_int_equal(parse(text), RG_OK);
    assert_int_equal(cfg->tenants.n, 2);
    assert_true(cfg->tenants.list[0].hashed);
    assert_int_equal(cfg->tenants.list[0].mem_quota, 4ull << 30);
    assert_int_equal(cfg->tenants.list[0].weight, 3);
    assert_int_equal(cfg->tenants.list[0].cap_permille, 200);
    assert_true(cfg->tenants.list[0].best_effort);
    assert_int_equal(cfg->tenants.list[0].max_sessions, 8);
    assert_string_equal(cfg->tenants.list[1].token, "b-secret");
    assert_int_equal(cfg->tenants.list[1].weight, 1);
    assert_int_equal(cfg->tenants.list[1].cap_permille, 1);
    assert_false(cfg->tenants.list[1].best_effort);
    assert_int_equal(cfg->tenants.list[1].max_sessions, 0);

    /* cap = 0.04% rounded to no cap at all */
    refused("[tenant a]\ntoken = x\ncap = 0.04%\n", 3, "below the smallest cap");
    refused("[tenant a]\ntoken = x\ncap = 0%\n", 3, "expected a share of GPU time");
    refused("[tenant a]\ntoken = x\ncap = 120%\n", 3, "expected a share of GPU time");
    refused("[tenant a]\ntoken = x\ncap = nan\n", 3, "expected a share of GPU time");
    refused("[tenant a]\ntoken = x\ncap = 0x1p-1\n", 3, "expected a share of GPU time");
    /* '+' inside the hex (sscanf %2x took "+f") */
    hex[10] = '+';
    snprintf(text, sizeof(text), "[tenant a]\ntoken_sha256 = %s\n", hex);
    refused(text, 2, "invalid setting 'token_sha256': expected 64 hex digits");
    assert_null(strstr(errs.lines[0], hex)); /* secret-flagged: never shown */
    hex[10] = ' ';
    snprintf(text, sizeof(text), "[tenant a]\ntoken_sha256 = %s\n", hex);
    refused(text, 2, "expected 64 hex digits");
    srv_token_hash_hex("t0k", hex);
    /* token and token_sha256 together, either order: the hash won silently */
    snprintf(text, sizeof(text), "[tenant a]\ntoken = x\ntoken_sha256 = %s\n", hex);
    refused(text, 3, "token and token_sha256 are both set");
    snprintf(text, sizeof(text), "[tenant a]\ntoken_sha256 = %s\ntoken = x\n", hex);
    refused(text, 3, "token and token_sha256 are both set");
    /* a section twice: merged before, the last token winning */
    refused("[tenant a]\ntoken = one\n[tenant b]\ntoken = b\n[tenant a]\ntoken = two\n", 5,
            "[tenant a] is already at line 1");
    refused("[tenant a]\ntoken = one\ntoken = two\n", 3, "'token' is already set at line 2");
    refused("[tenant a]\ntoken =\n", 2, "invalid setting 'token': expected a token of 1 to 127");
    refused("[tenant a]\nclass = gold\n", 2, "expected one of guaranteed, best-effort");
    refused("[tenant a]\nweight = 0\n", 2, "expected a whole number from 1 to 1000000");
    refused("[tenant a]\nmax_sessions = 0\n", 2, "or unlimited");
}

/* More than 64 tenants, or a name of 64 characters: said as such (they were reported as
 * "invalid setting 'token_sha256'"). */
static void test_tenant_limits(void **state)
{
    static char text[65 * 40];
    size_t n = 0;

    (void)state;
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "[tenant t%d]\ntoken = k%d\n", i, i);
    refused(text, 129, "[tenant t64]: more than 64 tenants");
    snprintf(text, sizeof(text), "[tenant %064d]\ntoken = x\n", 0);
    refused(text, 1, "expected [tenant NAME]: one space, then a NAME of 1 to 63");
    snprintf(text, sizeof(text), "[tenant %063d]\ntoken = x\n", 0);
    assert_int_equal(parse(text), RG_OK);
    assert_int_equal(cfg->tenants.n, 1);
}

/* Flags go through the same setters: a bad value is an error, not a silent default. */
static void test_flags(void **state)
{
    char why[512], buf[32];

    (void)state;
    srv_config_init(cfg);
    assert_int_equal(srv_config_set(cfg, "port", "70000", why, sizeof(why)), RG_ERR_INVALID);
    assert_string_equal(why, "expected a whole number from 0 to 65535");
    assert_int_equal(cfg->port, SRV_DEFAULT_PORT);
    assert_int_equal(srv_config_set(cfg, "transport", "rmda", why, sizeof(why)), RG_ERR_INVALID);
    assert_int_equal(srv_config_set(cfg, "busy_poll_us", "fast", why, sizeof(why)), RG_ERR_INVALID);
    assert_int_equal(srv_config_set(cfg, "busy_poll_us", "1ms", why, sizeof(why)), RG_OK);
    assert_int_equal(cfg->busy_poll_us, 1000);
    /* what the supervisor passes its workers reads back the same */
    srv_config_format(cfg, "busy_poll_us", buf, sizeof(buf));
    assert_string_equal(buf, "1000us");
    assert_int_equal(srv_config_set(cfg, "transport", "rdma", why, sizeof(why)), RG_OK);
    srv_config_format(cfg, "transport", buf, sizeof(buf));
    assert_string_equal(buf, "rdma");
    srv_config_format(cfg, "log_level", buf, sizeof(buf));
    assert_string_equal(buf, "info");
}

/* A server with no tenant: a warning, or with require_tenants = yes an error. */
static void test_require_tenants(void **state)
{
    (void)state;
    assert_int_equal(parse("[server]\nport = 1\n"), RG_OK);
    memset(&errs, 0, sizeof(errs));
    assert_int_equal(srv_config_check(cfg, "s.conf", collect, &errs), RG_OK);
    assert_int_equal(errs.n, 0);
    assert_int_equal(parse("[server]\nrequire_tenants = yes\n"), RG_OK);
    assert_int_equal(srv_config_check(cfg, "s.conf", collect, &errs), RG_ERR_INVALID);
    assert_int_equal(errs.n, 1);
    assert_non_null(strstr(errs.lines[0], "s.conf: require_tenants = yes and no [tenant NAME]"));
    assert_int_equal(parse("[server]\nrequire_tenants = yes\n[tenant a]\ntoken = x\n"), RG_OK);
    assert_int_equal(srv_config_check(cfg, "s.conf", collect, &errs), RG_OK);
}

/* srv_tenant_key (tests and tools) checks as the file does. */
static void test_tenant_key(void **state)
{
    struct srv_tenants *ts = calloc(1, sizeof(*ts));

    (void)state;
    assert_non_null(ts);
    assert_int_equal(srv_tenant_key(ts, "a", "token", "x"), RG_OK);
    assert_int_equal(srv_tenant_key(ts, "a", "mem_quota", "1 MiB"), RG_OK);
    assert_int_equal(srv_tenant_key(ts, "a", "cap", "0.04%"), RG_ERR_INVALID);
    assert_int_equal(srv_tenant_key(ts, "a", "polcy", "x"), RG_ERR_INVALID);
    assert_int_equal(ts->n, 1);
    assert_int_equal(ts->list[0].mem_quota, 1u << 20);
    free(ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_misspelled_sections),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_good_values),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_tenants),
        cmocka_unit_test(test_tenant_limits),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_require_tenants),
        cmocka_unit_test(test_tenant_key),
    };
    return cmocka_run_group_tests_name("server config", tests, setup, teardown);
}
