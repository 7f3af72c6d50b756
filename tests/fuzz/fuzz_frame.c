/* Fuzz target: the frame decoder (proto/frame.c, proto_recv and proto_discard) reading a byte
 * stream from a socket, and every message it frames decoded as its type says. */
#include <stdlib.h>
#include <unistd.h>

#include "common/log.h"
#include "proto/frame.h"
#include "tests/fuzz/fuzz.h"

static uint8_t *msg_buf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    rg_log_level_current = -1; /* malformed frames are the point: no log line for each */
    msg_buf = malloc(PROTO_MSG_MAX);
    return msg_buf == NULL;
}

static void decode(const struct proto_frame_hdr *hdr, const uint8_t *buf)
{
    Rgpu__Call m = RGPU__CALL__INIT;
    uint64_t args[64];
    ProtobufCMessage *msg = NULL;

#define UNPACK(fn)                                                                                 \
    do {                                                                                           \
        void *u = fn(NULL, hdr->msg_len, buf);                                                     \
        msg = u;                                                                                   \
    } while (0)
    switch (hdr->type) { /* each message type starts with its ProtobufCMessage base */
    case PROTO_HELLO:
        UNPACK(rgpu__hello__unpack);
        break;
    case PROTO_WELCOME:
        UNPACK(rgpu__welcome__unpack);
        break;
    case PROTO_CALL:
        proto_call_unpack(buf, hdr->msg_len, &m, args, 64);
        UNPACK(rgpu__call__unpack);
        break;
    case PROTO_REPLY:
        UNPACK(rgpu__reply__unpack);
        break;
    case PROTO_ASYNC_ERROR:
        UNPACK(rgpu__async_error__unpack);
        break;
    default:
        break;
    }
#undef UNPACK
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_feed feed;
    struct transport_conn *conn;
    struct proto_frame_hdr hdr;

    if (fuzz_feed_start(&feed, NULL, 0, data, size) != 0)
        return 0;
    if (transport_tcp_adopt_fd(feed.fds[1], &conn) == RG_OK) {
        while (proto_recv(conn, &hdr, msg_buf, PROTO_MSG_MAX) == RG_OK) {
            decode(&hdr, msg_buf);
            proto_frame_type_name(hdr.type);
            if (proto_discard(conn, hdr.bulk_len) != RG_OK)
                break;
        }
        transport_close(conn);
    } else {
        close(feed.fds[1]);
    }
    fuzz_feed_end(&feed);
    return 0;
}
