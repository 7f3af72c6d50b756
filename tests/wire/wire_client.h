/* A raw wire client for the tests that speak the protocol to a worker or a gpu-server directly
 * (tests/worker/test_worker.c, tests/server/test_server.c): one frame at a time, every step
 * asserted with cmocka. */
#ifndef RGPU_TESTS_WIRE_CLIENT_H
#define RGPU_TESTS_WIRE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "proto/ops.h"

/* A Call's op and its arguments, named as in proto/ops.def and checked by the compiler against
 * the generated struct proto_args_<OP>: one macro argument that stands for the three parameters
 * `unsigned op, const uint64_t *args, size_t nargs` of wire_call and of the tests' helpers, so
 * an op never goes out with another op's words or count. Arguments not named are 0:
 *     send_call(&p, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = n), 0, NULL, 0, src, n);
 *     call_result(&p, WIRE_OP(NOP), NULL, 0);
 * A test that sends a malformed call on purpose (too few words, an op number the server does not
 * know, words of no op) passes them by position and says so in a comment holding
 * "positional:" on the call's lines or the line above; op_table (tools/gen_ops.py --check)
 * fails on a helper call that does neither. */
#define WIRE_OP(OP, ...)                                                                           \
    PROTO_OP_##OP, (const uint64_t *)&(const struct proto_args_##OP){__VA_ARGS__},                 \
        (size_t)PROTO_NARGS_##OP
/* The first N words only (N a literal): an op sent without its optional trailing arguments
 * (after `?` in ops.def; the worker reads them as 0). op_table checks that N covers the required
 * arguments and every argument named. */
#define WIRE_OP_N(OP, N, ...)                                                                      \
    PROTO_OP_##OP, (const uint64_t *)&(const struct proto_args_##OP){__VA_ARGS__},                 \
        (size_t)(N) + 0 * sizeof(char[(N) <= PROTO_NARGS_##OP ? 1 : -1])
/* An op whose last argument is variable (`name...` in ops.def): its named arguments, then the
 * words of REST, a parenthesized list: WIRE_OP_REST(MODULE_LOAD_JIT, (w0, w1), .id = m, ...). */
#define WIRE_UNPAREN(...) __VA_ARGS__
#define WIRE_COUNT(...)                                                                            \
    WIRE_COUNT_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define WIRE_COUNT_(w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15, w16, n, ...) n
/* How many words REST holds (a constant). */
#define WIRE_REST_N(REST) WIRE_COUNT REST
#define WIRE_OP_REST(OP, REST, ...)                                                                \
    PROTO_OP_##OP, (const uint64_t *)&(const struct {                                              \
        struct proto_args_##OP named;                                                              \
        uint64_t rest[WIRE_REST_N(REST)];                                                          \
    }){{__VA_ARGS__}, {WIRE_UNPAREN REST}},                                                        \
        (size_t)PROTO_NARGS_##OP + WIRE_REST_N(REST)

/* Send h (the caller fills what it tests) and return the Welcome (free it with
 * rgpu__welcome__free_unpacked); buf (cap bytes) receives the frame. */
Rgpu__Welcome *wire_hello(struct transport_conn *conn, const Rgpu__Hello *h, uint8_t *buf,
                          size_t cap);
/* Send one Call: id, Call.ctx, the op and its arguments (WIRE_OP), frame flags, inline data and
 * bulk. */
void wire_call(struct transport_conn *conn, uint64_t id, uint64_t ctx, unsigned op,
               const uint64_t *args, size_t nargs, unsigned flags, const void *data, size_t len,
               const void *bulk, size_t bulk_len);
/* The next frame, which must be a Reply; its bulk (at most bulk_cap bytes) lands in bulk. */
Rgpu__Reply *wire_reply(struct transport_conn *conn, uint8_t *buf, size_t cap, void *bulk,
                        size_t bulk_cap);

#endif
