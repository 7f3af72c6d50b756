/* The session's device memory quota and its allocation table (server/quota.c): the one owner of
 * srv_session.mem_used. Every path that makes the worker hold memory for the session charges
 * here and gives back here; nothing else writes mem_used (others read it: the tenancy slot,
 * MEM_GET_INFO, DEVICE_STATUS).
 *
 * What is charged, and where it goes back: cuMemAlloc* (the allocation table below, until
 * MEM_FREE); VMM physical memory, module and library loads, graph memory nodes and shadows
 * (charged to their handle's size, released by srv_handle_destroy); context limits
 * (session_limits.c); host mirrors; arrays; NCCL communicators and memory; IPC-opened memory
 * whose exporter's session ended (srv_ipc_charge_orphans). */
#ifndef RGPU_SERVER_QUOTA_H
#define RGPU_SERVER_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

struct srv_session;
struct srv_call;

/* May size more bytes be held under the quota (mem_quota 0: no limit)? Charges the IPC-opened
 * memory whose exporter's session ended first (srv_ipc_charge_orphans). */
bool srv_quota_allows(struct srv_session *s, uint64_t size);
/* Charge size bytes if they fit (true); false, nothing charged, if not. */
bool srv_quota_charge(struct srv_session *s, uint64_t size);
/* Charge size bytes the session holds already, whether they fit or not (memory it opened from
 * another session that ended: the driver keeps it while it is open). */
void srv_quota_charge_held(struct srv_session *s, uint64_t size);
/* Give back size bytes (never below 0). */
void srv_quota_release(struct srv_session *s, uint64_t size);

/* The allocation table: device pointers from cuMemAlloc* (freed by cuMemFree at the session's
 * end, charged from the allocation until its free). */
struct srv_alloc {
    CUdeviceptr dptr;
    size_t size;
};
/* Record the allocation d of size bytes, charged: the caller allocated it after
 * srv_quota_allows(size). When it cannot be recorded or charged after all, d is freed again and
 * CUDA_ERROR_OUT_OF_MEMORY returned. */
CUresult srv_alloc_record(struct srv_session *s, CUdeviceptr d, size_t size);
/* After an allocation call returned res: on success record d (size bytes) and answer it. */
CUresult srv_alloc_answer(struct srv_session *s, struct srv_call *call, CUresult res, CUdeviceptr d,
                          size_t size);
/* The allocation at dptr was freed: forget it and give its bytes back. */
void srv_alloc_del(struct srv_session *s, CUdeviceptr dptr);
/* The recorded allocation holding [d, d + len), NULL if none. */
const struct srv_alloc *srv_alloc_find(struct srv_session *s, CUdeviceptr d, size_t len);
/* A primary context reset freed every allocation and everything else the session held in
 * device memory: the table is emptied and the charge is 0. */
void srv_alloc_reset(struct srv_session *s);
/* What the session's end freed (for its closing log line). */
void srv_alloc_freed(struct srv_session *s, size_t *n_p, uint64_t *bytes_p);

/* Device memory free now (cuMemGetInfo of the current context's device). */
size_t srv_mem_free_now(struct srv_session *s);
/* A module or library load is charged what it took of device memory, measured around it from
 * `before` (srv_mem_free_now): the handle id of that type remembers it, or, over the quota, is
 * destroyed and CUDA_ERROR_OUT_OF_MEMORY returned. */
CUresult srv_load_charge(struct srv_session *s, uint64_t id, unsigned type, size_t before);

#endif
