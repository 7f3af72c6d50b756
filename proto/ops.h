/* The driver calls that travel to the server, with the meaning of Call.args / Call.data and of
 * Reply.out / Reply.data for each. Handles (contexts, modules, functions, libraries, kernels,
 * streams, events) are 64-bit ids minted by the client; a create call carries the new id in
 * args[0] and the server binds it to the real handle in the session's handle table, so creation
 * need not wait for a reply. Stream id 0 is the NULL stream; 1 and 2 are CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD. Device pointers are the server's real device addresses.
 *
 * A frame flagged PROTO_FLAG_NOREPLY gets no Reply; a failure comes back as an AsyncError.
 * Data up to PROTO_INLINE_MAX rides in Call.data/Reply.data, larger as frame bulk.
 *
 *  op                          args                                   data in / out
 */
#ifndef RGPU_PROTO_OPS_H
#define RGPU_PROTO_OPS_H

#include <stdint.h>

#define PROTO_FLAG_NOREPLY 0x1
#define PROTO_OUTPUT_STDERR 0x2 /* an OUTPUT frame carries stderr text */

/* MODULE_LOAD / LIBRARY_LOAD image flags and the module cache's own result (see "Images"). */
#define PROTO_IMAGE_BY_HASH 0x1u
#define PROTO_IMAGE_CACHE 0x2u
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
    PROTO_H_MEM_POOL = 10,   /* CUmemoryPool; the default pool of device d is PROTO_DEFAULT_POOL_ID */
    PROTO_H_MEM_HANDLE = 11, /* CUmemGenericAllocationHandle (VMM physical memory): the id itself */
    PROTO_H_GRAPH_NODE = 12, /* CUgraphNode; ids of nodes the server found have PROTO_ID_SERVER */
    PROTO_H_SHADOW = 13,     /* server-side pinned stand-in for client host memory in graphs */
    PROTO_H_LINK = 14,       /* CUlinkState */
    PROTO_H_IMAGE = 15,      /* CUarray, CUtexObject or CUsurfObject (the server's record says
                              * which; the last free type value, so the three share it) */
};
#define PROTO_ID_TYPE(id) ((unsigned)((id) & 0xf))
#define PROTO_ID_FIRST_COUNTER 1024u
#define PROTO_PRIMARY_CTX_ID(dev) ((((uint64_t)(dev) + 1) << 4) | PROTO_H_CTX)
#define PROTO_DEFAULT_POOL_ID(dev) ((((uint64_t)(dev) + 1) << 4) | PROTO_H_MEM_POOL)
#define PROTO_ID_SERVER (1ull << 63) /* ids minted by the server (nodes of captured graphs) */
#define PROTO_STREAM_NULL 0u
#define PROTO_STREAM_LEGACY 1u
#define PROTO_STREAM_PER_THREAD 2u

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
 * (args[1], 0 when absent) ask for the server's module cache (server/module_cache.h): with
 * PROTO_IMAGE_BY_HASH, data is the image's SHA-256, args[2] its length, and no bytes travel;
 * the server loads its copy or answers PROTO_RESULT_NOT_CACHED, and the client sends the call
 * again with the bytes and PROTO_IMAGE_CACHE, which asks the server to keep them.
 * LAUNCH params: a buffer of params_len bytes in which parameter i sits at offset off_i of the
 * function's layout (FUNC_GET_PARAM_LAYOUT, which the server also uses to rebuild
 * kernelParams[i] = buf + off_i). The `extra` form (CU_LAUNCH_PARAM_BUFFER_POINTER) has that
 * very layout, so its buffer is sent unchanged.
 * MEMCPY_DTOH with async=1 is sent without NOREPLY: its Reply carries the bytes, and the client
 * consumes it at its next synchronizing point instead of waiting at the call. Every other call
 * with async=1, and EVENT_RECORD, STREAM_WAIT_EVENT, LAUNCH, MEMSET*, *_DESTROY, are sent with
 * NOREPLY. */

#define PROTO_OPS(X)                                                                            \
    X(NOP)                       /* []                                   round trip          */ \
    X(CTX_CREATE)                /* [id, flags, dev]                                         */ \
    X(CTX_DESTROY)               /* [ctx]                                                    */ \
    X(CTX_SYNCHRONIZE)           /* []   (Call.ctx)                                          */ \
    X(CTX_SET_LIMIT)             /* [limit, value]                                           */ \
    X(CTX_GET_LIMIT)             /* [limit] -> out[value]                                    */ \
    X(CTX_SET_CACHE_CONFIG)      /* [config]                                                 */ \
    X(PRIMARY_CTX_RESET)         /* [dev]                                                    */ \
    X(PRIMARY_CTX_SET_FLAGS)     /* [dev, flags]                                             */ \
    X(MEM_ALLOC)                 /* [size] -> out[dptr]                                      */ \
    X(MEM_ALLOC_PITCH)           /* [width, height, elemsize] -> out[dptr, pitch]            */ \
    X(MEM_FREE)                  /* [dptr]                                                   */ \
    X(MEM_GET_INFO)              /* [] -> out[free, total]                                   */ \
    X(MEMCPY_HTOD)               /* [dst, size, stream, async]          data/bulk: bytes     */ \
    X(MEMCPY_DTOH)               /* [src, size, stream, async]  -> data/bulk: bytes          */ \
    X(MEMCPY_DTOD)               /* [dst, src, size, stream, async]                          */ \
    X(MEMSET)                    /* [dst, value, elemsize, count, stream, async]             */ \
    X(MEMSET_2D)                 /* [dst, pitch, value, elemsize, width, height, stream, as] */ \
    X(MODULE_LOAD)               /* [id, image flags, image len]        data/bulk: image    */ \
    X(MODULE_UNLOAD)             /* [mod]                                                    */ \
    X(MODULE_GET_FUNCTION)       /* [id, mod]                            data: name          */ \
    X(MODULE_GET_GLOBAL)         /* [mod] -> out[dptr, size]             data: name          */ \
    X(LIBRARY_LOAD)              /* [id, image flags, image len]        data/bulk: image    */ \
    X(LIBRARY_UNLOAD)            /* [lib]                                                    */ \
    X(LIBRARY_GET_KERNEL)        /* [id, lib]                            data: name          */ \
    X(LIBRARY_GET_MODULE)        /* [id, lib]                                                */ \
    X(LIBRARY_GET_GLOBAL)        /* [lib] -> out[dptr, size]             data: name          */ \
    X(KERNEL_GET_FUNCTION)       /* [id, kernel]  (Call.ctx)                                 */ \
    X(FUNC_GET_ATTRIBUTE)        /* [func|kernel, attrib, dev] -> out[value]                 */ \
    X(FUNC_SET_ATTRIBUTE)        /* [func|kernel, attrib, value, dev]                        */ \
    X(FUNC_SET_CACHE_CONFIG)     /* [func|kernel, config, dev]                               */ \
    X(FUNC_GET_PARAM_LAYOUT)     /* [func|kernel] -> out[n, off0, size0, off1, size1, ...]   */ \
    X(LAUNCH)                    /* [f, gx,gy,gz, bx,by,bz, shmem, stream, params_len, nattr]*/ \
                                 /*  data: params (packed by layout), then nattr raw         */ \
                                 /*  CUlaunchAttribute                                       */ \
    X(STREAM_CREATE)             /* [id, flags, priority]                                    */ \
    X(STREAM_DESTROY)            /* [stream]                                                 */ \
    X(STREAM_SYNCHRONIZE)        /* [stream]                                                 */ \
    X(STREAM_QUERY)              /* [stream]                                                 */ \
    X(STREAM_WAIT_EVENT)         /* [stream, event, flags]                                   */ \
    X(EVENT_CREATE)              /* [id, flags]                                              */ \
    X(EVENT_DESTROY)             /* [event]                                                  */ \
    X(EVENT_RECORD)              /* [event, stream, flags]                                   */ \
    X(EVENT_SYNCHRONIZE)         /* [event]                                                  */ \
    X(EVENT_QUERY)               /* [event]                                                  */ \
    X(EVENT_ELAPSED)             /* [start, end] -> out[float bits]                          */ \
    X(OCC_MAX_BLOCKS)            /* [f, block, dsmem, flags] -> out[blocks]                  */ \
    X(OCC_MAX_CLUSTERS)          /* [f, gx,gy,gz, bx,by,bz, shmem, nattr] -> out[clusters]  */ \
                                 /*  data: nattr raw CUlaunchAttribute                       */ \
    X(OCC_AVAIL_DSMEM)           /* [f, blocks, block] -> out[bytes]                         */ \
    X(OCC_MAX_POTENTIAL_BLOCK)   /* [f, dsmem, limit, flags] -> out[min_grid, block]         */ \
    X(MEM_ALLOC_ASYNC)           /* [size, stream] -> out[dptr]   (stream-ordered, default   */ \
                                 /*  pool of the device)                                     */ \
    X(MEM_FREE_ASYNC)            /* [dptr, stream]                                           */ \
    X(STREAM_BEGIN_CAPTURE)      /* [stream, mode]                                           */ \
    X(STREAM_END_CAPTURE)        /* [stream, graph id]: a new id, or the one bound by        */ \
                                 /*  STREAM_GET_CAPTURE_INFO (0: capture into a graph)       */ \
    X(GRAPH_INSTANTIATE)         /* [exec id, graph, flags]                                  */ \
    X(GRAPH_LAUNCH)              /* [exec, stream]                                           */ \
    X(GRAPH_UPLOAD)              /* [exec, stream]                                           */ \
    X(GRAPH_EXEC_DESTROY)        /* [exec]                                                   */ \
    X(GRAPH_DESTROY)             /* [graph]                                                  */ \
    X(GRAPH_NODE_COUNT)          /* [graph] -> out[number of nodes]                          */ \
    X(THREAD_CAPTURE_MODE)       /* [mode]: the calling thread's capture mode, applied to    */ \
                                 /*  the worker's thread (cuThreadExchangeStreamCaptureMode) */ \
    X(MEM_ADDRESS_RESERVE)       /* [size, alignment, addr, flags] -> out[ptr]               */ \
    X(MEM_ADDRESS_FREE)          /* [ptr, size]                                              */ \
    X(MEM_CREATE)                /* [id, size, flags]                data: CUmemAllocationProp*/ \
    X(MEM_RELEASE)               /* [handle id]                                              */ \
    X(MEM_MAP)                   /* [ptr, size, offset, handle id, flags]                    */ \
    X(MEM_UNMAP)                 /* [ptr, size]                                              */ \
    X(MEM_SET_ACCESS)            /* [ptr, size]               data: CUmemAccessDesc[count]   */ \
    X(MEM_GET_ACCESS)            /* [ptr] -> out[flags]       data: CUmemLocation            */ \
    X(MEM_GET_GRANULARITY)       /* [option] -> out[bytes]    data: CUmemAllocationProp      */ \
    X(MEM_POOL_CREATE)           /* [id]                      data: CUmemPoolProps           */ \
    X(MEM_POOL_DESTROY)          /* [pool]                                                   */ \
    X(MEM_POOL_SET_ATTR)         /* [pool, attr, value]                                      */ \
    X(MEM_POOL_GET_ATTR)         /* [pool, attr] -> out[value]                               */ \
    X(MEM_POOL_TRIM)             /* [pool, min bytes to keep]                                */ \
    X(MEM_POOL_SET_ACCESS)       /* [pool]                    data: CUmemAccessDesc[count]   */ \
    X(MEM_ALLOC_FROM_POOL)       /* [size, pool, stream] -> out[dptr]                        */ \
    X(DEVICE_SET_MEM_POOL)       /* [dev, pool]                                              */ \
    X(SHADOW_ALLOC)              /* [id, size]                                               */ \
    X(MEMCPY_SHADOW)             /* [dir 0=HtoD 1=DtoH, dptr, shadow, offset, len, stream]   */ \
    X(SHADOW_WRITE)              /* [shadow, offset, len, stream]     data/bulk: bytes       */ \
    X(SHADOW_READ)               /* [shadow, offset, len, stream] -> bulk: bytes             */ \
    X(GRAPH_CREATE)              /* [id, flags]                                              */ \
    X(GRAPH_ADD_NODE)            /* [graph, node id, CUgraphNodeType, ndeps, 12 type args]   */ \
                                 /*  data: ndeps node ids, then kernel parameters; MEM_ALLOC */ \
                                 /*  -> out[dptr]. Type args: KERNEL f,gx,gy,gz,bx,by,bz,    */ \
                                 /*  shmem,params_len; MEMSET dst,pitch,value,elemsize,w,h;  */ \
                                 /*  MEMCPY srckind,src,srcpitch,dstkind,dst,dstpitch,w,h    */ \
                                 /*  (kind 0 device address, 1 shadow id); EVENT_* event;    */ \
                                 /*  GRAPH child; MEM_ALLOC bytes,dev; MEM_FREE dptr;        */ \
                                 /*  CONDITIONAL handle,type,size (payload: size new graph   */ \
                                 /*  ids, bound to the driver's body graphs, owned by the    */ \
                                 /*  node: never destroyed alone, dropped with the graph)    */ \
    X(GRAPH_ADD_DEPS)            /* [graph, n]       data: n "from" ids, then n "to" ids     */ \
    X(GRAPH_CLONE)               /* [new graph id, graph]                                    */ \
    X(GRAPH_GET_NODES)           /* [graph] -> out[n, id0, type0, id1, type1, ...]           */ \
    X(GRAPH_EXEC_KERNEL_SET)     /* [exec, node, f,gx,gy,gz,bx,by,bz,shmem,params_len] data  */ \
    X(GRAPH_EXEC_UPDATE)         /* [exec, graph] -> out[CUgraphExecUpdateResult]            */ \
    X(MEMCPY_2D)                 /* [dir 0=HtoD 1=DtoH 2=DtoD, dst, dpitch, src, spitch,     */ \
                                 /*  width, height, stream, async]  host rows packed: data   */ \
                                 /*  (HtoD) or reply bulk (DtoH)                             */ \
    X(LINK_CREATE)               /* [id, info log cap, error log cap]  data: JIT option words*/ \
                                 /*  (proto/jit_options.h)                                   */ \
    X(LINK_ADD_DATA)             /* [link, input type]  data: name NUL input -> data: logs   */ \
    X(LINK_COMPLETE)             /* [link] -> out[cubin len, wall ms float bits]             */ \
                                 /*  data: cubin, then logs (info NUL error NUL)             */ \
    X(LINK_DESTROY)              /* [link]                                                   */ \
    X(STREAM_SET_ATTR)           /* [stream, attr]            data: CUstreamAttrValue        */ \
    X(STREAM_GET_ATTR)           /* [stream, attr] -> data: CUstreamAttrValue                */ \
    X(DEVICE_STATUS)             /* [dev] -> out[mem total, used, free, util valid, util gpu */ \
                                 /*  %, util memory %, (PCIe link, when known: generation,  */ \
                                 /*  width, max generation, max width, 16 bits each from     */ \
                                 /*  bit 0)] (the NVML shim; client/rgpu_ext.h)              */ \
    X(CTX_RESET_L2)              /* []  cuCtxResetPersistingL2Cache                          */ \
    X(GRAPH_MEM_ATTR)            /* [dev, attr, set, value] -> out[value]                    */ \
    X(GRAPH_MEM_TRIM)            /* [dev]                                                    */ \
    X(HOST_PLACEHOLDER)          /* [stream]  a do-nothing host function (see graph.h)      */ \
    X(MODULE_FUNCTION_NAMES)     /* [module] -> data: the module's function names, NUL after */ \
                                 /*  each                                                    */ \
    X(ARRAY_CREATE)              /* [id]                   data: CUDA_ARRAY3D_DESCRIPTOR     */ \
    X(ARRAY_DESTROY)             /* [array]                                                  */ \
    X(MEMCPY_3D)                 /* [skind, s0, s1, s2, s3, dkind, d0, d1, d2, d3, width,    */ \
                                 /*  height, depth, stream, async]  kind 0 host: rows packed */ \
                                 /*  (width bytes, height rows per slice, depth slices) in   */ \
                                 /*  data or reply bulk; 1 device: (address of the first     */ \
                                 /*  byte, pitch, rows per slice, 0); 2 array: (id, x bytes, */ \
                                 /*  y, z). Not both host.                                   */ \
    X(TEX_OBJECT_CREATE)         /* [id, array id or 0, has view] -> out[CUtexObject]        */ \
                                 /*  data: CUDA_RESOURCE_DESC (hArray 0), CUDA_TEXTURE_DESC, */ \
                                 /*  then CUDA_RESOURCE_VIEW_DESC if has view                */ \
    X(TEX_OBJECT_DESTROY)        /* [id]                                                     */ \
    X(SURF_OBJECT_CREATE)        /* [id, array id] -> out[CUsurfObject]                      */ \
                                 /*  data: CUDA_RESOURCE_DESC (hArray 0)                     */ \
    X(SURF_OBJECT_DESTROY)       /* [id]                                                     */ \
    X(MEMCPY_HTOD_RDMA)          /* [dst, size, stream, async, raddr, rkey]  rdma sessions:  */ \
                                 /*  the server RDMA-READs size bytes at the client's raddr  */ \
                                 /*  (registered, rkey) and copies them to dst; no bulk      */ \
    X(MEMCPY_DTOH_RDMA)          /* [src, size, stream, async, raddr, rkey]  the server      */ \
                                 /*  RDMA-WRITEs the bytes to raddr before it answers; async */ \
                                 /*  ones are sent with NOREPLY                              */ \
    X(SHADOW_FREE)               /* [shadow]  no graph or executable graph uses it any more  */ \
    X(MODULE_LOAD_JIT)           /* [id, image flags, image len, info log cap, error log cap, */ \
                                 /*  JIT option words...] data/bulk: image (as MODULE_LOAD)  */ \
                                 /*  -> out[wall ms float bits, info size, error size] (the  */ \
                                 /*  driver's values), data: info log NUL error log NUL      */ \
    X(LIBRARY_LOAD_JIT)          /* the same for cuLibraryLoadData                           */ \
    X(GRAPH_COND_HANDLE_CREATE)  /* [graph, default value, flags] -> out[the driver's        */ \
                                 /*  CUgraphConditionalHandle] (kernels take it by value)    */ \
    X(STREAM_BEGIN_CAPTURE_TO_GRAPH) /* [stream, mode, graph, ndeps] data: ndeps node ids;   */ \
                                 /*  STREAM_END_CAPTURE then names graph id 0                */ \
    X(MEMCPY_HTOD_LANES)         /* [dst, size, stream, async, nlanes, stripe]  no bulk: the */ \
                                 /*  bytes come over the session's data lanes, stripe u of  */ \
                                 /*  the copy on lane u % nlanes (client/lanes.c)           */ \
    X(MEMCPY_DTOH_LANES)         /* [src, size, stream, async, nlanes, stripe]  the bytes go */ \
                                 /*  out over the lanes before the reply                    */ \
    X(STREAM_GET_CAPTURE_INFO)   /* [stream, graph, bind] -> out[status, n, id0, type0,      */ \
                                 /*  edge0, ...]: the capture's graph is `graph` (bind 1:    */ \
                                 /*  a new id the worker binds to the driver's capturing     */ \
                                 /*  graph until STREAM_END_CAPTURE names it), its current   */ \
                                 /*  dependencies as node ids (minted by the worker for      */ \
                                 /*  nodes never named) with their types and CUgraphEdgeData */ \
                                 /*  (8 bytes) as words                                      */ \
    X(STREAM_UPDATE_CAPTURE_DEPS) /* [stream, flags, n, has edges] data: n node ids, then n  */ \
                                 /*  CUgraphEdgeData if has edges                            */ \
    X(IPC_GET_MEM_HANDLE)        /* [dptr] -> data: the CUipcMemHandle (64 bytes) of the     */ \
                                 /*  allocation holding dptr, recorded in the shared table   */ \
                                 /*  for its tenant (server/session_table.h)                 */ \
    X(IPC_OPEN_MEM_HANDLE)       /* [flags] data: CUipcMemHandle -> out[dptr, size]: opened  */ \
                                 /*  only when a live session of the caller's tenant         */ \
                                 /*  exported it (else INVALID_VALUE); not charged to the    */ \
                                 /*  caller's quota; closed at session end                   */ \
    X(IPC_CLOSE_MEM_HANDLE)      /* [dptr]  an IPC_OPEN_MEM_HANDLE result                    */ \
    X(IPC_GET_EVENT_HANDLE)      /* [event] -> data: CUipcEventHandle (64 bytes), recorded   */ \
                                 /*  like a memory handle                                    */ \
    X(IPC_OPEN_EVENT_HANDLE)     /* [event id] data: CUipcEventHandle: the new id is bound   */ \
                                 /*  to the opened event (EVENT_DESTROY ends it); the same   */ \
                                 /*  tenant rule as IPC_OPEN_MEM_HANDLE                      */ \
    X(TENSOR_MAP_ENCODE)         /* [kind, dtype, rank, addr, interleave, swizzle, l2, oob,  */ \
                                 /*  channels/pixel, pixels/column, lower w, upper w, mode]  */ \
                                 /*  data: struct proto_tensor_map_arrays -> data: the       */ \
                                 /*  128-byte CUtensorMap the worker's driver encoded        */ \
    X(TENSOR_MAP_REPLACE_ADDRESS) /* [addr] data: CUtensorMap -> data: the CUtensorMap      */

enum proto_op {
#define PROTO_OP_ENUM(name) PROTO_OP_##name,
    PROTO_OPS(PROTO_OP_ENUM)
#undef PROTO_OP_ENUM
    PROTO_OP_COUNT
};

const char *proto_op_name(unsigned op);

#endif
