/* Rgpu__Call packed by hand. Every asynchronous call (a launch, a copy, a memset) is one Call
 * packed into the batch, and protobuf-c packs by walking the message's descriptor (160 ns for a
 * launch on the CI VM). The bytes here are protobuf's wire format for rgpu.proto's Call, field
 * by field in number order with zero scalars and empty fields left out, as protobuf-c writes
 * them: tests/unit/test_frame.c compares the two byte for byte. Decoding stays protobuf-c's. */
#include <string.h>

#include "proto/frame.h"

static size_t varint_len(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Bytes of the packed args (field 4's payload). */
static size_t args_len(const Rgpu__Call *m)
{
    size_t n = 0;

    for (size_t i = 0; i < m->n_args; i++)
        n += varint_len(m->args[i]);
    return n;
}

size_t proto_call_packed_size(const Rgpu__Call *m)
{
    size_t n = 0, a = args_len(m);

    n += m->id ? 1 + varint_len(m->id) : 0;
    n += m->op ? 1 + varint_len(m->op) : 0;
    n += m->ctx ? 1 + varint_len(m->ctx) : 0;
    n += m->n_args ? 1 + varint_len(a) + a : 0;
    n += m->data.len ? 1 + varint_len(m->data.len) + m->data.len : 0;
    return n;
}

/* Field 4 at p, in one pass: the varints go after a one-byte length, which holds their total
 * unless it is 128 bytes or more; then they move up to make room for a longer one. */
static uint8_t *pack_args(const Rgpu__Call *m, uint8_t *p)
{
    uint8_t *start = p + 2, *end = start;
    size_t len, extra;

    *p = 0x22; /* field 4, length-delimited (packed) */
    for (size_t i = 0; i < m->n_args; i++)
        end = varint(end, m->args[i]);
    len = (size_t)(end - start);
    extra = varint_len(len) - 1;
    if (extra > 0)
        memmove(start + extra, start, len);
    varint(p + 1, len);
    return end + extra;
}

size_t proto_call_pack(const Rgpu__Call *m, uint8_t *out)
{
    uint8_t *p = out;

    if (m->id) {
        *p = 0x08; /* field 1, varint */
        p = varint(p + 1, m->id);
    }
    if (m->op) {
        *p = 0x10;
        p = varint(p + 1, m->op);
    }
    if (m->ctx) {
        *p = 0x18;
        p = varint(p + 1, m->ctx);
    }
    if (m->n_args)
        p = pack_args(m, p);
    if (m->data.len) {
        *p = 0x2a;
        p = varint(p + 1, m->data.len);
        memcpy(p, m->data.data, m->data.len);
        p += m->data.len;
    }
    return (size_t)(p - out);
}
