#include "proto/frame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "proto/ops.h"

const char *proto_op_name(unsigned op)
{
    return op < PROTO_OP_COUNT ? proto_ops[op].name : "UNKNOWN_OP";
}

bool proto_version_accept(uint32_t srv_major, uint32_t srv_minor, uint32_t cli_major,
                          uint32_t cli_minor, uint32_t *minor_p, char *why, size_t cap)
{
    uint32_t oldest = srv_minor > PROTO_MINORS_BACK ? srv_minor - PROTO_MINORS_BACK : 0;

    if (cli_major != srv_major) {
        snprintf(why, cap,
                 "protocol version mismatch: client speaks %u, server speaks %u (%u.%u and "
                 "%u.%u: a server serves its own major only)",
                 cli_major, srv_major, cli_major, cli_minor, srv_major, srv_minor);
        return false;
    }
    if (cli_minor < oldest) {
        snprintf(why, cap,
                 "protocol version too old: client speaks %u.%u, server speaks %u.%u and serves "
                 "%u.%u and newer",
                 cli_major, cli_minor, srv_major, srv_minor, srv_major, oldest);
        return false;
    }
    *minor_p = cli_minor < srv_minor ? cli_minor : srv_minor;
    return true;
}

bool proto_op_in_minor(unsigned op, uint32_t minor)
{
    return op < PROTO_OP_COUNT && proto_ops[op].major == PROTO_VERSION &&
           proto_ops[op].minor <= minor;
}

const char *proto_frame_type_name(unsigned type)
{
    switch (type) {
    case PROTO_HELLO:
        return "hello";
    case PROTO_WELCOME:
        return "welcome";
    case PROTO_CALL:
        return "call";
    case PROTO_REPLY:
        return "reply";
    case PROTO_ASYNC_ERROR:
        return "async-error";
    case PROTO_BYE:
        return "bye";
    case PROTO_OUTPUT:
        return "output";
    case PROTO_PROBE:
        return "probe";
    case PROTO_PROBE_REPLY:
        return "probe-reply";
    case PROTO_ECHO:
        return "echo";
    case PROTO_KEEPALIVE:
        return "keepalive";
    }
    return "unknown";
}

/* A message's packed size and packing: Calls by hand (proto/call_pack.c), the rest by
 * protobuf-c. */
static size_t packed_size(const ProtobufCMessage *msg)
{
    if (msg == NULL)
        return 0;
    if (msg->descriptor == &rgpu__call__descriptor)
        return proto_call_packed_size((const Rgpu__Call *)msg);
    return protobuf_c_message_get_packed_size(msg);
}

static void pack(const ProtobufCMessage *msg, uint8_t *out)
{
    if (msg->descriptor == &rgpu__call__descriptor)
        proto_call_pack((const Rgpu__Call *)msg, out);
    else
        protobuf_c_message_pack(msg, out);
}

rg_status_t proto_send_flags(struct transport_conn *conn, enum proto_frame_type type,
                             unsigned flags, const ProtobufCMessage *msg, const void *bulk,
                             uint64_t bulk_len)
{
    uint8_t scratch[1024];
    struct proto_frame_hdr hdr = {.magic = PROTO_MAGIC,
                                  .type = (uint16_t)type,
                                  .flags = (uint16_t)flags,
                                  .bulk_len = bulk_len};
    struct iovec iov[3];
    uint8_t *packed = scratch;
    size_t len = packed_size(msg);
    rg_status_t status;
    int n = 0;

    if (len > PROTO_MSG_MAX)
        return RG_ERR_INVALID;
    if (len > sizeof(scratch)) {
        packed = malloc(len);
        if (packed == NULL)
            return RG_ERR_NOMEM;
    }
    if (msg != NULL)
        pack(msg, packed);
    hdr.msg_len = (uint32_t)len;
    iov[n++] = (struct iovec){&hdr, sizeof(hdr)};
    if (len > 0)
        iov[n++] = (struct iovec){packed, len};
    if (bulk != NULL && bulk_len > 0)
        iov[n++] = (struct iovec){(void *)bulk, bulk_len};
    status = transport_sendv(conn, iov, n);
    if (packed != scratch)
        free(packed);
    return status;
}

size_t proto_frame_pack(uint8_t *buf, size_t cap, enum proto_frame_type type, unsigned flags,
                        const ProtobufCMessage *msg, uint64_t bulk_len)
{
    struct proto_frame_hdr hdr = {.magic = PROTO_MAGIC,
                                  .type = (uint16_t)type,
                                  .flags = (uint16_t)flags,
                                  .bulk_len = bulk_len};
    size_t len = packed_size(msg);

    if (len > PROTO_MSG_MAX || sizeof(hdr) + len > cap)
        return 0;
    hdr.msg_len = (uint32_t)len;
    memcpy(buf, &hdr, sizeof(hdr));
    if (msg != NULL)
        pack(msg, buf + sizeof(hdr));
    return sizeof(hdr) + len;
}

rg_status_t proto_send(struct transport_conn *conn, enum proto_frame_type type,
                       const ProtobufCMessage *msg, const void *bulk, uint64_t bulk_len)
{
    return proto_send_flags(conn, type, 0, msg, bulk, bulk_len);
}

rg_status_t proto_recv(struct transport_conn *conn, struct proto_frame_hdr *hdr, uint8_t *buf,
                       size_t cap)
{
    rg_status_t status = transport_recv(conn, hdr, sizeof(*hdr));

    if (status != RG_OK)
        return status;
    if (hdr->magic != PROTO_MAGIC) {
        rg_error("malformed frame: bad magic 0x%08x (expected 0x%08x)", hdr->magic, PROTO_MAGIC);
        return RG_ERR_PROTO;
    }
    if (hdr->msg_len > cap || hdr->msg_len > PROTO_MSG_MAX) {
        rg_error("oversized frame: %s message of %u bytes exceeds the limit of %zu",
                 proto_frame_type_name(hdr->type), hdr->msg_len,
                 cap < PROTO_MSG_MAX ? cap : (size_t)PROTO_MSG_MAX);
        return RG_ERR_PROTO;
    }
    if (hdr->msg_len == 0)
        return RG_OK;
    return transport_recv(conn, buf, hdr->msg_len);
}

rg_status_t proto_peek_answer(struct transport_conn *conn, char *seen, size_t seen_len)
{
    const uint32_t magic = PROTO_MAGIC;
    char first[48] = "";
    int fd = transport_fd(conn);
    ssize_t n;

    if (seen_len > 0)
        seen[0] = '\0';
    if (fd < 0)
        return RG_OK;
    while ((n = recv(fd, first, sizeof(first) - 1, MSG_PEEK)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? RG_ERR_TIMEOUT : RG_ERR_CLOSED;
    if (n == 0)
        return RG_ERR_CLOSED;
    if (memcmp(first, &magic, (size_t)n < sizeof(magic) ? (size_t)n : sizeof(magic)) == 0)
        return RG_OK;
    first[n] = '\0';
    for (ssize_t i = 0; i < n; i++) /* a NUL would end what is shown */
        first[i] = first[i] == '\0' ? ' ' : first[i];
    rg_log_escape(seen, seen_len, first);
    return RG_ERR_PROTO;
}

rg_status_t proto_discard(struct transport_conn *conn, uint64_t len)
{
    uint8_t sink[16384];

    while (len > 0) {
        size_t n = len < sizeof(sink) ? (size_t)len : sizeof(sink);
        rg_status_t status = transport_recv(conn, sink, n);
        if (status != RG_OK)
            return status;
        len -= n;
    }
    return RG_OK;
}
