/* The tests' raw wire client (wire_client.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/wire/wire_client.h"

Rgpu__Welcome *wire_hello(struct transport_conn *conn, const Rgpu__Hello *h, uint8_t *buf,
                          size_t cap)
{
    struct proto_frame_hdr hdr;
    Rgpu__Welcome *w;

    assert_int_equal(proto_send(conn, PROTO_HELLO, &h->base, NULL, 0), RG_OK);
    assert_int_equal(proto_recv(conn, &hdr, buf, cap), RG_OK);
    assert_int_equal(hdr.type, PROTO_WELCOME);
    w = rgpu__welcome__unpack(NULL, hdr.msg_len, buf);
    assert_non_null(w);
    return w;
}

void wire_call(struct transport_conn *conn, uint64_t id, uint64_t ctx, unsigned op,
               const uint64_t *args, size_t nargs, unsigned flags, const void *data, size_t len,
               const void *bulk, size_t bulk_len)
{
    Rgpu__Call c = RGPU__CALL__INIT;

    c.id = id;
    c.op = op;
    c.ctx = ctx;
    c.n_args = nargs; /* positional: the words WIRE_OP packed, as they come */
    c.args = (uint64_t *)args;
    c.data = (ProtobufCBinaryData){len, (uint8_t *)data};
    assert_int_equal(proto_send_flags(conn, PROTO_CALL, flags, &c.base, bulk, bulk_len), RG_OK);
}

Rgpu__Reply *wire_reply(struct transport_conn *conn, uint8_t *buf, size_t cap, void *bulk,
                        size_t bulk_cap)
{
    struct proto_frame_hdr hdr;
    Rgpu__Reply *r;

    assert_int_equal(proto_recv(conn, &hdr, buf, cap), RG_OK);
    assert_int_equal(hdr.type, PROTO_REPLY);
    assert_true(hdr.bulk_len <= bulk_cap);
    if (hdr.bulk_len > 0)
        assert_int_equal(transport_recv(conn, bulk, hdr.bulk_len), RG_OK);
    r = rgpu__reply__unpack(NULL, hdr.msg_len, buf);
    assert_non_null(r);
    return r;
}
