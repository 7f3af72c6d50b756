/* Authentication does the same work whatever the peer sent (issue 27 item 5): srv_tenant_auth
 * hashes and compares as much for an unknown tenant as for a known one with a wrong token (the
 * timing that told a peer which tenant names exist came from returning before the hash), counted
 * here by wrapping the hash and the comparison at link time (-Wl,--wrap). And the one gate
 * (server/peer_gate.h) refuses both alike, naming no tenant. Timing itself is measured by
 * bench/auth_timing.c, not asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/sha256.h"
#include "server/peer_gate.h"
#include "server/preauth.h"
#include "server/tenant_config.h"

static int hashes, compares;

void __real_rg_sha256(const void *data, size_t len, uint8_t out[RG_SHA256_LEN]);
void __wrap_rg_sha256(const void *data, size_t len, uint8_t out[RG_SHA256_LEN])
{
    hashes++;
    __real_rg_sha256(data, len, out);
}

bool __real_rg_secret_equal(const void *a, const void *b, size_t len);
bool __wrap_rg_secret_equal(const void *a, const void *b, size_t len)
{
    compares++;
    return __real_rg_secret_equal(a, b, len);
}

static struct srv_tenants tenants;

/* Filled directly (not through the config parser): "hashed" keeps the SHA-256 of its token,
 * "plain" the token itself, and a few others around them. */
static int setup(void **state)
{
    static const char *const names[] = {"alpha", "hashed", "beta", "plain", "gamma"};

    memset(&tenants, 0, sizeof(tenants));
    for (int i = 0; i < 5; i++) {
        struct srv_tenant *t = &tenants.list[tenants.n++];
        snprintf(t->name, sizeof(t->name), "%s", names[i]);
        snprintf(t->token, sizeof(t->token), "%s-token-of-some-32-characters", names[i]);
        if (i % 2 == 1) {
            __real_rg_sha256(t->token, strlen(t->token), t->token_sha256);
            memset(t->token, 0, sizeof(t->token));
            t->hashed = true;
        }
    }
    return 0;
}

struct work {
    int hashes, compares;
    bool ok;
};

static struct work auth(const char *name, const char *token)
{
    const char *why = NULL;
    struct work w;

    hashes = compares = 0;
    w.ok = srv_tenant_auth(&tenants, name, token, &why) != NULL;
    w.hashes = hashes;
    w.compares = compares;
    if (!w.ok)
        assert_non_null(why);
    return w;
}

static void test_same_work(void **state)
{
    struct work unknown = auth("nobody", "wrong-token-of-some-32-characters"),
                wrong_hashed = auth("hashed", "wrong-token-of-some-32-characters"),
                wrong_plain = auth("plain", "wrong-token-of-some-32-characters"),
                right_hashed = auth("hashed", "hashed-token-of-some-32-characters"),
                right_plain = auth("plain", "plain-token-of-some-32-characters"),
                too_long = auth("a-tenant-name-longer-than-any-tenant-name-field-can-hold-"
                                "0123456789",
                                "x"),
                no_name = auth(NULL, NULL);

    assert_false(unknown.ok);
    assert_false(wrong_hashed.ok);
    assert_false(wrong_plain.ok);
    assert_true(right_hashed.ok);
    assert_true(right_plain.ok);
    assert_false(too_long.ok);
    assert_false(no_name.ok);
    /* the work: as many hashes and constant-time comparisons in every case */
    assert_true(unknown.hashes > 0);
    assert_int_equal(wrong_hashed.hashes, unknown.hashes);
    assert_int_equal(wrong_plain.hashes, unknown.hashes);
    assert_int_equal(right_hashed.hashes, unknown.hashes);
    assert_int_equal(right_plain.hashes, unknown.hashes);
    assert_int_equal(too_long.hashes, unknown.hashes);
    assert_int_equal(no_name.hashes, unknown.hashes);
    assert_true(unknown.compares > tenants.n); /* every name, and the digest */
    assert_int_equal(wrong_hashed.compares, unknown.compares);
    assert_int_equal(wrong_plain.compares, unknown.compares);
    assert_int_equal(right_plain.compares, unknown.compares);
    assert_int_equal(too_long.compares, unknown.compares);
}

static void test_gate_refuses_alike(void **state)
{
    struct srv_gate a, b, v, open;
    struct srv_tenants none = {.n = 0};

    assert_false(srv_peer_gate(&tenants,
                               &(struct srv_gate_peer){"hello", "peer", NULL, PROTO_VERSION,
                                                       PROTO_VERSION_MINOR, "nobody", "x"},
                               &a));
    assert_false(srv_peer_gate(&tenants,
                               &(struct srv_gate_peer){"probe", "peer", "client x", PROTO_VERSION,
                                                       PROTO_VERSION_MINOR, "hashed", "x"},
                               &b));
    assert_int_equal(a.status, CUDA_ERROR_NOT_PERMITTED);
    assert_int_equal(b.status, CUDA_ERROR_NOT_PERMITTED);
    assert_string_equal(a.reason, SRV_AUTH_REFUSED);
    assert_string_equal(b.reason, SRV_AUTH_REFUSED);
    assert_null(strstr(a.reason, "nobody"));
    /* the version first: a peer of another major hears that, whatever its token */
    assert_false(
        srv_peer_gate(&tenants,
                      &(struct srv_gate_peer){"hello", "peer", NULL, PROTO_VERSION + 1, 0, "hashed",
                                              "hashed-token-of-some-32-characters"},
                      &v));
    assert_int_equal(v.status, CUDA_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(v.reason, "protocol version mismatch"));
    /* through: the tenant and the session's minor */
    assert_true(srv_peer_gate(&tenants,
                              &(struct srv_gate_peer){"hello", "peer", NULL, PROTO_VERSION,
                                                      PROTO_VERSION_MINOR - 1, "plain",
                                                      "plain-token-of-some-32-characters"},
                              &a));
    assert_string_equal(a.tenant->name, "plain");
    assert_int_equal(a.minor, PROTO_VERSION_MINOR - 1);
    /* a server without tenants: any peer of a version it speaks, no tenant */
    assert_true(srv_peer_gate(&none,
                              &(struct srv_gate_peer){"probe", "peer", NULL, PROTO_VERSION,
                                                      PROTO_VERSION_MINOR, "evil\nname", NULL},
                              &open));
    assert_null(open.tenant);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_work),
        cmocka_unit_test(test_gate_refuses_alike),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
