/* The session's components (server/component.h): the lifetime rules over a table made here
 * (each teardown once, in phase then table order, also after a failed init; none for a
 * component whose init did not run or failed), and the session's own table. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "proto/frame.h"
#include "proto/ops.h"
#include "server/component.h"
#include "server/server.h"
#include "server/session.h"
#include "server/tenant_config.h"
#include "tests/wire/wire_client.h"

/* ---- the lifetime rules, on a table of recording components --------------------------- */

#define NTEST 6

static struct {
    char inits[NTEST + 1], teardowns[NTEST + 1]; /* the names, in the order called */
    size_t ninit, nteardown;
    char fail; /* the component whose init fails, 0 = none */
} rec;

struct rec_state {
    char name;
    uint64_t zero[4]; /* allocated zeroed */
};

static rg_status_t rec_init(struct srv_session *s, void *state)
{
    struct rec_state *st = state;

    assert_non_null(st);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(st->zero[i], 0);
    st->name = (char)('a' + (int)rec.ninit);
    rec.inits[rec.ninit++] = st->name;
    return st->name == rec.fail ? RG_ERR_NOMEM : RG_OK;
}

static void rec_teardown(struct srv_session *s, void *state)
{
    struct rec_state *st = state;

    rec.teardowns[rec.nteardown++] = st->name;
}

static const struct srv_component rec_comp = {"rec", sizeof(struct rec_state), rec_init,
                                              rec_teardown};
static const struct srv_component bare_comp = {"bare", 0, NULL, NULL};

/* Table order a..f; phases chosen so that teardown order differs from it. */
static const struct srv_component_row rows[NTEST] = {
    {&rec_comp, SRV_PHASE_OBJECTS}, /* a */
    {&rec_comp, SRV_PHASE_STOP},    /* b */
    {&rec_comp, SRV_PHASE_RECORDS}, /* c */
    {&rec_comp, SRV_PHASE_STOP},    /* d */
    {&rec_comp, SRV_PHASE_HOST},    /* e */
    {&rec_comp, SRV_PHASE_OBJECTS}, /* f */
};

static int reset(void **state)
{
    memset(&rec, 0, sizeof(rec));
    return 0;
}

static void test_teardown_order(void **state)
{
    struct srv_components c = {{0}, 0};

    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_OK);
    assert_string_equal(rec.inits, "abcdef"); /* inits: table order */
    assert_string_equal(rec.teardowns, "");
    srv_components_teardown(&c, rows, NTEST, NULL);
    assert_string_equal(rec.teardowns, "bdeafc");   /* phase, then table order */
    srv_components_teardown(&c, rows, NTEST, NULL); /* once only */
    assert_string_equal(rec.teardowns, "bdeafc");
    for (size_t i = 0; i < NTEST; i++) /* readable until freed */
        assert_int_equal(((struct rec_state *)c.state[i])->name, 'a' + (int)i);
    srv_components_free(&c, NTEST);
    for (size_t i = 0; i < NTEST; i++)
        assert_null(c.state[i]);
}

/* e's init fails: a..d are torn down at once (in phase order), e and f never are, and the
 * session's teardown afterwards does nothing. */
static void test_failed_init(void **state)
{
    struct srv_components c = {{0}, 0};

    rec.fail = 'e';
    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_ERR_NOMEM);
    assert_string_equal(rec.inits, "abcde");
    assert_string_equal(rec.teardowns, "bdac");
    assert_int_equal(c.live, 0);
    for (size_t i = 0; i < NTEST; i++)
        assert_null(c.state[i]); /* freed, the failed one's too */
    srv_components_teardown(&c, rows, NTEST, NULL);
    srv_components_free(&c, NTEST);
    assert_string_equal(rec.teardowns, "bdac");
}

/* The first init fails: nothing is torn down. */
static void test_first_init_fails(void **state)
{
    struct srv_components c = {{0}, 0};

    rec.fail = 'a';
    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_ERR_NOMEM);
    assert_string_equal(rec.teardowns, "");
    srv_components_teardown(&c, rows, NTEST, NULL);
    assert_string_equal(rec.teardowns, "");
}

/* A component without state, init or teardown is live with a NULL state; too many rows are
 * refused before anything is set up. */
static void test_bare_and_bounds(void **state)
{
    struct srv_component_row two[2] = {{&bare_comp, SRV_PHASE_STOP}, {&rec_comp, SRV_PHASE_STOP}};
    struct srv_component_row many[SRV_COMPONENTS_MAX + 1];
    struct srv_components c = {{0}, 0};

    assert_int_equal(srv_components_init(&c, two, 2, NULL), RG_OK);
    assert_null(c.state[0]);
    assert_int_equal(c.live, 3);
    srv_components_teardown(&c, two, 2, NULL);
    srv_components_free(&c, 2);
    assert_string_equal(rec.teardowns, "a");
    for (size_t i = 0; i < SRV_COMPONENTS_MAX + 1; i++)
        many[i] = two[1];
    assert_int_equal(srv_components_init(&c, many, SRV_COMPONENTS_MAX + 1, NULL), RG_ERR_INVALID);
    assert_int_equal(rec.ninit, 1);
}

/* ---- the session's table ---------------------------------------------------------------- */

/* Every row names a component once, in a known phase. */
static void test_session_table(void **state)
{
    for (size_t i = 0; i < SRV_COMP_COUNT; i++) {
        const struct srv_component_row *r = &srv_component_table[i];
        assert_non_null(r->comp);
        assert_non_null(r->comp->name);
        assert_true(r->phase < SRV_PHASE_COUNT);
        for (size_t j = 0; j < i; j++) {
            assert_ptr_not_equal(srv_component_table[j].comp, r->comp);
            assert_string_not_equal(srv_component_table[j].comp->name, r->comp->name);
        }
    }
}

/* A session set up and torn down without a handshake (a port probe): every component's
 * teardown copes with a session that never opened its driver, and nothing leaks (ASan). */
static void test_session_without_handshake(void **state)
{
    struct srv_session s;

    memset(&s, 0, sizeof(s));
    assert_int_equal(srv_session_init(&s), RG_OK);
    for (size_t i = 0; i < SRV_COMP_COUNT; i++)
        assert_true(s.comps.live & (1ull << i));
    srv_session_teardown(&s);
    assert_int_equal(s.comps.live, 0);
    srv_session_teardown(&s); /* a second teardown finds nothing to do */
}

/* Two sessions side by side in one process: the parts that kept their state in the session
 * object or in file-static variables (keepalive, lanes, tenancy, kernels' output, peer copies)
 * each own a state of their own per session, set up with it and readable until it is freed. */
static void test_states_per_session(void **state)
{
    static const enum srv_component_id ids[] = {SRV_COMP_KEEPALIVE, SRV_COMP_LANES,
                                                SRV_COMP_TENANCY, SRV_COMP_OUTPUT, SRV_COMP_PEER};
    struct srv_session a, b;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    assert_int_equal(srv_session_init(&a), RG_OK);
    assert_int_equal(srv_session_init(&b), RG_OK);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        assert_non_null(srv_component_state(&a, ids[i]));
        assert_non_null(srv_component_state(&b, ids[i]));
        assert_ptr_not_equal(srv_component_state(&a, ids[i]), srv_component_state(&b, ids[i]));
    }
    srv_session_teardown(&b);
    srv_session_teardown(&a);
}

/* ---- several sessions in one process, one after the other (as under fuzz_worker) --------- */

static struct srv_config cfg = {.driver = FAKECUDA_PATH,
                                .log_level = RG_LOG_ERROR,
                                .name = "test",
                                .module_cache = "off",
                                .host_nvml = "off"};

struct client {
    struct transport_conn *conn;
    uint64_t next_id;
    uint8_t buf[1 << 16];
};

/* LeakSanitizer's check, when the test runs under it (the ASan build): a child that served
 * sessions in process leaks nothing they held. */
extern void __lsan_do_leak_check(void) __attribute__((weak));

/* A child process that serves n sessions in turn, in process, on connections to *addr. */
static pid_t serve_in_process(int n, char *addr, size_t len)
{
    struct transport_listener *l;
    pid_t pid;

    assert_int_equal(transport_tcp_ops.listen("127.0.0.1:0", &l), RG_OK);
    assert_int_equal(transport_tcp_ops.listener_addr(l, addr, len), RG_OK);
    if ((pid = fork()) == 0) {
        for (int i = 0; i < n; i++) {
            struct transport_conn *c;
            if (transport_tcp_ops.accept(l, &c) != RG_OK)
                _exit(98);
            srv_worker_run(&cfg, dup(transport_fd(c)), (uint64_t)i + 1, "test-peer");
            transport_close(c);
        }
        if (__lsan_do_leak_check != NULL)
            __lsan_do_leak_check(); /* exits with an error when anything leaked */
        _exit(0);
    }
    transport_tcp_ops.listener_close(l);
    return pid;
}

static void client_open(struct client *c, const char *addr)
{
    Rgpu__Hello h = RGPU__HELLO__INIT;

    assert_int_equal(transport_tcp_ops.connect(addr, NULL, &c->conn), RG_OK);
    c->next_id = 1;
    h.proto_version = PROTO_VERSION;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.tenant = "t";
    h.token = "k";
    rgpu__welcome__free_unpacked(wire_hello(c->conn, &h, c->buf, sizeof(c->buf)), NULL);
}

/* One call in context ctx; the result, its out[] words in out (up to cap). */
static CUresult call_in(struct client *c, uint64_t ctx, unsigned op, const uint64_t *args,
                        size_t nargs, const void *data, size_t len, uint64_t *out, size_t cap)
{
    Rgpu__Reply *r;
    CUresult res;

    wire_call(c->conn, c->next_id++, ctx, op, args, nargs, 0, data, len, NULL, 0);
    r = wire_reply(c->conn, c->buf, sizeof(c->buf), NULL, 0);
    res = (CUresult)r->result;
    for (size_t i = 0; i < r->n_out && i < cap; i++)
        out[i] = r->out[i];
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

static CUresult call(struct client *c, unsigned op, const uint64_t *args, size_t nargs,
                     const void *data, size_t len, uint64_t *out, size_t cap)
{
    return call_in(c, PROTO_PRIMARY_CTX_ID(0), op, args, nargs, data, len, out, cap);
}

/* What MEM_GET_INFO says is free (the tenant's 4 MiB quota less what the session holds). */
static uint64_t quota_free(struct client *c)
{
    uint64_t out[2] = {0, 0};

    assert_int_equal(call(c, WIRE_OP(MEM_GET_INFO), NULL, 0, out, 2), CUDA_SUCCESS);
    return out[0];
}

/* A new stream capturing, its graph bound to the id g (STREAM_GET_CAPTURE_INFO). */
static void capture_bound(struct client *c, uint64_t stream, uint64_t g, uint64_t out[8])
{
    assert_int_equal(call(c, WIRE_OP(STREAM_CREATE, .id = stream, .flags = CU_STREAM_NON_BLOCKING),
                          NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        call(c,
             WIRE_OP(STREAM_BEGIN_CAPTURE, .stream = stream, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL),
             NULL, 0, NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(call(c,
                          WIRE_OP(STREAM_GET_CAPTURE_INFO, .stream = stream, .graph = g, .bind = 1),
                          NULL, 0, out, 8),
                     CUDA_SUCCESS);
}

/* A server-to-server receive never waited for ends with its session (e11cedd: it outlived it,
 * and in a process that serves another session next, that session's PEER_WAIT joined it and
 * closed a descriptor number reused since): once the next session answers, the receive's port
 * is closed, and the next session has no receive to wait for. A capture left bound and a
 * limit left charged end with their session too (ASan: nothing leaks or is reached after). */
static void test_sessions_in_one_process(void **state)
{
    const uint64_t stream = (800ull << 4) | PROTO_H_STREAM, g = (801ull << 4) | PROTO_H_GRAPH;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint8_t secret[32] = {7};
    uint64_t out[8] = {0};
    struct client *c = calloc(1, sizeof(*c));
    char addr[64];
    int status, fd;
    pid_t pid = serve_in_process(2, addr, sizeof(addr));

    assert_non_null(c);
    client_open(c, addr);
    assert_int_equal(
        call(c, WIRE_OP(PEER_RECV, .dst = 0x10000, .size = 4096), secret, sizeof(secret), out, 1),
        CUDA_SUCCESS);
    to.sin_port = htons((uint16_t)out[0]);
    capture_bound(c, stream, g, out);
    assert_int_equal(
        call(c, WIRE_OP(CTX_SET_LIMIT, .limit = CU_LIMIT_MALLOC_HEAP_SIZE, .value = 1 << 20), NULL,
             0, NULL, 0),
        CUDA_SUCCESS);
    transport_close(c->conn); /* the session ends with all of that held */

    client_open(c, addr);
    assert_int_equal(call(c, WIRE_OP(NOP), NULL, 0, NULL, 0), CUDA_SUCCESS);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), -1);
    assert_int_equal(errno, ECONNREFUSED);
    close(fd);
    assert_int_equal(call(c, WIRE_OP(PEER_WAIT, .cancel = 1), NULL, 0, NULL, 0),
                     CUDA_ERROR_ILLEGAL_STATE);
    /* the same ids are this session's to bind anew */
    capture_bound(c, stream, g, out);
    assert_int_equal(
        call(c, WIRE_OP(STREAM_END_CAPTURE, .stream = stream, .graph = g), NULL, 0, NULL, 0),
        CUDA_SUCCESS);
    transport_close(c->conn);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(c);
}

/* The limits component (session_limits.c): a context's malloc heap is charged to the quota, its
 * destruction gives that back, and what a session still had charged at its end is its own:
 * the next session in the process starts with the whole quota (and, under LeakSanitizer, the
 * table of charges went with the first: 8c7997e). */
static void test_limits_component(void **state)
{
    const uint64_t mib = 1u << 20, ctx_a = (900ull << 4) | PROTO_H_CTX;
    const uint64_t ctx_b = (901ull << 4) | PROTO_H_CTX;
    struct client *c = calloc(1, sizeof(*c));
    char addr[64];
    int status;
    pid_t pid = serve_in_process(2, addr, sizeof(addr));

    assert_non_null(c);
    client_open(c, addr);
    assert_int_equal(quota_free(c), 4 * mib);
    for (uint64_t ctx = ctx_a; ctx <= ctx_b; ctx += 16) {
        assert_int_equal(call(c, WIRE_OP(CTX_CREATE, .id = ctx), NULL, 0, NULL, 0), CUDA_SUCCESS);
        assert_int_equal(
            call_in(c, ctx,
                    WIRE_OP(CTX_SET_LIMIT, .limit = CU_LIMIT_MALLOC_HEAP_SIZE, .value = mib), NULL,
                    0, NULL, 0),
            CUDA_SUCCESS);
    }
    assert_int_equal(quota_free(c), 2 * mib);
    assert_int_equal(call(c, WIRE_OP(CTX_DESTROY, .ctx = ctx_a), NULL, 0, NULL, 0), CUDA_SUCCESS);
    assert_int_equal(quota_free(c), 3 * mib);
    transport_close(c->conn); /* ends with ctx_b's heap charged */

    client_open(c, addr);
    assert_int_equal(quota_free(c), 4 * mib);
    transport_close(c->conn);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_teardown_order, reset),
        cmocka_unit_test_setup(test_failed_init, reset),
        cmocka_unit_test_setup(test_first_init_fails, reset),
        cmocka_unit_test_setup(test_bare_and_bounds, reset),
        cmocka_unit_test(test_session_table),
        cmocka_unit_test(test_session_without_handshake),
        cmocka_unit_test(test_states_per_session),
        cmocka_unit_test(test_sessions_in_one_process),
        cmocka_unit_test(test_limits_component),
    };
    rg_log_level_current = RG_LOG_WARN; /* the in-process workers' log */
    if (srv_tenant_key(&cfg.tenants, "t", "token", "k") != RG_OK ||
        srv_tenant_key(&cfg.tenants, "t", "mem_quota", "4MiB") != RG_OK)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
