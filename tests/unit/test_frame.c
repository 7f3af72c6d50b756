/* Framing (proto/frame.c) over an in-process loop connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/frame.h"
#include "proto/ops.h"

#define BULK_LEN (48u << 10)

struct pair {
    struct transport_listener *listener;
    struct transport_conn *tx, *rx;
    uint8_t buf[PROTO_INLINE_MAX + 256];
};

static int pair_setup(void **state)
{
    const struct transport_ops *ops = transport_find("loop");
    struct pair *p = calloc(1, sizeof(*p));

    assert_non_null(p);
    assert_int_equal(ops->listen("frame-test", &p->listener), RG_OK);
    assert_int_equal(ops->connect("frame-test", NULL, &p->tx), RG_OK);
    assert_int_equal(ops->accept(p->listener, &p->rx), RG_OK);
    *state = p;
    return 0;
}

static int pair_teardown(void **state)
{
    struct pair *p = *state;

    transport_close(p->tx);
    transport_close(p->rx);
    p->listener->ops->listener_close(p->listener);
    free(p);
    return 0;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 31 + seed);
}

/* Send a Call with args {1,2,3} and data_len bytes of inline data. */
static void send_call(struct pair *p, size_t data_len, const void *bulk, uint64_t bulk_len)
{
    uint64_t args[] = {1, 2, UINT64_MAX};
    static uint8_t data[PROTO_INLINE_MAX];
    Rgpu__Call call = RGPU__CALL__INIT;

    fill(data, data_len, 7);
    call.id = 42;
    call.op = PROTO_OP_MEMCPY_HTOD;
    call.ctx = PROTO_PRIMARY_CTX_ID(0);
    call.n_args = 3; /* positional: words of the codec test, not a call the worker runs */
    call.args = args;
    call.data = (ProtobufCBinaryData){data_len, data};
    assert_int_equal(proto_send(p->tx, PROTO_CALL, &call.base, bulk, bulk_len), RG_OK);
}

/* Receive a frame and check it is the Call send_call sent. */
static void recv_call(struct pair *p, size_t data_len, uint64_t bulk_len)
{
    struct proto_frame_hdr hdr;
    uint8_t expect[PROTO_INLINE_MAX];
    Rgpu__Call *call;

    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_OK);
    assert_int_equal(hdr.magic, PROTO_MAGIC);
    assert_int_equal(hdr.type, PROTO_CALL);
    assert_int_equal(hdr.bulk_len, bulk_len);
    call = rgpu__call__unpack(NULL, hdr.msg_len, p->buf);
    assert_non_null(call);
    assert_int_equal(call->id, 42);
    assert_int_equal(call->op, PROTO_OP_MEMCPY_HTOD);
    assert_int_equal(call->ctx, PROTO_PRIMARY_CTX_ID(0));
    assert_int_equal(call->n_args, 3);
    assert_int_equal(call->args[2], UINT64_MAX);
    assert_int_equal(call->data.len, data_len);
    fill(expect, data_len, 7);
    if (data_len > 0)
        assert_memory_equal(call->data.data, expect, data_len);
    rgpu__call__free_unpacked(call, NULL);
}

static void test_inline_round_trip(void **state)
{
    struct pair *p = *state;

    send_call(p, 100, NULL, 0);
    recv_call(p, 100, 0);
    send_call(p, PROTO_INLINE_MAX, NULL, 0); /* larger than the send scratch buffer */
    recv_call(p, PROTO_INLINE_MAX, 0);
    send_call(p, 0, NULL, 0);
    recv_call(p, 0, 0);
}

static void test_bulk_round_trip(void **state)
{
    struct pair *p = *state;
    uint8_t *bulk = malloc(BULK_LEN), *in = malloc(BULK_LEN);

    assert_non_null(bulk);
    assert_non_null(in);
    fill(bulk, BULK_LEN, 3);
    send_call(p, 0, bulk, BULK_LEN);
    recv_call(p, 0, BULK_LEN);
    assert_int_equal(transport_recv(p->rx, in, BULK_LEN), RG_OK);
    assert_memory_equal(in, bulk, BULK_LEN);
    free(in);
    free(bulk);
}

static void test_streamed_bulk(void **state)
{
    enum { CHUNK = 8192, CHUNKS = 5 };
    struct pair *p = *state;
    uint8_t chunk[CHUNK], expect[CHUNK], in[CHUNK];

    send_call(p, 16, NULL, (uint64_t)CHUNK * CHUNKS);
    for (int i = 0; i < CHUNKS; i++) {
        struct iovec iov = {chunk, CHUNK};
        fill(chunk, CHUNK, (unsigned)i);
        assert_int_equal(transport_sendv(p->tx, &iov, 1), RG_OK);
    }
    send_call(p, 8, NULL, 0); /* the next frame follows the streamed bytes */
    recv_call(p, 16, (uint64_t)CHUNK * CHUNKS);
    for (int i = 0; i < CHUNKS; i++) {
        assert_int_equal(transport_recv(p->rx, in, CHUNK), RG_OK);
        fill(expect, CHUNK, (unsigned)i);
        assert_memory_equal(in, expect, CHUNK);
    }
    recv_call(p, 8, 0);
}

static void send_raw_hdr(struct pair *p, uint32_t magic, uint32_t msg_len)
{
    struct proto_frame_hdr hdr = {.magic = magic, .type = PROTO_CALL, .msg_len = msg_len};
    struct iovec iov = {&hdr, sizeof(hdr)};

    assert_int_equal(transport_sendv(p->tx, &iov, 1), RG_OK);
}

static void test_bad_magic(void **state)
{
    struct pair *p = *state;
    struct proto_frame_hdr hdr;

    send_raw_hdr(p, 0xdeadbeef, 0);
    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_ERR_PROTO);
}

static void test_oversized(void **state)
{
    struct pair *p = *state;
    struct proto_frame_hdr hdr;

    send_raw_hdr(p, PROTO_MAGIC, PROTO_MSG_MAX + 1); /* over the protocol limit */
    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_ERR_PROTO);
    send_raw_hdr(p, PROTO_MAGIC, sizeof(p->buf) + 1); /* within it, but over the buffer */
    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_ERR_PROTO);
}

static void test_discard(void **state)
{
    struct pair *p = *state;
    uint8_t *bulk = calloc(1, BULK_LEN);
    struct proto_frame_hdr hdr;

    assert_non_null(bulk);
    send_call(p, 10, bulk, BULK_LEN);
    send_call(p, 20, NULL, 0);
    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_OK);
    assert_int_equal(hdr.bulk_len, BULK_LEN);
    assert_int_equal(proto_discard(p->rx, hdr.bulk_len), RG_OK);
    recv_call(p, 20, 0);
    assert_int_equal(proto_discard(p->rx, 0), RG_OK);
    free(bulk);
}

static void test_closed_mid_frame(void **state)
{
    struct pair *p = *state;
    struct proto_frame_hdr hdr;

    send_raw_hdr(p, PROTO_MAGIC, 100); /* promises 100 message bytes, sends none */
    transport_shutdown(p->tx);
    assert_int_equal(proto_recv(p->rx, &hdr, p->buf, sizeof(p->buf)), RG_ERR_CLOSED);
}

static void test_names(void **state)
{
    assert_string_equal(proto_frame_type_name(PROTO_CALL), "call");
    assert_string_equal(proto_frame_type_name(999), "unknown");
    assert_string_equal(proto_op_name(PROTO_OP_LAUNCH), "LAUNCH");
    assert_string_equal(proto_op_name(PROTO_OP_COUNT), "UNKNOWN_OP");
}

static void random_call(Rgpu__Call *m, uint64_t *args, uint8_t *data, uint64_t *seed, int round)
{
    uint64_t x = *seed;

    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    *seed = x;
    *m = (Rgpu__Call)RGPU__CALL__INIT;
    m->id = round % 5 == 0 ? 0 : x >> (x % 64);
    m->op = round % 7 == 0 ? 0 : (uint32_t)(x % PROTO_OP_COUNT);
    m->ctx = round % 3 == 0 ? 0 : x << (round % 60);
    m->n_args = (size_t)(round % 21); /* positional: random words for the codec */
    for (size_t i = 0; i < m->n_args; i++)
        args[i] = i % 4 == 0 ? 0 : (x * (i + 1)) >> ((i * 9) % 64);
    m->args = args;
    m->data = (ProtobufCBinaryData){(size_t)(round * 37 % 301), data};
    for (size_t i = 0; i < m->data.len; i++)
        data[i] = (uint8_t)(x + i);
}

/* Calls packed by hand equal protobuf-c's bytes, for zero and large fields, 0..20 arguments of
 * every varint length, data of 0..300 bytes; and they unpack to the same call. */
/* The handshake's rule with the version numbers of two builds (server, client). */
static void test_version_rule(void **state)
{
    char why[256];
    uint32_t minor = 99;

    /* The current server and a client one minor older (a 1.0 build sends no minor: 0). */
    assert_true(proto_version_accept(1, 1, 1, 0, &minor, why, sizeof(why)));
    assert_int_equal(minor, 0);
    assert_true(proto_version_accept(1, 1, 1, 1, &minor, why, sizeof(why)));
    assert_int_equal(minor, 1);
    /* A newer client: the session speaks the server's minor. */
    assert_true(proto_version_accept(1, 1, 1, 4, &minor, why, sizeof(why)));
    assert_int_equal(minor, 1);
    /* A server two minors ahead no longer serves the client; the reason names both. */
    assert_true(proto_version_accept(1, 5, 1, 4, &minor, why, sizeof(why)));
    assert_int_equal(minor, 4);
    assert_false(proto_version_accept(1, 5, 1, 3, &minor, why, sizeof(why)));
    assert_non_null(strstr(why, "client speaks 1.3, server speaks 1.5 and serves 1.4 and newer"));
    /* Another major, older or newer, is refused. */
    assert_false(proto_version_accept(2, 0, 1, 1, &minor, why, sizeof(why)));
    assert_non_null(strstr(why, "client speaks 1, server speaks 2"));
    assert_false(proto_version_accept(1, 1, 2, 0, &minor, why, sizeof(why)));
    assert_non_null(strstr(why, "client speaks 2, server speaks 1"));
    /* This build: the rule serves the previous minor. */
    assert_true(proto_version_accept(PROTO_VERSION, PROTO_VERSION_MINOR, PROTO_VERSION,
                                     PROTO_VERSION_MINOR - PROTO_MINORS_BACK, &minor, why,
                                     sizeof(why)));
}

/* An op exists from the minor the table gives it; numbers past the table exist in none. */
static void test_op_minor(void **state)
{
    for (unsigned op = 0; op < PROTO_OP_COUNT; op++) {
        assert_int_equal(proto_ops[op].major, PROTO_VERSION);
        assert_true(proto_ops[op].minor <= PROTO_VERSION_MINOR);
        assert_true(proto_op_in_minor(op, proto_ops[op].minor));
        assert_true(proto_op_in_minor(op, PROTO_VERSION_MINOR));
        if (proto_ops[op].minor > 0)
            assert_false(proto_op_in_minor(op, proto_ops[op].minor - 1));
    }
    assert_false(proto_op_in_minor(PROTO_OP_COUNT, PROTO_VERSION_MINOR));
    assert_false(proto_op_in_minor(999, 999));
    assert_true(proto_op_in_minor(PROTO_OP_NOP, 0));
}

static void test_call_pack_matches_protobuf_c(void **state)
{
    static uint8_t data[300], mine[4096], theirs[4096];
    uint64_t args[20], seed = 88172645463325252ull;
    Rgpu__Call m;

    for (int round = 0; round < 2000; round++) {
        random_call(&m, args, data, &seed, round);
        size_t n = proto_call_packed_size(&m);
        assert_int_equal(n, protobuf_c_message_get_packed_size(&m.base));
        assert_int_equal(proto_call_pack(&m, mine), n);
        protobuf_c_message_pack(&m.base, theirs);
        assert_memory_equal(mine, theirs, n);
        Rgpu__Call *u = rgpu__call__unpack(NULL, n, mine);
        assert_non_null(u);
        assert_true(u->id == m.id && u->op == m.op && u->ctx == m.ctx && u->n_args == m.n_args);
        rgpu__call__free_unpacked(u, NULL);
    }
}

/* What the worker's decoder takes, protobuf-c decodes to the same call. */
static void expect_same_call(const uint8_t *buf, size_t len)
{
    uint64_t args[20];
    Rgpu__Call mine, *theirs;

    if (!proto_call_unpack(buf, len, &mine, args, 20))
        return;
    theirs = rgpu__call__unpack(NULL, len, buf);
    assert_non_null(theirs);
    assert_true(mine.id == theirs->id && mine.op == theirs->op && mine.ctx == theirs->ctx);
    assert_int_equal(mine.n_args, theirs->n_args);
    if (mine.n_args > 0)
        assert_memory_equal(mine.args, theirs->args, mine.n_args * sizeof(uint64_t));
    assert_int_equal(mine.data.len, theirs->data.len);
    if (mine.data.len > 0)
        assert_memory_equal(mine.data.data, theirs->data.data, mine.data.len);
    rgpu__call__free_unpacked(theirs, NULL);
}

/* The worker's Call decoder: every packed call decodes, to protobuf-c's values; calls cut
 * short or with bytes changed decode either as protobuf-c decodes them or not at all (then
 * protobuf-c decides); a repeated field, unpacked args and too many args are left to it. */
static void test_call_unpack_matches_protobuf_c(void **state)
{
    static uint8_t data[300], buf[4096];
    uint64_t args[20], seed = 0x9E3779B97F4A7C15ull, few[2];
    Rgpu__Call m, out;

    for (int round = 0; round < 2000; round++) {
        random_call(&m, args, data, &seed, round);
        size_t n = proto_call_pack(&m, buf);
        assert_true(proto_call_unpack(buf, n, &out, few, m.n_args > 2 ? 2 : 20) == (m.n_args <= 2));
        expect_same_call(buf, n);
        expect_same_call(buf, n > 0 ? n - 1 - seed % n : 0); /* cut short */
        for (int k = 0; k < 4 && n > 0; k++) {
            buf[(seed >> (8 * k)) % n] ^= (uint8_t)(1u << (seed >> (3 * k) & 7));
            expect_same_call(buf, n);
        }
    }
    static const uint8_t twice[] = {0x08, 0x01, 0x08, 0x02}, unpacked[] = {0x20, 0x05};
    assert_false(proto_call_unpack(twice, sizeof(twice), &out, args, 20));
    assert_false(proto_call_unpack(unpacked, sizeof(unpacked), &out, args, 20));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inline_round_trip, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_bulk_round_trip, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_streamed_bulk, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_oversized, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_discard, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_closed_mid_frame, pair_setup, pair_teardown),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_version_rule),
        cmocka_unit_test(test_op_minor),
        cmocka_unit_test(test_call_pack_matches_protobuf_c),
        cmocka_unit_test(test_call_unpack_matches_protobuf_c),
    };
    return cmocka_run_group_tests_name("proto framing", tests, NULL, NULL);
}
