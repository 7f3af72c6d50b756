/* Rgpu__Call decoded by hand, without allocating, on the worker's hot path (every call is one).
 * It takes only the form a Call is sent in (proto/call_pack.c): each of the five fields at most
 * once, args packed, varints of at most 10 bytes. Anything else — unknown or repeated fields,
 * unpacked args, more arguments than the caller has room for, a truncated message — is left to
 * protobuf-c, which decodes what protobuf allows and refuses what is malformed; so a message
 * decodes here only to what protobuf-c would decode it to (tests/unit/test_frame.c checks). */
#include "proto/frame.h"

/* One varint at *p (before end): false if truncated or longer than 64 bits. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;

    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        if (shift == 63 && b > 1)
            return false;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* A length prefix: a varint of at most 5 bytes and 32 bits, as protobuf-c reads them (it
 * refuses a longer one, so taking it here would decode what protobuf-c refuses). */
static bool get_length(const uint8_t **p, const uint8_t *end, uint64_t *n)
{
    const uint8_t *start = *p;

    return get_varint(p, end, n) && *p - start <= 5 && *n <= UINT32_MAX;
}

/* Field 4: n packed varints filling exactly [p, end). */
static bool get_args(const uint8_t *p, const uint8_t *end, Rgpu__Call *m, uint64_t *args,
                     size_t cap)
{
    size_t n = 0;

    while (p < end) {
        if (n == cap || !get_varint(&p, end, &args[n]))
            return false;
        n++;
    }
    m->n_args = n;
    m->args = n > 0 ? args : NULL;
    return true;
}

bool proto_call_unpack(const uint8_t *buf, size_t len, Rgpu__Call *m, uint64_t *args, size_t cap)
{
    const uint8_t *p = buf, *end = buf + len;
    unsigned seen = 0;
    uint64_t v, n;

    *m = (Rgpu__Call)RGPU__CALL__INIT;
    while (p < end) {
        uint8_t tag = *p++;
        unsigned field = tag >> 3;
        if (field < 1 || field > 5 || (seen & (1u << field)) || tag & 0x80)
            return false;
        seen |= 1u << field;
        if ((tag & 7) == 0 && field <= 3) { /* id, op, ctx: varints */
            if (!get_varint(&p, end, &v) || (field == 2 && v > UINT32_MAX))
                return false;
            if (field == 1)
                m->id = v;
            else if (field == 2)
                m->op = (uint32_t)v;
            else
                m->ctx = v;
            continue;
        }
        if ((tag & 7) != 2 || field < 4 || !get_length(&p, end, &n) || n > (uint64_t)(end - p))
            return false;
        if (field == 4 && !get_args(p, p + n, m, args, cap))
            return false;
        if (field == 5)
            m->data = (ProtobufCBinaryData){(size_t)n, (uint8_t *)p};
        p += n;
    }
    return true;
}
