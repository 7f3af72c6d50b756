/* A raw wire client for the tests that speak the protocol to a worker or a gpu-server directly
 * (tests/worker/test_worker.c, tests/server/test_server.c): one frame at a time, every step
 * asserted with cmocka. */
#ifndef RGPU_TESTS_WIRE_CLIENT_H
#define RGPU_TESTS_WIRE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "proto/ops.h"

/* Send h (the caller fills what it tests) and return the Welcome (free it with
 * rgpu__welcome__free_unpacked); buf (cap bytes) receives the frame. */
Rgpu__Welcome *wire_hello(struct transport_conn *conn, const Rgpu__Hello *h, uint8_t *buf,
                          size_t cap);
/* Send one Call: id, op, Call.ctx, args, inline data, frame flags and bulk. */
void wire_call(struct transport_conn *conn, uint64_t id, unsigned op, uint64_t ctx, unsigned flags,
               const uint64_t *args, size_t nargs, const void *data, size_t len, const void *bulk,
               size_t bulk_len);
/* The next frame, which must be a Reply; its bulk (at most bulk_cap bytes) lands in bulk. */
Rgpu__Reply *wire_reply(struct transport_conn *conn, uint8_t *buf, size_t cap, void *bulk,
                        size_t bulk_cap);

#endif
