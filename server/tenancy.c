/* The tenancy component: a worker's slot in the shared session table (admission at the
 * handshake, the counters it publishes after every call, its release at the session's end)
 * and its compute gate (server/compute_gate.c). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    struct srv_admission a = {.tenant = tenant,
                              .quota = s->mem_quota,
                              .gpus = gpus,
                              .gpu_total = totals,
                              .ngpus = s->ndevices,
                              .session = s->id,
                              .peer = s->peer,
                              .client = client};
    struct srv_tenancy *tn = srv_component_state(s, SRV_COMP_TENANCY);
    int slot, verdict;

    for (int i = 0; i < s->ndevices; i++) {
        size_t total = 0;
        s->drv.cuDeviceTotalMem(&total, s->devices[i]);
        gpus[i] = s->devices[i];
        totals[i] = total;
    }
    if (tn->table != NULL) {
        snprintf(why, why_len, "the session is admitted already");
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    slot = srv_table_admit(table, &a, &verdict, why, why_len);
    if (slot < 0)
        return verdict == SCHED_SESSION_LIMIT ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_OUT_OF_MEMORY;
    tn->table = table;
    tn->slot = slot;
    tn->gate = srv_gate_create(s, table, slot);
    return CUDA_SUCCESS;
}

/* The tenancy of s once admitted, else NULL. */
static struct srv_tenancy *tenancy_of(struct srv_session *s)
{
    struct srv_tenancy *tn = srv_component_state(s, SRV_COMP_TENANCY);

    return tn != NULL && tn->table != NULL ? tn : NULL;
}

struct srv_gate *srv_tenancy_gate(struct srv_session *s)
{
    struct srv_tenancy *tn = tenancy_of(s);

    return tn != NULL ? tn->gate : NULL;
}

/* GPUs on this host, for MPS's per-device memory limit (every one gets the same value, so
 * only their number matters): the driver's /proc entries, else the device nodes, else 1. */
static int host_gpus(void)
{
    static const char *dirs[] = {"/proc/driver/nvidia/gpus", "/dev"};

    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;
        int n = 0;
        if (dir == NULL)
            continue;
        while ((e = readdir(dir)) != NULL) {
            if (d == 0 && e->d_name[0] != '.')
                n++;
            if (d == 1 && strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' &&
                e->d_name[6] <= '9' && strspn(e->d_name + 6, "0123456789") == strlen(e->d_name + 6))
                n++;
        }
        closedir(dir);
        if (n > 0)
            return n;
    }
    return 1;
}

void srv_tenancy_driver_env(const struct srv_table *t, const struct srv_tenant *tenant,
                            uint64_t quota)
{
    char pct[16] = "", limit[512] = "";
    size_t len = 0;

    if (t == NULL || t->sharing != SRV_SHARING_MPS)
        return;
    setenv("CUDA_MPS_PIPE_DIRECTORY", t->mps_pipe_dir, 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", t->mps_log_dir, 1);
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    if (tenant != NULL && tenant->cap_permille != 0) {
        snprintf(pct, sizeof(pct), "%u", (tenant->cap_permille + 9) / 10);
        setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
    }
    if (quota != 0) {
        unsigned long long mib = (quota + SRV_MPS_MEM_SLACK + (1u << 20) - 1) >> 20;
        for (int i = 0, n = host_gpus(); i < n && len < sizeof(limit) - 32; i++)
            len += (size_t)snprintf(limit + len, sizeof(limit) - len, "%s%d=%lluM", i ? "," : "", i,
                                    mib);
        setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limit, 1);
    }
    rg_info("sharing = mps: a client of the server's MPS daemon (active thread percentage %s, "
            "pinned device memory limit %s)",
            pct[0] ? pct : "100", limit[0] ? limit : "none");
}

/* Stop measuring (waiting a bounded time for launches in flight) and free the slot, before
 * the session's memory and events go. */
static void tenancy_teardown(struct srv_session *s, void *state)
{
    struct srv_tenancy *tn = state;

    if (tn->table == NULL)
        return;
    srv_gate_destroy(s, tn->gate);
    srv_table_ipc_drop(tn->table, tn->slot); /* before its memory and events go */
    atomic_store(&tn->table->slots[tn->slot].mem_used, s->mem_used);
    srv_table_yield(tn->table, tn->slot);
    *tn = (struct srv_tenancy){0};
}

const struct srv_component srv_tenancy_component = {
    .name = "tenancy", .state_size = sizeof(struct srv_tenancy), .teardown = tenancy_teardown};

void srv_tenancy_count(struct srv_session *s, uint64_t bytes_in, uint64_t bytes_out, bool error)
{
    struct srv_tenancy *tn = tenancy_of(s);
    struct srv_table_slot *sl;

    if (tn == NULL)
        return;
    sl = &tn->table->slots[tn->slot];
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
    struct srv_tenancy *tn = tenancy_of(s);
    uint8_t hash[RG_SHA256_LEN];

    if (tn == NULL)
        return RG_OK; /* nobody can open it: opens need the registry too */
    rg_sha256(handle, CU_IPC_HANDLE_SIZE, hash);
    return srv_table_ipc_export(tn->table, tn->slot, kind, hash);
}

rg_status_t srv_tenancy_ipc_check(struct srv_session *s, enum srv_ipc_kind kind, const void *handle,
                                  char *other, size_t other_len)
{
    struct srv_tenancy *tn = tenancy_of(s);
    uint8_t hash[RG_SHA256_LEN];

    other[0] = '\0';
    if (tn == NULL)
        return RG_ERR_NOT_FOUND;
    rg_sha256(handle, CU_IPC_HANDLE_SIZE, hash);
    return srv_table_ipc_check(tn->table, tn->slot, kind, hash, other, other_len);
}
