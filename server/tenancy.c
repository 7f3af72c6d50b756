/* A worker's slot in the shared session table: admission at the handshake, the counters it
 * publishes after every call, and its release at the end. */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/sha256.h"
#include "scheduler/admission.h"
#include "server/compute_gate.h"
#include "server/session.h"

CUresult srv_tenancy_admit(struct srv_session *s, struct srv_table *table,
                      const struct srv_tenant *tenant, const char *client, char *why,
                      size_t why_len)
{
    int gpus[SRV_MAX_DEVICES];
    uint64_t totals[SRV_MAX_DEVICES];
    struct srv_admission a = {.tenant = tenant, .quota = s->mem_quota, .gpus = gpus,
                              .gpu_total = totals, .ngpus = s->ndevices, .session = s->id,
                              .peer = s->peer, .client = client};
    struct srv_tenancy *tn;
    int slot, verdict;

    for (int i = 0; i < s->ndevices; i++) {
        size_t total = 0;
        s->drv.cuDeviceTotalMem(&total, s->devices[i]);
        gpus[i] = s->devices[i];
        totals[i] = total;
    }
    if ((tn = calloc(1, sizeof(*tn))) == NULL) {
        snprintf(why, why_len, "the server is out of memory");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    slot = srv_table_admit(table, &a, &verdict, why, why_len);
    if (slot < 0) {
        free(tn);
        return verdict == SCHED_SESSION_LIMIT ? CUDA_ERROR_NOT_PERMITTED
                                              : CUDA_ERROR_OUT_OF_MEMORY;
    }
    tn->table = table;
    tn->slot = slot;
    tn->gate = srv_gate_create(s, table, slot);
    s->tenancy = tn;
    return CUDA_SUCCESS;
}

void srv_tenancy_end(struct srv_session *s)
{
    struct srv_tenancy *tn = s->tenancy;

    if (tn == NULL)
        return;
    srv_gate_destroy(s, tn->gate);
    srv_table_ipc_drop(tn->table, tn->slot); /* before its memory and events go */
    atomic_store(&tn->table->slots[tn->slot].mem_used, s->mem_used);
    srv_table_yield(tn->table, tn->slot);
    free(tn);
    s->tenancy = NULL;
}

void srv_tenancy_count(struct srv_session *s, uint64_t bytes_in, uint64_t bytes_out, bool error)
{
    struct srv_table_slot *sl;

    if (s->tenancy == NULL)
        return;
    sl = &s->tenancy->table->slots[s->tenancy->slot];
    atomic_fetch_add_explicit(&sl->calls, 1, memory_order_relaxed);
    if (error)
        atomic_fetch_add_explicit(&sl->errors, 1, memory_order_relaxed);
    if (bytes_in)
        atomic_fetch_add_explicit(&sl->bytes_in, bytes_in, memory_order_relaxed);
    if (bytes_out)
        atomic_fetch_add_explicit(&sl->bytes_out, bytes_out, memory_order_relaxed);
    atomic_store_explicit(&sl->mem_used, s->mem_used, memory_order_relaxed);
}

rg_status_t srv_tenancy_ipc_export(struct srv_session *s, enum srv_ipc_kind kind,
                                   const void *handle)
{
    uint8_t hash[RG_SHA256_LEN];

    if (s->tenancy == NULL)
        return RG_OK; /* nobody can open it: opens need the registry too */
    rg_sha256(handle, CU_IPC_HANDLE_SIZE, hash);
    return srv_table_ipc_export(s->tenancy->table, s->tenancy->slot, kind, hash);
}

rg_status_t srv_tenancy_ipc_check(struct srv_session *s, enum srv_ipc_kind kind,
                                  const void *handle, char *other, size_t other_len)
{
    uint8_t hash[RG_SHA256_LEN];

    other[0] = '\0';
    if (s->tenancy == NULL)
        return RG_ERR_NOT_FOUND;
    rg_sha256(handle, CU_IPC_HANDLE_SIZE, hash);
    return srv_table_ipc_check(s->tenancy->table, s->tenancy->slot, kind, hash, other,
                               other_len);
}
