/* gpu-server's session worker driven directly over TCP, on the fake driver: handshake, copies
 * inline and as bulk, asynchronous errors, bad handles and ops, malformed input, disconnect;
 * and the session handle table. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "common/sha256.h"
#include "proto/frame.h"
#include "proto/ops.h"
#include "server/server.h"
#include "server/session.h"
#include "server/session_table.h"
#include "tests/wire/wire_client.h"

#define BIG (32u << 20)

struct peer {
    struct transport_conn *conn;
    pid_t pid;
    uint8_t buf[1 << 16];
};

static const char *worker_log; /* the next workers' stderr goes here when set */

static struct srv_config cfg = {.driver = FAKECUDA_PATH, .log_level = RG_LOG_ERROR, .name = "test"};

/* A worker in a child process, serving one TCP connection whose other end we keep. */
static void start_worker(struct peer *p)
{
    struct transport_listener *l;
    struct transport_conn *srv;
    char addr[64];

    assert_int_equal(transport_tcp_ops.listen("127.0.0.1:0", &l), RG_OK);
    assert_int_equal(transport_tcp_ops.listener_addr(l, addr, sizeof(addr)), RG_OK);
    assert_int_equal(transport_tcp_ops.connect(addr, NULL, &p->conn), RG_OK);
    assert_int_equal(transport_tcp_ops.accept(l, &srv), RG_OK);
    p->pid = fork();
    if (p->pid == 0) {
        transport_close(p->conn);
        if (worker_log != NULL && freopen(worker_log, "w", stderr) == NULL)
            _exit(99);
        _exit(srv_worker_run(&cfg, dup(transport_fd(srv)), 7, "test-peer"));
    }
    transport_close(srv);
    transport_tcp_ops.listener_close(l);
}

static int finish(struct peer *p)
{
    int status;

    transport_close(p->conn);
    assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static Rgpu__Welcome *hello_as(struct peer *p, uint32_t version, const char *tenant,
                               const char *token)
{
    Rgpu__Hello h = RGPU__HELLO__INIT;

    h.proto_version = version;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.tenant = (char *)tenant;
    h.token = (char *)token;
    return wire_hello(p->conn, &h, p->buf, sizeof(p->buf));
}

static Rgpu__Welcome *hello(struct peer *p, uint32_t version)
{
    return hello_as(p, version, "", "");
}

/* One Call: its op and arguments (WIRE_OP), frame flags, inline data and bulk. */
static void send_call(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                      unsigned flags, const void *data, size_t len, const void *bulk,
                      size_t bulk_len)
{
    static uint64_t id = 1;

    wire_call(p->conn, id++, PROTO_PRIMARY_CTX_ID(0), op, args, nargs, flags, data, len, bulk,
              bulk_len);
}

/* The next Reply; its bulk (if any) goes to bulk. */
static Rgpu__Reply *reply(struct peer *p, void *bulk, size_t cap)
{
    return wire_reply(p->conn, p->buf, sizeof(p->buf), bulk, cap);
}

static uint64_t alloc(struct peer *p, uint64_t size)
{
    Rgpu__Reply *r;
    uint64_t d;

    send_call(p, WIRE_OP(MEM_ALLOC, .size = size), 0, NULL, 0, NULL, 0);
    r = reply(p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->n_out, 1);
    d = r->out[0];
    rgpu__reply__free_unpacked(r, NULL);
    return d;
}

static void test_handshake(void **state)
{
    struct peer p;
    Rgpu__Welcome *w;

    start_worker(&p);
    w = hello(&p, PROTO_VERSION);
    assert_non_null(w);
    assert_int_equal(w->status, 0);
    assert_int_equal(w->n_devices, 1);
    assert_string_equal(w->devices[0]->name, "rgpu fake device");
    assert_int_equal(w->devices[0]->n_attrs, CU_DEVICE_ATTRIBUTE_MAX);
    assert_int_equal(w->devices[0]->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR], 9);
    assert_int_equal(w->devices[0]->uuid.len, 16);
    rgpu__welcome__free_unpacked(w, NULL);
    assert_int_equal(finish(&p), 0);
}

static void test_version_mismatch(void **state)
{
    struct peer p;
    Rgpu__Welcome *w;

    start_worker(&p);
    w = hello(&p, 99);
    assert_int_not_equal(w->status, 0);
    assert_non_null(strstr(w->reason, "client speaks 99, server speaks 1"));
    rgpu__welcome__free_unpacked(w, NULL);
    assert_int_equal(finish(&p), 0);
}

/* The first op newer than minor, or PROTO_OP_COUNT when none is. */
static unsigned newer_op(uint32_t minor)
{
    unsigned op = 0;

    while (op < PROTO_OP_COUNT && proto_ops[op].minor <= minor)
        op++;
    return op;
}

/* A client of the previous minor is served, and told the server's minor; a newer minor is
 * served too; a call of an op the server does not know is refused with NOT_SUPPORTED and the
 * session goes on, and so is, for the older client, an op newer than its minor (the first op of
 * the current minor). */
static void test_older_client(void **state)
{
    uint32_t minors[] = {PROTO_VERSION_MINOR - PROTO_MINORS_BACK, PROTO_VERSION_MINOR + 3};
    struct peer p;
    Rgpu__Welcome *w;
    Rgpu__Reply *r;

    for (size_t i = 0; i < 2; i++) {
        Rgpu__Hello h = RGPU__HELLO__INIT;

        start_worker(&p);
        h.proto_version = PROTO_VERSION;
        h.proto_minor = minors[i];
        w = wire_hello(p.conn, &h, p.buf, sizeof(p.buf));
        assert_int_equal(w->status, 0);
        assert_int_equal(w->proto_version, PROTO_VERSION);
        assert_int_equal(w->proto_minor, PROTO_VERSION_MINOR);
        rgpu__welcome__free_unpacked(w, NULL);
        send_call(&p, PROTO_OP_COUNT + 7, NULL, 0, 0, NULL, 0, NULL, 0); /* positional: no op */
        r = reply(&p, NULL, 0);
        assert_int_equal(r->result, CUDA_ERROR_NOT_SUPPORTED);
        rgpu__reply__free_unpacked(r, NULL);
        if (i == 0 && newer_op(minors[0]) < PROTO_OP_COUNT) { /* when a minor since brought */
            unsigned newer = newer_op(minors[0]);             /* ops, not frames only */

            /* positional: an op chosen by its number */
            send_call(&p, newer, NULL, 0, 0, NULL, 0, NULL, 0);
            r = reply(&p, NULL, 0);
            assert_int_equal(r->result, CUDA_ERROR_NOT_SUPPORTED);
            assert_int_equal(r->n_out, 0);
            rgpu__reply__free_unpacked(r, NULL);
        }
        send_call(&p, WIRE_OP(NOP), 0, NULL, 0, NULL, 0);
        r = reply(&p, NULL, 0);
        assert_int_equal(r->result, CUDA_SUCCESS);
        rgpu__reply__free_unpacked(r, NULL);
        assert_int_equal(finish(&p), 0);
    }
}

static void test_copies(void **state)
{
    struct peer p;
    uint8_t *src = malloc(BIG), *dst = malloc(BIG);
    uint64_t d;
    Rgpu__Reply *r;

    for (size_t i = 0; i < BIG; i++)
        src[i] = (uint8_t)(i * 13 + (i >> 16));
    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    d = alloc(&p, BIG);
    /* 32 MiB as bulk, then its first 100 bytes overwritten inline. */
    send_call(&p, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = BIG, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, src, BIG);
    r = reply(&p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    rgpu__reply__free_unpacked(r, NULL);
    memset(src, 0x5a, 100);
    send_call(&p, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = 100, .stream = PROTO_STREAM_NULL),
              PROTO_FLAG_NOREPLY, src, 100, NULL, 0);
    /* Back as streamed bulk, and a small piece inline. */
    send_call(&p, WIRE_OP(MEMCPY_DTOH, .src = d, .size = BIG, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, NULL, 0);
    r = reply(&p, dst, BIG);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_memory_equal(src, dst, BIG);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(&p, WIRE_OP(MEMCPY_DTOH, .src = d + 50, .size = 60, .stream = PROTO_STREAM_NULL), 0,
              NULL, 0, NULL, 0);
    r = reply(&p, NULL, 0);
    assert_int_equal(r->data.len, 60);
    assert_memory_equal(r->data.data, src + 50, 60);
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(finish(&p), 0);
    free(src);
    free(dst);
}

static void test_async_error_and_bad_calls(void **state)
{
    struct peer p;
    struct proto_frame_hdr hdr;
    uint64_t d;
    Rgpu__AsyncError *e;
    Rgpu__Reply *r;

    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    d = alloc(&p, 4096);
    send_call(&p, WIRE_OP(MEMCPY_DTOD, .dst = d + (1ull << 40), .src = d, .size = 64, .async = 1),
              PROTO_FLAG_NOREPLY, NULL, 0, NULL, 0);
    send_call(&p, WIRE_OP(NOP), 0, NULL, 0, NULL, 0);
    assert_int_equal(proto_recv(p.conn, &hdr, p.buf, sizeof(p.buf)), RG_OK);
    assert_int_equal(hdr.type, PROTO_ASYNC_ERROR); /* before the NOP's reply */
    e = rgpu__async_error__unpack(NULL, hdr.msg_len, p.buf);
    assert_int_equal(e->result, CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(e->op, PROTO_OP_MEMCPY_DTOD);
    rgpu__async_error__free_unpacked(e, NULL);
    r = reply(&p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(&p, WIRE_OP(STREAM_SYNCHRONIZE, .stream = (12345ull << 4) | PROTO_H_STREAM), 0, NULL,
              0, NULL, 0);
    r = reply(&p, NULL, 0);
    assert_int_equal(r->result, CUDA_ERROR_INVALID_HANDLE);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(&p, 999, NULL, 0, 0, NULL, 0, NULL, 0); /* positional: an op number of no op */
    r = reply(&p, NULL, 0);
    assert_int_equal(r->result, CUDA_ERROR_NOT_SUPPORTED);
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(finish(&p), 0);
}

/* One call and the result of its reply; its out[] words into out (up to cap). */
static CUresult call_outs(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                          const void *data, size_t len, uint64_t *out, size_t cap)
{
    Rgpu__Reply *r;
    CUresult res;

    send_call(p, op, args, nargs, 0, data, len, NULL, 0);
    r = reply(p, NULL, 0);
    res = (CUresult)r->result;
    for (size_t i = 0; i < r->n_out && i < cap; i++)
        out[i] = r->out[i];
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

/* One call and the result of its reply. */
static CUresult call_result(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                            const void *data, size_t len)
{
    return call_outs(p, op, args, nargs, data, len, NULL, 0);
}

/* The newer ops check what the wire names: unknown or mistyped handles, ranges outside a
 * shadow, a link input without its name, a pitched copy larger than it can be; each is refused
 * with CUDA's error and the session goes on. */
static void test_hostile_arguments(void **state)
{
    struct peer p;
    const uint64_t no_graph = (777ull << 4) | PROTO_H_GRAPH,
                   no_node = (778ull << 4) | PROTO_H_GRAPH_NODE;
    const uint64_t shadow = (779ull << 4) | PROTO_H_SHADOW, link = (780ull << 4) | PROTO_H_LINK;
    const uint64_t g = (781ull << 4) | PROTO_H_GRAPH;
    static const char input[] = "no name terminator";
    uint64_t d;

    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    assert_int_equal(call_result(&p,
                                 WIRE_OP(GRAPH_ADD_NODE, .graph = no_graph, .node = no_node,
                                         .type = CU_GRAPH_NODE_TYPE_EMPTY),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_CREATE, .id = g), NULL, 0), CUDA_SUCCESS);
    /* one dependency that does not exist */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = no_node,
                                         .type = CU_GRAPH_NODE_TYPE_EMPTY, .ndeps = 1),
                                 &no_node, 8),
                     CUDA_ERROR_INVALID_VALUE);
    /* more dependencies than a node may have */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = no_node,
                                         .type = CU_GRAPH_NODE_TYPE_EMPTY, .ndeps = 65),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    /* edges with their data reach the driver: a programmatic edge between empty nodes is its
     * refusal, the same edge as a default one is taken; data of the wrong length is refused */
    uint64_t e[3] = {(785ull << 4) | PROTO_H_GRAPH_NODE, (786ull << 4) | PROTO_H_GRAPH_NODE, 0};
    CUgraphEdgeData *edge = (CUgraphEdgeData *)&e[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(call_result(&p,
                                     WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = e[i],
                                             .type = CU_GRAPH_NODE_TYPE_EMPTY),
                                     NULL, 0),
                         CUDA_SUCCESS);
    edge->type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
    edge->from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    assert_int_equal(
        call_result(&p, WIRE_OP(GRAPH_ADD_DEPS, .graph = g, .n = 1, .has_edges = 1), e, 24),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(
        call_result(&p, WIRE_OP(GRAPH_ADD_DEPS, .graph = g, .n = 1, .has_edges = 1), e, 16),
        CUDA_ERROR_INVALID_VALUE);
    e[2] = 0;
    assert_int_equal(
        call_result(&p, WIRE_OP(GRAPH_ADD_DEPS, .graph = g, .n = 1, .has_edges = 1), e, 24),
        CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_ADD_DEPS, .graph = g, .n = 1), e, 24),
                     CUDA_ERROR_INVALID_VALUE);
    /* structure queries: the dependency just added; a node not there, a query not known */
    uint64_t q[4] = {0};
    assert_int_equal(
        call_outs(&p, WIRE_OP(GRAPH_NODE_QUERY, .graph = g, .node = e[1], .what = 1, .max = 4),
                  NULL, 0, q, 4),
        CUDA_SUCCESS);
    assert_int_equal(q[0], 1);
    assert_int_equal(q[1], e[0]);
    assert_int_equal(
        call_result(&p, WIRE_OP(GRAPH_NODE_QUERY, .graph = g, .node = no_node, .what = 1, .max = 4),
                    NULL, 0),
        CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(
        call_result(&p, WIRE_OP(GRAPH_NODE_QUERY, .graph = g, .node = e[1], .what = 3, .max = 4),
                    NULL, 0),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(SHADOW_ALLOC, .id = shadow, .size = 4096), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, /* [4000, 4200) of 4096 bytes */
                                 WIRE_OP(SHADOW_READ, .shadow = shadow, .offset = 4000, .len = 200,
                                         .stream = PROTO_STREAM_NULL),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, /* wraps */
                                 WIRE_OP(SHADOW_READ, .shadow = shadow, .offset = UINT64_MAX - 8,
                                         .len = 16, .stream = PROTO_STREAM_NULL),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(
        call_result(&p, WIRE_OP(MEM_CREATE, .id = (782ull << 4) | PROTO_H_MEM_HANDLE), "short", 5),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p,
                                 WIRE_OP(MEM_MAP, .ptr = 0x10000, .size = 1 << 21,
                                         .handle = (783ull << 4) | PROTO_H_MEM_HANDLE),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    /* a created pool that was never created */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(MEM_POOL_TRIM, .pool = (784ull << 4) | PROTO_H_MEM_POOL,
                                         .keep = 1 << 21),
                                 NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    /* JIT option words may only carry integer options: never a pointer the driver writes to */
    uint64_t word = ((uint64_t)CU_JIT_INFO_LOG_BUFFER << 32) | 0x1000;
    assert_int_equal(call_result(&p, WIRE_OP(LINK_CREATE, .id = link), &word, 8),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(
        call_result(&p, WIRE_OP_REST(MODULE_LOAD_JIT, (word), .id = link), input, sizeof(input)),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(LINK_CREATE, .id = link), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(
        call_result(&p, WIRE_OP(LINK_ADD_DATA, .link = link, .input_type = CU_JIT_INPUT_PTX), input,
                    sizeof(input) - 1),
        CUDA_ERROR_INVALID_VALUE);
    d = alloc(&p, 4096);
    assert_int_equal(
        call_result(&p, /* 2^46 bytes of rows */
                    WIRE_OP(MEMCPY_2D, .dir = 0, .dst = d, .dpitch = 64, .spitch = 64, .width = 64,
                            .height = 1ull << 40, .stream = PROTO_STREAM_NULL),
                    NULL, 0),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
}

/* The conditional handle of graph g, created on the wire (0 when refused). */
static uint64_t cond_handle(struct peer *p, uint64_t g)
{
    uint64_t h = 0;
    Rgpu__Reply *r;

    send_call(p, WIRE_OP(GRAPH_COND_HANDLE_CREATE, .graph = g, .value = 1), 0, NULL, 0, NULL, 0);
    r = reply(p, NULL, 0);
    if (r->result == CUDA_SUCCESS && r->n_out == 1)
        h = r->out[0];
    rgpu__reply__free_unpacked(r, NULL);
    return h;
}

/* Conditional nodes: hostile body ids and sizes are refused; a body graph is bound to the id
 * the client gave it, cannot be destroyed on its own, takes nodes and stream capture, and its
 * id goes with its parent graph. */
static void test_conditional_bodies(void **state)
{
    struct peer p;
    const uint64_t g = (790ull << 4) | PROTO_H_GRAPH, node = (791ull << 4) | PROTO_H_GRAPH_NODE;
    uint64_t body[2] = {(792ull << 4) | PROTO_H_GRAPH, (793ull << 4) | PROTO_H_GRAPH};
    const uint64_t inner = (794ull << 4) | PROTO_H_GRAPH_NODE,
                   stream = (795ull << 4) | PROTO_H_STREAM;
    uint64_t h;

    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_COND_HANDLE_CREATE, .graph = g), NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_CREATE, .id = g), NULL, 0), CUDA_SUCCESS);
    assert_int_not_equal(h = cond_handle(&p, g), 0);
    /* a conditional node: targ = handle, type, size (the number of body graph ids) */
#define COND_NODE(size)                                                                            \
    WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = node, .type = CU_GRAPH_NODE_TYPE_CONDITIONAL,      \
            .targ = {h, CU_GRAPH_COND_TYPE_IF, size})
    assert_int_equal(call_result(&p, COND_NODE(2), body, 8), CUDA_ERROR_INVALID_VALUE);
    uint64_t twice[2] = {body[0], body[0]}, not_graph[2] = {body[0], node};
    assert_int_equal(call_result(&p, COND_NODE(2), twice, 16), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, COND_NODE(2), not_graph, 16), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, COND_NODE(0), NULL, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, COND_NODE(2), body, 16), CUDA_SUCCESS);
#undef COND_NODE
    /* the bodies are graphs: a node in one (its targ words the conditional's, unread for an
     * empty node), stream capture into the other */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(GRAPH_ADD_NODE, .graph = body[0], .node = inner,
                                         .type = CU_GRAPH_NODE_TYPE_EMPTY,
                                         .targ = {h, CU_GRAPH_COND_TYPE_IF, 2}),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        call_result(&p, WIRE_OP(STREAM_CREATE, .id = stream, .flags = CU_STREAM_NON_BLOCKING), NULL,
                    0),
        CUDA_SUCCESS);
    assert_int_equal(
        call_result(&p,
                    WIRE_OP(STREAM_BEGIN_CAPTURE_TO_GRAPH, .stream = stream,
                            .mode = CU_STREAM_CAPTURE_MODE_GLOBAL, .graph = body[1], .ndeps = 1),
                    NULL, 0),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE_TO_GRAPH, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL, .graph = body[1]),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(STREAM_END_CAPTURE, .stream = stream), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = body[0]), NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = body[0]), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = g), NULL, 0), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++)
        assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = body[i]), NULL, 0),
                         CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
}

/* A server-to-server receive whose sender connects and then sends nothing (not even the
 * secret): a cancelling PEER_WAIT cuts the connection and returns at once, not when the sender
 * goes; the session goes on. */
static void test_peer_recv_stalled_sender(void **state)
{
    struct peer p;
    uint8_t secret[32] = {1};
    uint64_t out[1] = {0};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    (void)state;
    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    assert_int_equal(call_outs(&p, WIRE_OP(PEER_RECV, .dst = 0x10000, .size = 4096), secret,
                               sizeof(secret), out, 1),
                     CUDA_SUCCESS);
    to.sin_port = htons((uint16_t)out[0]);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    usleep(100000); /* the receiving thread has taken the connection and waits for the secret */
    assert_int_not_equal(call_result(&p, WIRE_OP(PEER_WAIT, .cancel = 1), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    close(fd);
    assert_int_equal(finish(&p), 0);
}

/* STREAM_GET_CAPTURE_INFO of stream with [graph, bind]: its result, out[] in out (up to 8). */
static CUresult capture_info(struct peer *p, uint64_t stream, uint64_t graph, uint64_t bind,
                             uint64_t *out)
{
    return call_outs(
        p, WIRE_OP(STREAM_GET_CAPTURE_INFO, .stream = stream, .graph = graph, .bind = bind), NULL,
        0, out, 8);
}

/* A capture's graph bound by STREAM_GET_CAPTURE_INFO: a hostile or second binding, or a wrong
 * graph named, is refused; the graph cannot be destroyed while it captures, takes nodes, and
 * its dependencies follow STREAM_UPDATE_CAPTURE_DEPS; its end makes the id the graph's
 * (destroyable), and a failed capture drops it. A capture into a graph cannot bind another. */
static void test_capture_info(void **state)
{
    struct peer p;
    const uint64_t stream = (800ull << 4) | PROTO_H_STREAM, g = (801ull << 4) | PROTO_H_GRAPH;
    const uint64_t other = (802ull << 4) | PROTO_H_GRAPH, node = (803ull << 4) | PROTO_H_GRAPH_NODE;
    const uint64_t failed = (804ull << 4) | PROTO_H_GRAPH;
    uint64_t out[8] = {0}, bad = node + 16;

    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    assert_int_equal(
        call_result(&p, WIRE_OP(STREAM_CREATE, .id = stream, .flags = CU_STREAM_NON_BLOCKING), NULL,
                    0),
        CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, g, 1, out), CUDA_SUCCESS);
    assert_int_equal(out[0], CU_STREAM_CAPTURE_STATUS_NONE); /* nothing bound */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, node, 1, out), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(capture_info(&p, stream, g, 0, out), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(capture_info(&p, stream, g, 1, out), CUDA_SUCCESS);
    assert_int_equal(out[0], CU_STREAM_CAPTURE_STATUS_ACTIVE);
    assert_int_equal(out[1], 0);
    assert_int_equal(capture_info(&p, stream, other, 1, out), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_CREATE, .id = other), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, other, 0, out), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = g), NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p,
                                 WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = node,
                                         .type = CU_GRAPH_NODE_TYPE_EMPTY),
                                 NULL, 0),
                     CUDA_SUCCESS);
#define SET_DEPS(count)                                                                            \
    WIRE_OP(STREAM_UPDATE_CAPTURE_DEPS, .stream = stream,                                          \
            .flags = CU_STREAM_SET_CAPTURE_DEPENDENCIES, .n = count)
    assert_int_equal(call_result(&p, SET_DEPS(1), &bad, 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, SET_DEPS(1), &node, 4), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, SET_DEPS(100000), &node, 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&p, SET_DEPS(1), &node, 8), CUDA_SUCCESS);
#undef SET_DEPS
    assert_int_equal(capture_info(&p, stream, g, 0, out), CUDA_SUCCESS);
    assert_int_equal(out[1], 1);
    assert_int_equal(out[2], node);
    assert_int_equal(out[3], CU_GRAPH_NODE_TYPE_EMPTY);
    assert_int_equal(
        call_result(&p, WIRE_OP(STREAM_END_CAPTURE, .stream = stream, .graph = g), NULL, 0),
        CUDA_SUCCESS);
    /* a capture into `other` cannot bind it a second time */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE_TO_GRAPH, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL, .graph = other),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, failed, 1, out), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(capture_info(&p, stream, other, 0, out), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(STREAM_END_CAPTURE, .stream = stream), NULL, 0),
                     CUDA_SUCCESS);
    /* a plain capture ended without a graph id: its graph would have no owner (the fuzzer
     * found it leaking); refused, and the stream can capture again */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_RELAXED),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(STREAM_END_CAPTURE, .stream = stream), NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    /* a capture invalidated by a synchronization: its end fails and the bound id goes */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, failed, 1, out), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(CTX_SYNCHRONIZE), NULL, 0),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(capture_info(&p, stream, failed, 0, out), CUDA_SUCCESS);
    assert_int_equal(out[0], CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    assert_int_equal(
        call_result(&p, WIRE_OP(STREAM_END_CAPTURE, .stream = stream, .graph = failed), NULL, 0),
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = failed), NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = g), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = g), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = g), NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = other), NULL, 0),
                     CUDA_SUCCESS);
    /* the stream destroyed while it captures: the driver frees the graph, and the bound id
     * goes with it (the fuzzer reached the freed graph through it) */
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(capture_info(&p, stream, failed, 1, out), CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(STREAM_DESTROY, .handle = stream), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = failed), NULL, 0),
                     CUDA_ERROR_INVALID_HANDLE);
    /* ... but a capture into the session's graph leaves that graph */
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_CREATE, .id = other), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(
        call_result(&p, WIRE_OP(STREAM_CREATE, .id = stream, .flags = CU_STREAM_NON_BLOCKING), NULL,
                    0),
        CUDA_SUCCESS);
    assert_int_equal(call_result(&p,
                                 WIRE_OP(STREAM_BEGIN_CAPTURE_TO_GRAPH, .stream = stream,
                                         .mode = CU_STREAM_CAPTURE_MODE_GLOBAL, .graph = other),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(STREAM_DESTROY, .handle = stream), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_NODE_COUNT, .graph = other), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(GRAPH_DESTROY, .handle = other), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
}

static void test_malformed_ends_session(void **state)
{
    struct peer p;
    static const uint8_t junk[24] = "not a frame header .....";
    struct iovec iov = {(void *)junk, sizeof(junk)};

    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    send_call(&p, PROTO_OP_MEM_ALLOC, NULL, 0, 0, NULL, 0, NULL, 0); /* positional: too few */
    assert_int_equal(finish(&p), 2);
    start_worker(&p);
    rgpu__welcome__free_unpacked(hello(&p, PROTO_VERSION), NULL);
    assert_int_equal(transport_sendv(p.conn, &iov, 1), RG_OK); /* bad magic */
    assert_int_equal(finish(&p), 2);
}

static uint64_t alloc_result(struct peer *p, uint64_t size, int *result)
{
    Rgpu__Reply *r;
    uint64_t d = 0;

    send_call(p, WIRE_OP(MEM_ALLOC, .size = size), 0, NULL, 0, NULL, 0);
    r = reply(p, NULL, 0);
    *result = r->result;
    if (r->n_out > 0)
        d = r->out[0];
    rgpu__reply__free_unpacked(r, NULL);
    return d;
}

/* Tenants: a wrong token is refused with a reason; the right one gets its quota, which the
 * snapshot and memory info report and allocations cannot exceed. */
static void test_tenant_quota(void **state)
{
    struct peer p;
    Rgpu__Welcome *w;
    Rgpu__Reply *r;
    int result;

    assert_int_equal(srv_tenant_key(&cfg.tenants, "alice", "token", "s3cret"), RG_OK);
    assert_int_equal(srv_tenant_key(&cfg.tenants, "alice", "mem_quota", "1 MiB"), RG_OK);
    start_worker(&p);
    w = hello_as(&p, PROTO_VERSION, "alice", "wrong");
    assert_int_equal(w->status, CUDA_ERROR_NOT_PERMITTED);
    assert_non_null(strstr(w->reason, "wrong token"));
    rgpu__welcome__free_unpacked(w, NULL);
    assert_int_equal(finish(&p), 0);

    start_worker(&p);
    w = hello_as(&p, PROTO_VERSION, "alice", "s3cret");
    assert_int_equal(w->status, 0);
    assert_int_equal(w->devices[0]->total_mem, 1u << 20);
    rgpu__welcome__free_unpacked(w, NULL);
    alloc_result(&p, 768u << 10, &result);
    assert_int_equal(result, CUDA_SUCCESS);
    alloc_result(&p, 512u << 10, &result);
    assert_int_equal(result, CUDA_ERROR_OUT_OF_MEMORY); /* over quota; the session goes on */
    send_call(&p, WIRE_OP(MEM_GET_INFO), 0, NULL, 0, NULL, 0);
    r = reply(&p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->out[0], 256u << 10);
    assert_int_equal(r->out[1], 1u << 20);
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(finish(&p), 0);
    memset(&cfg.tenants, 0, sizeof(cfg.tenants));
}

/* One call and its result; bulk (cap bytes) receives the reply's bulk. */
static int mirror_call(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                       const void *data, size_t len, void *bulk, size_t cap)
{
    Rgpu__Reply *r;
    int result;

    send_call(p, op, args, nargs, 0, data, len, NULL, 0);
    r = reply(p, bulk, cap);
    result = r->result;
    rgpu__reply__free_unpacked(r, NULL);
    return result;
}

static uint64_t quota_free(struct peer *p)
{
    Rgpu__Reply *r;
    uint64_t f;

    send_call(p, WIRE_OP(MEM_GET_INFO), 0, NULL, 0, NULL, 0);
    r = reply(p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    f = r->out[0];
    rgpu__reply__free_unpacked(r, NULL);
    return f;
}

/* Pinned host memory mirrored in the worker (server/handlers_host_mirror.c): mapped at the
 * client's address and charged to the quota, refused over the quota or where the worker has the
 * address already (the session goes on); a pull returns exactly the bytes GPU work changed since
 * the push, once; unmapping gives the quota back and the address is free again. */
static void test_host_mirror(void **state)
{
    static const uint64_t taken = 0; /* mapped in the worker too (it is forked from us) */
    struct peer p;
    Rgpu__Hello h = RGPU__HELLO__INIT;
    uint8_t bulk[64], want[19];
    uint64_t a;
    void *probe;

    assert_int_equal(srv_tenant_key(&cfg.tenants, "carol", "token", "c4rol"), RG_OK);
    assert_int_equal(srv_tenant_key(&cfg.tenants, "carol", "mem_quota", "1 MiB"), RG_OK);
    start_worker(&p);
    /* The client's buffer: an address free here, far below where the worker, forked from us,
     * maps its libraries and heap arenas (top-down from the same place as we would). */
    probe = mmap((void *)(uintptr_t)0x2e0000000000ull, 4u << 20, PROT_READ,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    assert_true(probe == (void *)(uintptr_t)0x2e0000000000ull);
    munmap(probe, 4u << 20);
    a = (uint64_t)(uintptr_t)probe + 100;
    h.proto_version = PROTO_VERSION;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.tenant = "carol";
    h.token = "c4rol";
    rgpu__welcome__free_unpacked(wire_hello(p.conn, &h, p.buf, sizeof(p.buf)), NULL);

    assert_int_equal(/* two pages */
                     mirror_call(&p, WIRE_OP(HOST_MIRROR_MAP, .addr = a, .size = 5000), NULL, 0,
                                 NULL, 0),
                     0);
    assert_int_equal(quota_free(&p), (1u << 20) - 8192);
    assert_int_equal(mirror_call(&p,
                                 WIRE_OP(HOST_MIRROR_MAP, .addr = a + (2u << 20), .size = 1u << 20),
                                 NULL, 0, NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(
        mirror_call(&p, WIRE_OP(HOST_MIRROR_MAP, .addr = (uint64_t)(uintptr_t)&taken, .size = 8),
                    NULL, 0, NULL, 0),
        CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(quota_free(&p), (1u << 20) - 8192);

    /* The client's bytes, then a memset into them, then a pull: the memset's three bytes. */
    send_call(&p, WIRE_OP(HOST_MIRROR_PUSH, .addr = a, .size = 16), PROTO_FLAG_NOREPLY,
              "0123456789abcdef", 16, NULL, 0);
#define MEMSET_ZZZ                                                                                 \
    WIRE_OP(MEMSET, .dst = a + 4, .value = 'z', .elemsize = 1, .count = 3,                         \
            .stream = PROTO_STREAM_NULL)
    assert_int_equal(mirror_call(&p, MEMSET_ZZZ, NULL, 0, NULL, 0), 0);
    memset(bulk, 0xee, sizeof(bulk));
    assert_int_equal(mirror_call(&p, WIRE_OP(HOST_MIRROR_PULL, .n = 1), &a, 8, bulk, sizeof(bulk)),
                     0);
    ((uint64_t *)want)[0] = a + 4, ((uint64_t *)want)[1] = 3;
    memcpy(want + 16, "zzz", 3);
    assert_memory_equal(bulk, want, sizeof(want));
    assert_int_equal(bulk[sizeof(want)], 0xee);
    memset(bulk, 0xee, sizeof(bulk));
    assert_int_equal(mirror_call(&p, WIRE_OP(HOST_MIRROR_PULL, .n = 1), &a, 8, bulk, sizeof(bulk)),
                     0);
    assert_int_equal(bulk[0], 0xee); /* nothing changed since */

    assert_int_equal(mirror_call(&p, WIRE_OP(HOST_MIRROR_UNMAP, .addr = a), NULL, 0, NULL, 0), 0);
    assert_int_equal(quota_free(&p), 1u << 20);
    assert_int_equal(mirror_call(&p, WIRE_OP(HOST_MIRROR_PULL, .n = 1), &a, 8, NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(mirror_call(&p, MEMSET_ZZZ, NULL, 0, NULL, 0),
                     CUDA_ERROR_INVALID_VALUE); /* no longer the GPU's to write */
#undef MEMSET_ZZZ
    assert_int_equal(
        mirror_call(&p, WIRE_OP(HOST_MIRROR_MAP, .addr = a, .size = 5000), NULL, 0, NULL, 0), 0);
    assert_int_equal(finish(&p), 0);
    memset(&cfg.tenants, 0, sizeof(cfg.tenants));
}

/* FIPS 180-4 examples, a two-block padding boundary, and a hashed token accepted. */
static void test_token_hash(void **state)
{
    char hex[65];
    const char *why = NULL;
    struct srv_tenants ts;

    srv_token_hash_hex("abc", hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    srv_token_hash_hex("", hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    srv_token_hash_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    memset(&ts, 0, sizeof(ts));
    srv_token_hash_hex("h4sh", hex);
    assert_int_equal(srv_tenant_key(&ts, "bob", "token_sha256", hex), RG_OK);
    assert_non_null(srv_tenant_auth(&ts, "bob", "h4sh", &why));
    assert_null(srv_tenant_auth(&ts, "bob", "h4sh!", &why));
    assert_null(srv_tenant_auth(&ts, "carol", "h4sh", &why));
    assert_int_not_equal(srv_tenant_key(&ts, "bob", "token_sha256", "not-hex"), RG_OK);
}

static void test_handle_table(void **state)
{
    struct srv_session s;
    int v[2000];

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < 2000; i++)
        assert_int_equal(srv_handle_put(&s, ((uint64_t)(i + 1) << 4) | PROTO_H_STREAM, &v[i]),
                         RG_OK);
    assert_int_not_equal(srv_handle_put(&s, (1ull << 4) | PROTO_H_STREAM, v), RG_OK);
    for (int i = 0; i < 2000; i += 2)
        srv_handle_del(&s, ((uint64_t)(i + 1) << 4) | PROTO_H_STREAM);
    for (int i = 0; i < 2000; i++) {
        struct srv_handle *h =
            srv_handle_get(&s, ((uint64_t)(i + 1) << 4) | PROTO_H_STREAM, PROTO_H_STREAM);
        if (i % 2 == 0)
            assert_null(h);
        else
            assert_ptr_equal(h->real, &v[i]);
    }
    assert_null(srv_handle_get(&s, (2ull << 4) | PROTO_H_STREAM, PROTO_H_EVENT));
    assert_int_equal(s.nhandles, 1000);
    free(s.handles);
}

/* ---- module cache ----------------------------------------------------------------------- */

#define CACHED_MOD_ID ((3000ull << 4) | PROTO_H_MODULE)

/* A PTX image of len bytes (NUL included) that the fake driver loads; seed varies the bytes. */
static char *big_ptx(size_t len, char seed)
{
    static const char head[] = ".version 8.0\n.target sm_90\n.entry _Z5scalePffi()\n//";
    char *ptx = malloc(len);

    assert_non_null(ptx);
    memset(ptx, 'a' + seed % 26, len - 1);
    memcpy(ptx, head, sizeof(head) - 1);
    ptx[len - 1] = '\0';
    return ptx;
}

#define CACHED_LIB_ID ((3001ull << 4) | PROTO_H_LIBRARY)

/* MODULE_LOAD (or LIBRARY_LOAD: library) with image flags: by hash (no bytes) or with the bytes
 * as bulk; unloaded again when it loaded (the unload must succeed: for a library the fake
 * driver checks that a preserved image did not change). */
static int load_as(struct peer *p, bool library, const char *image, size_t len, bool by_hash,
                   bool cache)
{
    uint8_t hash[RG_SHA256_LEN];
    const uint64_t id = library ? CACHED_LIB_ID : CACHED_MOD_ID;
    const uint64_t flags = (by_hash ? PROTO_IMAGE_BY_HASH : 0) | (cache ? PROTO_IMAGE_CACHE : 0);
    Rgpu__Reply *r;
    int result;

    rg_sha256(image, len, hash);
    /* by hash: the image's length and its hash as data; else the bytes as bulk, without
     * image_len (optional: the image is sent whole) */
    if (by_hash && library)
        send_call(p, WIRE_OP(LIBRARY_LOAD, .id = id, .image_flags = flags, .image_len = len), 0,
                  hash, sizeof(hash), NULL, 0);
    else if (by_hash)
        send_call(p, WIRE_OP(MODULE_LOAD, .id = id, .image_flags = flags, .image_len = len), 0,
                  hash, sizeof(hash), NULL, 0);
    else if (library)
        send_call(p, WIRE_OP_N(LIBRARY_LOAD, 2, .id = id, .image_flags = flags), 0, NULL, 0, image,
                  len);
    else
        send_call(p, WIRE_OP_N(MODULE_LOAD, 2, .id = id, .image_flags = flags), 0, NULL, 0, image,
                  len);
    r = reply(p, NULL, 0);
    result = r->result;
    rgpu__reply__free_unpacked(r, NULL);
    if (result == CUDA_SUCCESS) { /* the same id is loaded again later */
        if (library)
            send_call(p, WIRE_OP(LIBRARY_UNLOAD, .handle = id), 0, NULL, 0, NULL, 0);
        else
            send_call(p, WIRE_OP(MODULE_UNLOAD, .handle = id), 0, NULL, 0, NULL, 0);
        r = reply(p, NULL, 0);
        assert_int_equal(r->result, CUDA_SUCCESS);
        rgpu__reply__free_unpacked(r, NULL);
    }
    return result;
}

static int load_image(struct peer *p, const char *image, size_t len, bool by_hash, bool cache)
{
    return load_as(p, false, image, len, by_hash, cache);
}

/* One session of tenant (or of an open server when ""), running fn's loads. */
static void session_as(const char *tenant, struct peer *p)
{
    Rgpu__Welcome *w;

    start_worker(p);
    w = hello_as(p, PROTO_VERSION, tenant, tenant[0] ? "tok" : "");
    assert_int_equal(w->status, 0);
    rgpu__welcome__free_unpacked(w, NULL);
}

static void cached_path(const char *dir, const char *sub, const char *image, size_t len, char *path,
                        size_t cap)
{
    uint8_t hash[RG_SHA256_LEN];
    char hex[2 * RG_SHA256_LEN + 1];

    rg_sha256(image, len, hash);
    rg_sha256_hex(hash, hex);
    snprintf(path, cap, "%s/%s/%s", dir, sub, hex);
}

/* First load by hash misses, the bytes follow and are kept; a later session loads by hash with
 * no bytes; a file that no longer matches its hash is refused and removed; another tenant never
 * finds the first one's image. */
static void test_module_cache(void **state)
{
    char dir[] = "/tmp/rgpu-test-cache-XXXXXX", path[512];
    const size_t len = 100u << 10;
    char *image = big_ptx(len, 1);
    struct peer p;
    struct stat st;
    FILE *f;

    assert_non_null(mkdtemp(dir));
    snprintf(cfg.module_cache, sizeof(cfg.module_cache), "%s", dir);
    session_as("", &p);
    assert_int_equal(load_image(&p, image, len, true, false), PROTO_RESULT_NOT_CACHED);
    assert_int_equal(load_image(&p, image, len, false, true), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    cached_path(dir, "-", image, len, path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, len);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);

    session_as("", &p); /* a second process: no bytes */
    assert_int_equal(load_image(&p, image, len, true, false), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);

    assert_non_null(f = fopen(path, "r+")); /* corrupted on disk: refused and removed */
    fseek(f, 1000, SEEK_SET);
    fputc('#', f);
    fclose(f);
    session_as("", &p);
    assert_int_equal(load_image(&p, image, len, true, false), PROTO_RESULT_NOT_CACHED);
    assert_int_equal(finish(&p), 0);
    assert_int_not_equal(stat(path, &st), 0);

    assert_int_equal(srv_tenant_key(&cfg.tenants, "bob", "token", "tok"), RG_OK);
    assert_int_equal(srv_tenant_key(&cfg.tenants, "eve", "token", "tok"), RG_OK);
    session_as("bob", &p);
    assert_int_equal(load_image(&p, image, len, false, true), CUDA_SUCCESS);
    assert_int_equal(load_image(&p, image, len, true, false), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    session_as("eve", &p); /* bob's image, by its hash: not for eve */
    assert_int_equal(load_image(&p, image, len, true, false), PROTO_RESULT_NOT_CACHED);
    assert_int_equal(finish(&p), 0);
    memset(&cfg.tenants, 0, sizeof(cfg.tenants));
    cfg.module_cache[0] = '\0';
    free(image);
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* How many lines of the file hold text. */
static int count_in(const char *path, const char *text)
{
    char line[512];
    int n = 0;
    FILE *f = fopen(path, "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, text) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* Whether files in dir keep user extended attributes (tmpfs before Linux 6.6 does not). */
static bool xattrs_kept(const char *dir)
{
    char path[300];
    int fd;
    bool ok;

    snprintf(path, sizeof(path), "%s/.xattr-probe", dir);
    if ((fd = open(path, O_CREAT | O_WRONLY, 0600)) < 0)
        return false;
    ok = fsetxattr(fd, "user.rgpu.probe", "1", 1, 0) == 0;
    close(fd);
    unlink(path);
    return ok;
}

/* Library images in the cache: sent and kept, then by hash, each read in place from a mapping
 * of its cache file (the fake driver checks at unload that the bytes did not change), the hash
 * checked over the mapped bytes (a corrupted file is refused and removed); a PTX image without a
 * NUL that ends on a page boundary is never given to the driver mapped (it would read past the
 * mapping) but as a heap copy, sent or by hash. */
static void test_library_cache(void **state)
{
    char dir[] = "/tmp/rgpu-test-libcache-XXXXXX", log[64], path[512];
    const size_t len = 100u << 10, page_len = 64u << 10;
    char *image = big_ptx(len, 2), *bare = big_ptx(page_len, 3);
    struct peer p;
    struct stat st;
    FILE *f;

    bare[page_len - 1] = 'z'; /* no NUL anywhere */
    assert_non_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s.log", dir);
    snprintf(cfg.module_cache, sizeof(cfg.module_cache), "%s", dir);
    worker_log = log; /* each session's worker writes it anew */
    session_as("", &p);
    assert_int_equal(load_as(&p, true, image, len, true, false), PROTO_RESULT_NOT_CACHED);
    assert_int_equal(load_as(&p, true, image, len, false, true), CUDA_SUCCESS);
    assert_int_equal(load_as(&p, true, image, len, true, false), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    assert_int_equal(count_in(log, "read in place from its cache file"), 2);
    assert_int_equal(count_in(log, "module cache: hit"), 1);
    assert_int_equal(count_in(log, "hash checked"), 1);
    /* Another process: the file is marked checked and unchanged since, so its bytes are not
     * hashed again (where the file system keeps user attributes: else they are). */
    session_as("", &p);
    assert_int_equal(load_as(&p, true, image, len, true, false), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    assert_int_equal(
        count_in(log, xattrs_kept(dir) ? "checked before, unchanged since" : "hash checked"), 1);

    session_as("", &p);
    assert_int_equal(load_as(&p, true, bare, page_len, false, true), CUDA_SUCCESS);
    assert_int_equal(load_as(&p, true, bare, page_len, true, false), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    assert_int_equal(count_in(log, "read in place from its cache file"), 0);
    assert_int_equal(count_in(log, "module cache: hit"), 1);

    cached_path(dir, "-", image, len, path, sizeof(path));
    usleep(20000); /* past the file system's clock tick: the write moves the time */
    assert_non_null(f = fopen(path, "r+")); /* corrupted on disk: refused and removed */
    fseek(f, 2000, SEEK_SET);
    fputc('#', f);
    fclose(f);
    session_as("", &p);
    assert_int_equal(load_as(&p, true, image, len, true, false), PROTO_RESULT_NOT_CACHED);
    assert_int_equal(finish(&p), 0);
    assert_int_equal(count_in(log, "does not match its hash; removed"), 1);
    assert_int_not_equal(stat(path, &st), 0);
    worker_log = NULL;
    cfg.module_cache[0] = '\0';
    free(image);
    free(bare);
    unlink(log);
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* An IPC call answering a 64-byte handle into h (its result). */
static CUresult ipc_handle_of(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                              uint8_t h[64])
{
    Rgpu__Reply *r;
    CUresult res;

    send_call(p, op, args, nargs, 0, NULL, 0, NULL, 0);
    r = reply(p, NULL, 0);
    res = (CUresult)r->result;
    if (res == CUDA_SUCCESS) {
        assert_int_equal(r->data.len, 64);
        memcpy(h, r->data.data, 64);
    }
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

/* IPC_OPEN_MEM_HANDLE: the result, the pointer and size in out[2]. */
static CUresult ipc_open_mem(struct peer *p, const uint8_t h[64], uint64_t out[2])
{
    Rgpu__Reply *r;
    CUresult res;

    send_call(p, WIRE_OP(IPC_OPEN_MEM_HANDLE, .flags = CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), 0, h,
              64, NULL, 0);
    r = reply(p, NULL, 0);
    res = (CUresult)r->result;
    if (res == CUDA_SUCCESS) {
        assert_int_equal(r->n_out, 2);
        out[0] = r->out[0], out[1] = r->out[1];
    }
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

static void put_bytes(struct peer *p, uint64_t d, const void *bytes, size_t len)
{
    assert_int_equal(
        call_result(p, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = len, .stream = PROTO_STREAM_NULL),
                    bytes, len),
        CUDA_SUCCESS);
}

static void expect_bytes(struct peer *p, uint64_t d, const void *bytes, size_t len)
{
    Rgpu__Reply *r;

    send_call(p, WIRE_OP(MEMCPY_DTOH, .src = d, .size = len, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, NULL, 0);
    r = reply(p, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->data.len, len);
    assert_memory_equal(r->data.data, bytes, len);
    rgpu__reply__free_unpacked(r, NULL);
}

/* Both halves of the isolation rule: b (bob, like a) opens what a exported, c (eve) does not,
 * nor does anyone open forged bytes or a handle of the wrong kind. */
static void ipc_refusals(struct peer *b, struct peer *c, const uint8_t mh[64], const uint8_t eh[64])
{
    uint8_t forged[64];
    uint64_t out[2], ev = (903ull << 4) | PROTO_H_EVENT;

    memcpy(forged, mh, 64);
    forged[17] ^= 0x40;
    assert_int_equal(ipc_open_mem(b, forged, out), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(ipc_open_mem(b, eh, out), CUDA_ERROR_INVALID_VALUE); /* an event's bytes */
    assert_int_equal(call_result(b, WIRE_OP(IPC_OPEN_EVENT_HANDLE, .id = ev), mh, 64),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(ipc_open_mem(c, mh, out), CUDA_ERROR_INVALID_VALUE); /* another tenant */
    assert_int_equal(call_result(c, WIRE_OP(IPC_OPEN_EVENT_HANDLE, .id = ev), eh, 64),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(c, WIRE_OP(IPC_OPEN_EVENT_HANDLE, .id = ev), eh, 10),
                     CUDA_ERROR_INVALID_VALUE);
}

static void release_slot(struct srv_table *t, pid_t pid)
{
    char tenant[64];

    srv_table_release_pid(t, pid, tenant, sizeof(tenant));
}

/* CUDA IPC between two workers (two processes, as on a GPU host) sharing a session table: the
 * handle of a pointer inside an allocation opens the whole allocation in another session of the
 * tenant, uncharged, and both see the same bytes; an event opens as an event. Forged bytes,
 * another tenant and the handles of a session that ended are refused; only what a session
 * opened can be closed, and what it leaves open is closed at its end. */
static void test_ipc(void **state)
{
    const uint64_t ev_a = (900ull << 4) | PROTO_H_EVENT, ev_plain = (901ull << 4) | PROTO_H_EVENT;
    const uint64_t ev_b = (902ull << 4) | PROTO_H_EVENT;
    uint64_t d, out[2];
    uint8_t mh[64], eh[64], mine[64], theirs[64];
    struct srv_table *table;
    struct peer a, b, c;
    Rgpu__Reply *r;
    int tfd;

    assert_int_equal(srv_table_create(&tfd, &table), RG_OK);
    cfg.table = table;
    assert_int_equal(srv_tenant_key(&cfg.tenants, "bob", "token", "tok"), RG_OK);
    assert_int_equal(srv_tenant_key(&cfg.tenants, "bob", "mem_quota", "1 MiB"), RG_OK);
    assert_int_equal(srv_tenant_key(&cfg.tenants, "eve", "token", "tok"), RG_OK);
    session_as("bob", &a);
    session_as("bob", &b);
    session_as("eve", &c);
    memset(mine, 0xa5, 64);
    memset(theirs, 0x3c, 64);
    d = alloc(&a, 3 * 4096);
    put_bytes(&a, d + 4096, mine, 64);
    assert_int_equal(ipc_handle_of(&a, WIRE_OP(IPC_GET_MEM_HANDLE, .dptr = d + 4096), mh),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&a,
                                 WIRE_OP(EVENT_CREATE, .id = ev_a,
                                         .flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
                                 NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(ipc_handle_of(&a, WIRE_OP(IPC_GET_EVENT_HANDLE, .event = ev_a), eh),
                     CUDA_SUCCESS);
    /* not an interprocess event: the driver refuses */
    assert_int_equal(call_result(&a, WIRE_OP(EVENT_CREATE, .id = ev_plain), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(ipc_handle_of(&a, WIRE_OP(IPC_GET_EVENT_HANDLE, .event = ev_plain), mh + 0),
                     CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(ipc_open_mem(&b, mh, out), CUDA_SUCCESS);
    assert_int_equal(out[1], 3 * 4096); /* the whole allocation, from its start */
    expect_bytes(&b, out[0] + 4096, mine, 64);
    put_bytes(&b, out[0], theirs, 64);
    expect_bytes(&a, d, theirs, 64);
    send_call(&b, WIRE_OP(MEM_GET_INFO), 0, NULL, 0, NULL, 0);
    r = reply(&b, NULL, 0);
    assert_int_equal(r->out[0], 1u << 20); /* the exporter's charge while it lives */
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(call_result(&b, WIRE_OP(IPC_OPEN_EVENT_HANDLE, .id = ev_b), eh, 64),
                     CUDA_SUCCESS);
    assert_int_equal(
        call_result(&b, WIRE_OP(EVENT_RECORD, .event = ev_b, .stream = PROTO_STREAM_NULL), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(call_result(&b, WIRE_OP(EVENT_SYNCHRONIZE, .event = ev_b), NULL, 0),
                     CUDA_SUCCESS);
    ipc_refusals(&b, &c, mh, eh);

    assert_int_equal(call_result(&b, WIRE_OP(IPC_CLOSE_MEM_HANDLE, .dptr = out[0]), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(call_result(&b, WIRE_OP(IPC_CLOSE_MEM_HANDLE, .dptr = out[0]), NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(call_result(&b, WIRE_OP(IPC_CLOSE_MEM_HANDLE, .dptr = d), NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(ipc_open_mem(&b, mh, out), CUDA_SUCCESS); /* left open for its end */

    /* The exporter ends, its handles with it. (Shut down, not only closed: the later workers
     * inherited a copy of the test's end of a's connection.) */
    shutdown(transport_fd(a.conn), SHUT_RDWR);
    assert_int_equal(finish(&a), 0);
    assert_int_equal(ipc_open_mem(&b, mh, out), CUDA_ERROR_INVALID_VALUE);
    send_call(&b, WIRE_OP(MEM_GET_INFO), 0, NULL, 0, NULL, 0);
    r = reply(&b, NULL, 0);
    assert_int_equal(r->out[0], (1u << 20) - 3 * 4096); /* its exporter gone, now the opener's */
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(call_result(&b, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(finish(&c), 0);
    assert_int_equal(finish(&b), 0);
    release_slot(table, a.pid);
    release_slot(table, b.pid);
    release_slot(table, c.pid);
    for (int e = 0; e < SRV_TABLE_IPC; e++)
        assert_int_equal(table->ipc[e].kind, 0);
    cfg.table = NULL;
    memset(&cfg.tenants, 0, sizeof(cfg.tenants));
    munmap(table, sizeof(*table));
    close(tfd);
}

/* Over module_cache_max the least recently used image goes. */
static void test_module_cache_evicts(void **state)
{
    char dir[] = "/tmp/rgpu-test-cache-XXXXXX", path[3][512];
    const size_t len = 100u << 10;
    char *image[3] = {big_ptx(len, 1), big_ptx(len, 2), big_ptx(len, 3)};
    struct stat st;
    struct peer p;

    assert_non_null(mkdtemp(dir));
    snprintf(cfg.module_cache, sizeof(cfg.module_cache), "%s", dir);
    cfg.module_cache_max = 250u << 10;
    session_as("", &p);
    for (int i = 0; i < 2; i++)
        assert_int_equal(load_image(&p, image[i], len, false, true), CUDA_SUCCESS);
    usleep(20000); /* distinct use times */
    assert_int_equal(load_image(&p, image[0], len, true, false), CUDA_SUCCESS); /* 0 used now */
    usleep(20000);
    assert_int_equal(load_image(&p, image[2], len, false, true), CUDA_SUCCESS);
    assert_int_equal(finish(&p), 0);
    for (int i = 0; i < 3; i++)
        cached_path(dir, "-", image[i], len, path[i], sizeof(path[i]));
    assert_int_equal(stat(path[0], &st), 0);
    assert_int_not_equal(stat(path[1], &st), 0); /* least recently used */
    assert_int_equal(stat(path[2], &st), 0);
    cfg.module_cache[0] = '\0';
    cfg.module_cache_max = 0;
    for (int i = 0; i < 3; i++)
        free(image[i]);
    snprintf(path[0], sizeof(path[0]), "rm -rf %s", dir);
    assert_int_equal(system(path[0]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_table),
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_older_client),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_async_error_and_bad_calls),
        cmocka_unit_test(test_hostile_arguments),
        cmocka_unit_test(test_conditional_bodies),
        cmocka_unit_test(test_capture_info),
        cmocka_unit_test(test_peer_recv_stalled_sender),
        cmocka_unit_test(test_malformed_ends_session),
        cmocka_unit_test(test_tenant_quota),
        cmocka_unit_test(test_host_mirror),
        cmocka_unit_test(test_token_hash),
        cmocka_unit_test(test_module_cache),
        cmocka_unit_test(test_library_cache),
        cmocka_unit_test(test_module_cache_evicts),
        cmocka_unit_test(test_ipc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
