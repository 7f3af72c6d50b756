/* A worker's side of the shared session table (server/session_table.h): its admission and
 * slot, the counters it publishes for /metrics, and the compute gate around its launches. The
 * session's tenancy component (server/components.def, SRV_COMP_TENANCY) owns the slot and
 * the gate; its teardown stops measuring (waiting a bounded time for launches in flight),
 * drops the session's IPC records and frees the slot, before any memory or event goes.
 * Every function is a no-op when the session has no tenancy (a worker started without a
 * table, as the worker unit tests do, or a session not admitted yet). */
#ifndef RGPU_SERVER_TENANCY_H
#define RGPU_SERVER_TENANCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "server/session_table.h"

struct srv_session;
struct srv_tenancy;

/* Admission (under the table's lock): claim a slot for the session if its tenant is under its
 * session limit and its quota fits every GPU it is served. CUDA_SUCCESS when admitted
 * (the tenancy component holds the slot), else the refusal (CUDA_ERROR_NOT_PERMITTED for the
 * session limit, CUDA_ERROR_OUT_OF_MEMORY for memory) with the reason in why. Nothing is allocated
 * on the GPU either way. */
CUresult srv_tenancy_admit(struct srv_session *s, struct srv_table *table,
                           const struct srv_tenant *tenant, const char *client, char *why,
                           size_t why_len);
/* Before the worker opens the driver (its environment is read at cuInit): on a server with
 * "sharing = mps", make it a client of the server's MPS daemon (the directories in the table),
 * with its tenant's cap as MPS's active thread percentage (a fraction of the SMs instead of a
 * fraction of the time) and its granted quota plus SRV_MPS_MEM_SLACK as MPS's pinned device
 * memory limit on every GPU of the host (a backstop beside rgpu's own exact quota, which stays).
 * Nothing on a time-sliced server or without a table. */
#define SRV_MPS_MEM_SLACK (1ull << 30)
void srv_tenancy_driver_env(const struct srv_table *table, const struct srv_tenant *tenant,
                            uint64_t quota);

/* After each call: the call and its error, bytes received from and sent to the client, and the
 * session's memory in use. */
void srv_tenancy_count(struct srv_session *s, uint64_t bytes_in, uint64_t bytes_out, bool error);

/* CUDA IPC through the table's registry (server/session_table.h), for server/handlers_ipc.c:
 * record a handle (CU_IPC_HANDLE_SIZE bytes) the session exported; may the session open one
 * (RG_OK; RG_ERR_NOT_FOUND: nobody alive exported it; RG_ERR_REFUSED: another tenant did, its
 * name in other). A session without tenancy (a worker with no shared table, as in some unit
 * tests) records nothing and may open nothing. */
rg_status_t srv_tenancy_ipc_export(struct srv_session *s, enum srv_ipc_kind kind,
                                   const void *handle);
rg_status_t srv_tenancy_ipc_check(struct srv_session *s, enum srv_ipc_kind kind, const void *handle,
                                  char *other, size_t other_len);

/* A launch in flight through the gate. */
#define SRV_GATE_FAST (-2)
struct srv_gate_ticket {
    int entry;       /* measurement ring entry; -1: not counted; SRV_GATE_FAST: counted only */
    uint32_t weight; /* launches its measurement stands for (sampled when uncontended) */
};

/* Before a kernel or graph launch on stream st of the current context: hold it while the
 * session's tenant is not the one to run on this GPU (server/compute_gate.c), then record the
 * start of its measured interval. Launches into a capturing stream pass unmeasured. */
void srv_gate_begin(struct srv_session *s, CUstream st, struct srv_gate_ticket *tk);
/* After it: record the end (if the launch succeeded) and hand it to the meter thread. */
void srv_gate_end(struct srv_session *s, CUstream st, struct srv_gate_ticket *tk, CUresult res);
/* Before the current context is destroyed or reset: wait for its measured launches and drop
 * the measurement events that belong to it. */
void srv_gate_forget_context(struct srv_session *s);

#endif
