/* The wire operations: their enum, argument structs, flags and versions are generated from
 * proto/ops.def (the one table of ops; tools/gen_ops.py) into proto/ops_gen.h. This header adds
 * what every op shares: handle ids, frame flags, and the conventions below.
 *
 * Handles (contexts, modules, functions, libraries, kernels, streams, events) are 64-bit ids
 * minted by the client; a create call carries the new id in its `id` argument and the server
 * binds it to the real handle in the session's handle table, so creation need not wait for a
 * reply. Device pointers are the server's real device addresses.
 *
 * A frame flagged PROTO_FLAG_NOREPLY gets no Reply; a failure comes back as an AsyncError.
 * Data up to PROTO_INLINE_MAX rides in Call.data/Reply.data, larger as frame bulk.
 */
#ifndef RGPU_PROTO_OPS_H
#define RGPU_PROTO_OPS_H

#include <stdint.h>

#include "proto/ops_gen.h"

#define PROTO_FLAG_NOREPLY  0x1
#define PROTO_OUTPUT_STDERR 0x2 /* an OUTPUT frame carries stderr text */

/* MODULE_LOAD / LIBRARY_LOAD image flags and the module cache's own result (see "Images"). */
#define PROTO_IMAGE_BY_HASH     0x1u
#define PROTO_IMAGE_CACHE       0x2u
#define PROTO_RESULT_NOT_CACHED 0x10001 /* Reply.result: no cached image has that hash */

/* Handle ids: (counter << 4) | type. The client's counter starts at PROTO_ID_FIRST_COUNTER;
 * smaller ids are reserved: the primary context of device d is PROTO_PRIMARY_CTX_ID(d) and the
 * server retains that primary context lazily on first use (and releases it at session end).
 * Call.ctx is the calling thread's current context id (0 = none); the server makes it current
 * before executing the call. Stream ids 0/1/2 = NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD.
 * A LAUNCH / FUNC_* / OCC_* handle may be a function or a kernel id (the type tells which); the
 * real driver accepts a CUkernel wherever a CUfunction is taken. */
enum proto_handle_type {
    PROTO_H_CTX = 1,
    PROTO_H_MODULE = 2,
    PROTO_H_FUNCTION = 3,
    PROTO_H_LIBRARY = 4,
    PROTO_H_KERNEL = 5,
    PROTO_H_STREAM = 6,
    PROTO_H_EVENT = 7,
    PROTO_H_GRAPH = 8,
    PROTO_H_GRAPH_EXEC = 9,
    PROTO_H_MEM_POOL = 10, /* CUmemoryPool; the default pool of device d is PROTO_DEFAULT_POOL_ID */
    PROTO_H_MEM_HANDLE = 11, /* CUmemGenericAllocationHandle (VMM physical memory): the id itself */
    PROTO_H_GRAPH_NODE = 12, /* CUgraphNode; ids of nodes the server found have PROTO_ID_SERVER */
    PROTO_H_SHADOW = 13,     /* server-side pinned stand-in for client host memory in graphs */
    PROTO_H_LINK = 14,       /* CUlinkState */
    PROTO_H_IMAGE = 15,      /* CUarray, CUtexObject or CUsurfObject (the server's record says
                              * which; the last free type value, so the three share it) */
};
#define PROTO_ID_TYPE(id)          ((unsigned)((id)&0xf))
#define PROTO_ID_FIRST_COUNTER     1024u
#define PROTO_PRIMARY_CTX_ID(dev)  ((((uint64_t)(dev) + 1) << 4) | PROTO_H_CTX)
#define PROTO_DEFAULT_POOL_ID(dev) ((((uint64_t)(dev) + 1) << 4) | PROTO_H_MEM_POOL)
#define PROTO_ID_SERVER            (1ull << 63) /* ids minted by the server (nodes of captured graphs) */
#define PROTO_STREAM_NULL          0u
#define PROTO_STREAM_LEGACY        1u
#define PROTO_STREAM_PER_THREAD    2u

/* Handshake (frame types in proto/frame.h): the client sends Hello; the server answers Welcome
 * with status 0 and a snapshot of every device it serves, renumbered from 0 (attrs[i] is
 * cuDeviceGetAttribute(i) for 0 < i < CU_DEVICE_ATTRIBUTE_MAX, 0 where the driver refuses), or
 * with a non-zero CUresult status and a reason (version mismatch names both versions), then
 * closes. After that: Call frames from the client, Reply / AsyncError frames from the server,
 * strictly in call order. BYE from the client ends the session cleanly.
 *
 * VMM and pools: device ordinals inside CUmemAllocationProp, CUmemAccessDesc, CUmemLocation and
 * CUmemPoolProps (location.id of type DEVICE) are the client's; the server maps them to its own.
 * Values of pool attributes travel as 64-bit integers whatever their C type.
 *
 * Arrays, texture and surface objects (PROTO_H_IMAGE ids): a CUDA array is named by its id; a
 * texture or surface object's value is the server's real CUtexObject / CUsurfObject (kernels
 * take it as a parameter), returned by the create call, while destroy names the object's id.
 * Resource descriptors travel raw with the array handle zeroed and the array's id in args.
 *
 * Images (MODULE_LOAD, LIBRARY_LOAD): the raw fatbin, cubin (ELF) or NUL-terminated PTX text;
 * the client unwraps a __fatBinC_Wrapper_t and sizes the image before sending it. Image flags
 * (image_flags, 0 when absent) ask for the server's module cache (server/module_cache.h): with
 * PROTO_IMAGE_BY_HASH, data is the image's SHA-256, image_len its length, and no bytes travel;
 * the server loads its copy or answers PROTO_RESULT_NOT_CACHED, and the client sends the call
 * again with the bytes and PROTO_IMAGE_CACHE, which asks the server to keep them.
 * Which ops may be sent with NOREPLY is the `noreply` flag of proto/ops.def; MEMCPY_DTOH with
 * async=1 is the exception that is not: its Reply carries the bytes, consumed later. */

/* The op's name ("MEMCPY_HTOD"), or "UNKNOWN_OP". */
const char *proto_op_name(unsigned op);

#endif
