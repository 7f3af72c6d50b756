/* Issue 15: a session may not reach past its buffers or its quota. Each test drives a worker on
 * the fake driver over the wire (tests/worker/wire_peer.h) the way a hostile or merely unusual
 * client would, and checks what it may hold. */
#include "tests/worker/wire_peer.h"

#include "server/tenants.h"

#define H(n, type) ((((uint64_t)(n)) << 4) | (type))

/* A graph memcpy node between a shadow and device memory must fit the shadow's length: its
 * width x height at its pitch, not one byte of it (the worker wrote 1 MiB into 4 KiB). */
static void test_graph_memcpy_node_bounds(void **state)
{
    struct peer p;
    const uint64_t g = H(10, PROTO_H_GRAPH), shadow = H(11, PROTO_H_SHADOW);
    uint64_t a[16] = {0}, dev;

    (void)state;
    peer_open(&p, NULL, NULL);
    a[0] = 1 << 20;
    assert_int_equal(peer_call(&p, PROTO_OP_MEM_ALLOC, a, 1, &dev, 1), CUDA_SUCCESS);
    a[0] = shadow, a[1] = 4096;
    assert_int_equal(peer_call(&p, PROTO_OP_SHADOW_ALLOC, a, 2, NULL, 0), CUDA_SUCCESS);
    a[0] = g, a[1] = 0;
    assert_int_equal(peer_call(&p, PROTO_OP_GRAPH_CREATE, a, 2, NULL, 0), CUDA_SUCCESS);
    a[2] = CU_GRAPH_NODE_TYPE_MEMCPY, a[3] = 0;
    /* The fake driver takes one row only (Height 1), so the cases are single rows; the
     * worker checks (height - 1) * pitch + width for more. */
    /* device -> shadow, [srckind, src, srcpitch, dstkind, dst, dstpitch, width, height] */
    uint64_t *n = &a[4];
    struct { uint64_t width, height, pitch; CUresult want; } cases[] = {
        {4096, 1, 4096, CUDA_SUCCESS},               /* exactly the shadow */
        {1 << 20, 1, 1 << 20, CUDA_ERROR_INVALID_VALUE}, /* 1 MiB into 4 KiB */
        {4097, 1, 4097, CUDA_ERROR_INVALID_VALUE},   /* one byte past */
        {0, 1, 0, CUDA_SUCCESS},                     /* nothing */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        a[1] = H(100 + i, PROTO_H_GRAPH_NODE);
        n[0] = 0, n[1] = dev, n[2] = cases[i].pitch;
        n[3] = 1, n[4] = shadow, n[5] = cases[i].pitch, n[6] = cases[i].width, n[7] = cases[i].height;
        assert_int_equal(peer_call(&p, PROTO_OP_GRAPH_ADD_NODE, a, 16, NULL, 0), cases[i].want);
        /* the same with the shadow as the source (the worker's heap read back) */
        a[1] = H(200 + i, PROTO_H_GRAPH_NODE);
        n[0] = 1, n[1] = shadow, n[3] = 0, n[4] = dev;
        assert_int_equal(peer_call(&p, PROTO_OP_GRAPH_ADD_NODE, a, 16, NULL, 0), cases[i].want);
    }
    assert_int_equal(peer_call(&p, PROTO_OP_NOP, NULL, 0, NULL, 0), CUDA_SUCCESS);
    assert_int_equal(peer_finish(&p), 0);
}

/* Load text as a config file's tenants. */
static rg_status_t load_tenants(const char *text, struct srv_tenants *ts)
{
    char path[] = "/tmp/rgpu-limits-XXXXXX";
    int fd = mkstemp(path);
    rg_status_t st;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    st = srv_tenants_load(path, ts);
    unlink(path);
    return st;
}

/* A malformed token_sha256 (63 hex digits) left the tenant with no token, open to anyone; any
 * setting of a tenant that does not parse now fails the load. A '#' inside a token is kept. */
static void test_bad_tenant_settings_fail_load(void **state)
{
    struct srv_tenants ts;
    const char *why = NULL;
    char hex[65];

    (void)state;
    srv_token_hash_hex("h4sh", hex);
    hex[63] = '\0';
    char text[256];
    snprintf(text, sizeof(text), "[tenant bob]\ntoken_sha256 = %s\n", hex);
    assert_int_not_equal(load_tenants(text, &ts), RG_OK);
    assert_int_not_equal(load_tenants("[tenant bob]\nmem_quota = lots\n", &ts), RG_OK);
    assert_int_not_equal(load_tenants("[tenant bob]\ntoken = \"s3cret\n", &ts), RG_OK);
    assert_int_equal(load_tenants("[tenant bob]\ntoken = beta#secret # comment\n", &ts), RG_OK);
    assert_null(srv_tenant_auth(&ts, "bob", "beta", &why));
    assert_non_null(srv_tenant_auth(&ts, "bob", "beta#secret", &why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_memcpy_node_bounds),
        cmocka_unit_test(test_bad_tenant_settings_fail_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
