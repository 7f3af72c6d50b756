/* The shared session table: one memfd-backed mapping created by the supervisor before it
 * accepts anything and inherited by every worker (--table-fd), with one slot per session.
 *
 * Who writes what:
 *  - the supervisor writes the tenants' settings (at start and on SIGHUP) and frees the slot of
 *    a worker it reaps;
 *  - a worker claims its slot at admission and frees it at exit, both under the table's lock
 *    (a process-shared robust mutex: a worker that dies holding it does not wedge the others);
 *  - a slot's counters are written only by their own worker (relaxed atomics) and read by
 *    anyone: the supervisor for /metrics and /status, the other workers' compute gates.
 * The compute gate's per-GPU state (who may launch, who waits) lives here too and is changed
 * under the lock (server/compute_gate.c), and so does the registry of exported CUDA IPC handles
 * (server/handlers_ipc.c): a worker adds its exports, and a slot's entries are cleared by its
 * worker at its end and by the supervisor when it reaps the worker. */
#ifndef RGPU_SERVER_SESSION_TABLE_H
#define RGPU_SERVER_SESSION_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "server/tenant_config.h"

#define SRV_TABLE_SLOTS     1024
#define SRV_TABLE_GPUS      16
#define SRV_TABLE_MAGIC     0x52475354u /* "RGST" */
#define SRV_TABLE_IPC       4096        /* CUDA IPC handles exported, all sessions together */
#define SRV_IPC_PER_SESSION 1024        /* ... and by one session */

struct srv_table_tenant {
    char name[64];
    uint64_t mem_quota;
    uint32_t weight, cap_permille, max_sessions;
    uint8_t best_effort;
    uint8_t in_config; /* 0 once a reload dropped it (its sessions go on) */
    /* counters of its sessions that have ended (the supervisor adds them at release) */
    uint64_t ended_gpu_ns, ended_launches, ended_calls, ended_errors, ended_bytes_in,
        ended_bytes_out, ended_held_ns;
};

/* A session. pid == 0: free. Identity fields are written under the lock at claim; the
 * counters by the owning worker only. */
struct srv_table_slot {
    _Atomic int32_t pid;
    int32_t tenant; /* index into tenants[], -1 when the server has none */
    uint64_t session;
    uint64_t started; /* CLOCK_REALTIME seconds */
    char peer[64];
    char client[64];
    uint32_t gpu_mask; /* server GPUs (driver ordinals) the session holds a reservation on */
    uint64_t quota;    /* bytes reserved on each of them; 0 = none */
    _Atomic uint64_t mem_used, gpu_ns, launches, calls, errors, bytes_in, bytes_out;
    /* compute gate */
    _Atomic int32_t gate_gpu;     /* GPU of its last launch, -1 before any */
    _Atomic uint32_t launch_mask; /* GPUs it has launched on, each counted in its users */
    _Atomic uint64_t win_epoch;   /* accounting window of win_used_ns */
    _Atomic uint64_t win_used_ns; /* GPU time charged in that window */
    _Atomic uint64_t last_launch_ns;
    _Atomic uint32_t inflight; /* measured launches not yet complete */
    _Atomic uint32_t waiting;  /* held at its gate now */
    _Atomic uint64_t held_ns;  /* time spent held at the gate, in total */
    /* Fair shares between sessions (issue 30; scheduler/share.h). vtime: its GPU time divided
     * by its share, added by its meter and raised under the lock when it starts to contend;
     * share_ppm: the share it is due while it contends, in millionths of the GPU, written under
     * the lock by whichever gate decides (1000000 when alone; an idle session's stays as it
     * last was, so that work of it still in flight is charged at that share). */
    _Atomic uint64_t vtime;
    _Atomic uint32_t share_ppm;
    _Atomic uint64_t last_done_ns; /* when its meter last charged a completed launch */
};

struct srv_table_gpu {
    _Atomic uint64_t total_mem;          /* written by the first worker that opens it */
    _Atomic int32_t owner;               /* slot allowed to launch on it, -1 = none */
    _Atomic uint32_t nwaiting;           /* sessions held at their gate for it */
    _Atomic uint64_t last_guaranteed_ns; /* last launch or completion of a guaranteed session */
    _Atomic uint64_t owner_since_ns;     /* when the owner took the GPU */
    _Atomic int32_t users; /* live sessions that have launched on it (their slots' launch_mask) */
};

/* How the sessions of a server share each GPU ([server] sharing, docs/tenants.md). */
enum srv_sharing {
    SRV_SHARING_TIME_SLICED = 0, /* one session's kernels at a time, by the compute gate */
    SRV_SHARING_MPS = 1,         /* workers are clients of the server's own MPS daemon: the
                                  * sessions' kernels run at the same time */
};

/* A CUDA IPC handle (memory or event) a session exported, so that only sessions of its tenant
 * open it (server/handlers_ipc.c). kind 0: free entry. Written under the lock. */
enum srv_ipc_kind { SRV_IPC_MEM = 1, SRV_IPC_EVENT = 2 };
struct srv_table_ipc {
    uint8_t hash[32]; /* SHA-256 of the handle's 64 bytes */
    uint32_t kind;    /* enum srv_ipc_kind, 0 = free */
    int32_t slot;     /* the exporting session */
    int32_t pid;      /* its worker: the entry holds only while the slot is still that worker's */
    int32_t tenant;   /* its tenant (index into tenants[], -1 when the server has none) */
};

/* The GPUs this server serves as the first probe found them (server/probe.c), so that later
 * probes answer without opening the driver. Written once, under the lock; ready last. */
struct srv_table_gpu_info {
    int32_t index;
    char name[96];
    uint64_t total_mem;
};

struct srv_table {
    uint32_t magic;
    pthread_mutex_t lock;
    uint64_t window_ns, quantum_ns, horizon_ns, grace_ns; /* compute gate settings (docs) */
    uint64_t stall_ns; /* an owner whose launches complete nothing this long has stalled */
    uint32_t sharing;  /* enum srv_sharing, written by the supervisor before any worker */
    char mps_pipe_dir[96], mps_log_dir[96]; /* SRV_SHARING_MPS: the daemon's directories */
    int32_t ntenants;
    int32_t tenants_configured; /* in the config last loaded; 0: the server admits anyone */
    _Atomic int32_t hiwater;    /* 1 + the highest slot ever claimed: scans stop there */
    _Atomic int32_t live;       /* sessions admitted and not yet released */
    struct srv_table_tenant tenants[SRV_MAX_TENANTS];
    struct srv_table_gpu gpus[SRV_TABLE_GPUS];
    struct srv_table_slot slots[SRV_TABLE_SLOTS];
    struct srv_table_ipc ipc[SRV_TABLE_IPC];
    _Atomic int32_t probe_ready; /* probe_gpus holds probe_ngpus entries */
    int32_t probe_ngpus;
    struct srv_table_gpu_info probe_gpus[SRV_TABLE_GPUS];
};

/* Supervisor: create the table in a memfd (not close-on-exec: workers inherit it). */
rg_status_t srv_table_create(int *fd_p, struct srv_table **table_p);
/* Worker: map the table the supervisor passed as fd. */
rg_status_t srv_table_map(int fd, struct srv_table **table_p);

/* The lock; a holder that died leaves the table consistent (every change under it is a few
 * stores), so it is marked consistent and taken. */
void srv_table_lock(struct srv_table *t);
void srv_table_unlock(struct srv_table *t);

/* Copy the tenants' settings in (by name; a tenant no longer configured keeps its entry, marked
 * not in_config, for the sessions it still has). Takes the lock. */
void srv_table_set_tenants(struct srv_table *t, const struct srv_tenants *tenants);

/* The session asking to start. */
struct srv_admission {
    const struct srv_tenant *tenant; /* NULL when the server has no tenants */
    uint64_t quota;                  /* granted quota, bytes per GPU (0 = none) */
    const int *gpus;                 /* server GPU ordinals it would use */
    const uint64_t *gpu_total;       /* their memory */
    int ngpus;
    uint64_t session;
    const char *peer, *client;
};

/* Admission under the lock: the tenant's session limit and the quota against every GPU's
 * unreserved memory (scheduler/admission.h). The claimed slot index, or -1 with the verdict
 * (enum sched_verdict) in *verdict_p and the reason in why. */
int srv_table_admit(struct srv_table *t, const struct srv_admission *a, int *verdict_p, char *why,
                    size_t why_len);
/* The worker at its end: hand back the GPUs slot i owns, stop waiting and no longer count
 * among their users. The slot itself (and its memory reservation) stays until the supervisor
 * reaps the worker. */
void srv_table_yield(struct srv_table *t, int i);
/* The supervisor, for a worker it reaped: free its slot (however the worker ended), with the
 * tenant's name copied to tenant ("" when none or no slot). */
void srv_table_release_pid(struct srv_table *t, int32_t pid, char *tenant, size_t len);

/* CUDA IPC between sessions of one tenant (the exporting worker's handle bytes are passed
 * through clients opaquely; the registry decides who may open them). Export: record the hash of
 * a handle slot i made (once per handle; RG_ERR_NOMEM when the session or the table has no room).
 * Open: RG_OK when a live session of slot i's tenant (any session, when the server has no
 * tenants) exported that handle; RG_ERR_NOT_FOUND when nobody did (forged, or its session
 * ended); RG_ERR_REFUSED when a session of another tenant did, its tenant's name in other.
 * Drop: forget what slot i exported (its session ends: the worker at its end, and the supervisor
 * when it reaps the worker, however it ended). All under the lock. */
rg_status_t srv_table_ipc_export(struct srv_table *t, int i, enum srv_ipc_kind kind,
                                 const uint8_t hash[32]);
rg_status_t srv_table_ipc_check(struct srv_table *t, int i, enum srv_ipc_kind kind,
                                const uint8_t hash[32], char *other, size_t other_len);
void srv_table_ipc_drop(struct srv_table *t, int i);

/* Each live session's due share of its GPU now (slots' entries of share; 0 for idle sessions and
 * free slots), as the compute gate divides it (scheduler/share.h): for /metrics and the probe.
 * Reads the table without its lock (a snapshot of atomics). */
void srv_table_due_shares(const struct srv_table *t, uint64_t now, double *share);

/* The tenant's name for slot i ("" when none). */
const char *srv_table_tenant_name(const struct srv_table *t, int i);

/* Now, on CLOCK_MONOTONIC (one clock for every process of the host), in ns. */
uint64_t srv_now_ns(void);
/* The same clock at tick resolution (a few ms), never a system call: per-launch stamps. */
uint64_t srv_coarse_now_ns(void);

#endif
