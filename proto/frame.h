/* Framing: every message on a connection is
 *     struct proto_frame_hdr | protobuf message (msg_len bytes) | bulk (bulk_len bytes)
 * All integers little-endian. Bulk is raw data (copies) sent from and received into the caller's
 * memory directly; it is never inside the protobuf message. */
#ifndef RGPU_PROTO_FRAME_H
#define RGPU_PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "proto/rgpu.pb-c.h"
#include "transport/transport.h"

#define PROTO_MAGIC 0x55504752u /* "RGPU" */
/* Protocol version MAJOR.MINOR. Hello and Welcome carry both: proto_version is the major,
 * proto_minor the minor (a peer older than 1.1 leaves it out: 0). The rule
 * (proto_version_accept): a server serves clients of its own major whose minor is at most
 * PROTO_MINORS_BACK older than its own, or newer; the session speaks the older minor of the two.
 * Each op of proto/ops.def carries the minor it appeared in; an op newer than the session's
 * minor is refused with CUDA_ERROR_NOT_SUPPORTED, logged by name, by the side that knows it
 * (the client before sending it; the worker if one arrives anyway), never misread.
 * A Probe (PROTO_PROBE, client/session/pool.c) carries both too and is answered or refused by the
 * same rule. Minors: 1.0 the first (exact version match); 1.1 proto_minor, the op table's minors,
 * the NCCL shim's ops (NCCL_*) and the Probe/ProbeReply/Echo frames (a 1.0 server closes the
 * connection at a Probe: the pool still tries it, after the servers that answered); 1.2 the
 * ops of several devices (P2P_QUERY, CTX_PEER_ACCESS, ...) and of mirrored host memory
 * (HOST_MIRROR_*); MODULE_UNLOAD and LIBRARY_UNLOAD may come without waiting for a reply;
 * 1.3 NCCL 2.28's further calls (NCCL_COLL_EXT .. NCCL_COMM_QUERY) and communicators created
 * without holding the session (NCCL_COMM_INIT's `async`); Hello.mem_share and Probe.mem_share,
 * and a memory request above the tenant's quota refused instead of cut (an older server ignores
 * a share: the client does not go on with one when it asked for a share,
 * PROTO_MINOR_MEM_SHARE); the session's keepalive
 * (Hello.session_timeout_ms, PROTO_KEEPALIVE frames from the worker while a call runs: a client
 * arms its receive deadline only on a session that speaks 1.3). */
#define PROTO_VERSION         1u /* the major */
#define PROTO_VERSION_MINOR   3u
#define PROTO_MINOR_MEM_SHARE 3u
#define PROTO_MINORS_BACK     1u
/* The minor from which the worker keeps a waiting client informed (PROTO_KEEPALIVE). */
#define PROTO_MINOR_KEEPALIVE 3u
/* Limits: a frame whose message is larger is a protocol violation and ends the session. */
#define PROTO_MSG_MAX (4u << 20)
/* Data up to this size rides inline in Call.data / Reply.data; larger moves as bulk. */
#define PROTO_INLINE_MAX 4096u

enum proto_frame_type {
    PROTO_HELLO = 1,
    PROTO_WELCOME = 2,
    PROTO_CALL = 3,
    PROTO_REPLY = 4,
    PROTO_ASYNC_ERROR = 5,
    PROTO_BYE = 6,
    PROTO_OUTPUT = 7,      /* server -> client: text the session's kernels printed (bulk); flag */
                           /* PROTO_OUTPUT_STDERR: for stderr (device assert), else stdout   */
    PROTO_PROBE = 8,       /* client -> server, first frame instead of a Hello: Probe */
    PROTO_PROBE_REPLY = 9, /* server -> client: ProbeReply */
    PROTO_ECHO = 10,       /* after an answered probe, either way: no message, bulk bytes. The */
                           /* server answers each with an Echo carrying the same bytes, or */
                           /* none with PROTO_ECHO_SINK (it reads and drops them) */
    PROTO_KEEPALIVE = 11,  /* worker -> client (1.3), between frames while a call runs: no */
                           /* message, no bulk; the session still answers */
};
/* header flag of an Echo frame (beside PROTO_FLAG_* of proto/ops.h) */
#define PROTO_ECHO_SINK 0x4u
#define PROTO_ECHO_MAX  (64u << 20) /* bulk of one Echo frame, at most (a sink: read, dropped) */
/* Bulk of an Echo the server sends back, at most: the worker holds no more than this for it.
 * A larger one that is not a sink ends the connection. */
#define PROTO_ECHO_BACK_MAX (64u << 10)

struct proto_frame_hdr {
    uint32_t magic;
    uint16_t type;
    uint16_t flags;
    uint32_t msg_len;
    uint32_t reserved;
    uint64_t bulk_len;
};

/* The handshake's rule for a server speaking srv_major.srv_minor and a client speaking
 * cli_major.cli_minor: true with the session's minor in *minor_p, or false with a sentence that
 * names both versions in why. Pure, so the rule is tested with any two builds' numbers. */
bool proto_version_accept(uint32_t srv_major, uint32_t srv_minor, uint32_t cli_major,
                          uint32_t cli_minor, uint32_t *minor_p, char *why, size_t cap);
/* Whether op exists in protocol PROTO_VERSION.minor (false for an op number out of range). */
bool proto_op_in_minor(unsigned op, uint32_t minor);

/* Send one frame: header, packed message (may be NULL), and bulk (may be NULL/0).
 * The message is packed into scratch when it fits, so the hot path does not allocate.
 * Streaming: with bulk == NULL and bulk_len > 0 only the header and message are sent, and the
 * caller must then send exactly bulk_len bytes with transport_sendv (e.g. chunk by chunk from a
 * staging buffer) before any other frame. */
rg_status_t proto_send(struct transport_conn *conn, enum proto_frame_type type,
                       const ProtobufCMessage *msg, const void *bulk, uint64_t bulk_len);

/* The same with header flags (PROTO_FLAG_* from proto/ops.h). */
rg_status_t proto_send_flags(struct transport_conn *conn, enum proto_frame_type type,
                             unsigned flags, const ProtobufCMessage *msg, const void *bulk,
                             uint64_t bulk_len);

/* A Call's packed size and its packing into out (that many bytes), by hand: protobuf's wire
 * format, byte for byte what protobuf-c writes (proto/call_pack.c). */
size_t proto_call_packed_size(const Rgpu__Call *m);
size_t proto_call_pack(const Rgpu__Call *m, uint8_t *out);
/* Decode a Call in the form proto_call_pack writes, without allocating: the args go to
 * args[cap], data points into buf. false: not that form (protobuf-c must decide; it refuses
 * what is malformed). proto/call_unpack.c. */
bool proto_call_unpack(const uint8_t *buf, size_t len, Rgpu__Call *m, uint64_t *args, size_t cap);

/* Build a frame (header and packed message, no bulk: bulk_len must then follow separately)
 * into buf. Returns the bytes written, or 0 when it does not fit in cap. Used to coalesce many
 * small frames into one write. */
size_t proto_frame_pack(uint8_t *buf, size_t cap, enum proto_frame_type type, unsigned flags,
                        const ProtobufCMessage *msg, uint64_t bulk_len);

/* Receive one frame header and its message bytes into buf (capacity cap, at most
 * PROTO_MSG_MAX). Checks magic and limits; on violation logs what was wrong and returns
 * RG_ERR_PROTO. The caller then receives hdr->bulk_len bytes of bulk with transport_recv
 * (or proto_discard). */
rg_status_t proto_recv(struct transport_conn *conn, struct proto_frame_hdr *hdr, uint8_t *buf,
                       size_t cap);

/* Before the first receive on conn (a TCP connection that just sent its Hello or Probe): wait
 * for the peer's first bytes (within the socket's receive timeout) without taking them, and say
 * whether they can begin a frame. RG_OK when they can (then proto_recv); RG_ERR_PROTO when the
 * peer answered something else (an HTTP server, say), those bytes escaped into seen (seen_len);
 * RG_ERR_CLOSED when it closed (or reset) the connection without a byte; RG_ERR_TIMEOUT when
 * nothing came. A connection without a socket is RG_OK at once. */
rg_status_t proto_peek_answer(struct transport_conn *conn, char *seen, size_t seen_len);

/* Read and drop len bytes. */
rg_status_t proto_discard(struct transport_conn *conn, uint64_t len);

const char *proto_frame_type_name(unsigned type);

#endif
