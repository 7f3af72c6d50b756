#include "server/session_table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "scheduler/admission.h"
#include "scheduler/share.h"

/* Compute gate defaults: a 1 s accounting window (caps are fractions of it), turns of about
 * 10 ms of GPU time beyond the owner's due, 10 ms of quiet before a guaranteed session counts
 * as idle, 2 ms after its last launch during which an owner with nothing queued still holds
 * the GPU (the gaps inside a burst of launches and a client's round trip between its
 * synchronize and its next launch: handing over there would alternate sessions launch by
 * launch, each time idling the GPU for a poll; a longer pause hands the GPU to a waiter),
 * and at most 100 ms for an owner's launches to end at a handover (a hung kernel must not stop
 * every other session).
 * See docs/tenants.md, "Compute share". */
#define WINDOW_NS  1000000000ull
#define QUANTUM_NS 10000000ull
#define HORIZON_NS 10000000ull
#define GRACE_NS   2000000ull
#define STALL_NS   100000000ull

uint64_t srv_coarse_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t srv_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static rg_status_t lock_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc;

    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return rc == 0 ? RG_OK : RG_ERR_IO;
}

rg_status_t srv_table_create(int *fd_p, struct srv_table **table_p)
{
    struct srv_table *t;
    int fd = memfd_create("rgpu-sessions", 0);

    if (fd < 0 || ftruncate(fd, sizeof(*t)) != 0) {
        rg_error("cannot create the shared session table: %m");
        if (fd >= 0)
            close(fd);
        return RG_ERR_IO;
    }
    t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED || lock_init(&t->lock) != RG_OK) {
        rg_error("cannot map the shared session table: %m");
        close(fd);
        return RG_ERR_IO;
    }
    t->window_ns = WINDOW_NS;
    t->quantum_ns = QUANTUM_NS;
    t->horizon_ns = HORIZON_NS;
    t->grace_ns = GRACE_NS;
    t->stall_ns = STALL_NS;
    for (int g = 0; g < SRV_TABLE_GPUS; g++)
        atomic_store(&t->gpus[g].owner, -1);
    t->magic = SRV_TABLE_MAGIC;
    *fd_p = fd;
    *table_p = t;
    return RG_OK;
}

rg_status_t srv_table_map(int fd, struct srv_table **table_p)
{
    struct srv_table *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    close(fd);
    if (t == MAP_FAILED || t->magic != SRV_TABLE_MAGIC) {
        rg_error("the session table passed by the supervisor cannot be mapped");
        if (t != MAP_FAILED)
            munmap(t, sizeof(*t));
        return RG_ERR_IO;
    }
    *table_p = t;
    return RG_OK;
}

void srv_table_lock(struct srv_table *t)
{
    if (pthread_mutex_lock(&t->lock) == EOWNERDEAD) {
        rg_warn("a worker died holding the session table lock; taking it over");
        pthread_mutex_consistent(&t->lock);
    }
}

void srv_table_unlock(struct srv_table *t)
{
    pthread_mutex_unlock(&t->lock);
}

static int tenant_index(struct srv_table *t, const char *name)
{
    for (int i = 0; i < t->ntenants; i++)
        if (strcmp(t->tenants[i].name, name) == 0)
            return i;
    if (t->ntenants == SRV_MAX_TENANTS)
        return -1;
    memset(&t->tenants[t->ntenants], 0, sizeof(t->tenants[0]));
    snprintf(t->tenants[t->ntenants].name, sizeof(t->tenants[0].name), "%s", name);
    return t->ntenants++;
}

static void tenant_copy(struct srv_table_tenant *e, const struct srv_tenant *c)
{
    e->mem_quota = c->mem_quota;
    e->weight = c->weight ? c->weight : 1;
    e->cap_permille = c->cap_permille;
    e->max_sessions = c->max_sessions;
    e->best_effort = c->best_effort;
    e->in_config = 1;
}

void srv_table_set_tenants(struct srv_table *t, const struct srv_tenants *tenants)
{
    srv_table_lock(t);
    for (int i = 0; i < t->ntenants; i++)
        t->tenants[i].in_config = 0;
    t->tenants_configured = tenants->n;
    for (int i = 0; i < tenants->n; i++) {
        int k = tenant_index(t, tenants->list[i].name);
        if (k >= 0)
            tenant_copy(&t->tenants[k], &tenants->list[i]);
    }
    srv_table_unlock(t);
}

/* Under the lock: what admission needs to know about the GPUs and the tenant. */
static void gather(struct srv_table *t, const struct srv_admission *a, int tenant,
                   struct sched_gpu *gpus, int *tenant_sessions)
{
    *tenant_sessions = 0;
    for (int g = 0; g < a->ngpus; g++)
        gpus[g] = (struct sched_gpu){.total_mem = a->gpu_total[g]};
    for (int i = 0; i < atomic_load(&t->hiwater); i++) {
        const struct srv_table_slot *s = &t->slots[i];
        if (atomic_load(&s->pid) == 0)
            continue;
        if (tenant >= 0 && s->tenant == tenant)
            (*tenant_sessions)++;
        for (int g = 0; g < a->ngpus; g++) {
            if (!(s->gpu_mask & (1u << a->gpus[g])))
                continue;
            gpus[g].reserved += s->quota;
            gpus[g].sessions++;
        }
    }
}

static void slot_claim(struct srv_table *t, int i, const struct srv_admission *a, int tenant)
{
    struct srv_table_slot *s = &t->slots[i];

    memset((char *)s + sizeof(s->pid), 0, sizeof(*s) - sizeof(s->pid));
    s->tenant = tenant;
    s->session = a->session;
    s->started = (uint64_t)time(NULL);
    snprintf(s->peer, sizeof(s->peer), "%s", a->peer ? a->peer : "");
    snprintf(s->client, sizeof(s->client), "%s", a->client ? a->client : "");
    for (int g = 0; g < a->ngpus; g++) {
        s->gpu_mask |= 1u << a->gpus[g];
        atomic_store(&t->gpus[a->gpus[g]].total_mem, a->gpu_total[g]);
    }
    s->quota = a->quota;
    atomic_store(&s->gate_gpu, -1);
    atomic_store(&s->share_ppm, 1000000);
    atomic_store(&s->pid, (int32_t)getpid());
    atomic_fetch_add(&t->live, 1);
    if (atomic_load(&t->hiwater) <= i)
        atomic_store(&t->hiwater, i + 1);
}

int srv_table_admit(struct srv_table *t, const struct srv_admission *a, int *verdict_p, char *why,
                    size_t why_len)
{
    struct sched_gpu gpus[SRV_TABLE_GPUS];
    struct sched_request req = {.tenant = a->tenant ? a->tenant->name : "", .quota = a->quota};
    int tenant = -1, slot = -1;

    *verdict_p = SCHED_NO_MEMORY;
    if (a->ngpus > SRV_TABLE_GPUS) {
        snprintf(why, why_len, "this server serves at most %d GPUs", SRV_TABLE_GPUS);
        return -1;
    }
    srv_table_lock(t);
    if (a->tenant != NULL && (tenant = tenant_index(t, a->tenant->name)) >= 0 &&
        !t->tenants[tenant].in_config)
        tenant_copy(&t->tenants[tenant], a->tenant); /* configured after the last reload */
    req.max_sessions = a->tenant ? (int)a->tenant->max_sessions : 0;
    gather(t, a, tenant, gpus, &req.tenant_sessions);
    for (int i = 0; i < SRV_TABLE_SLOTS && slot < 0; i++)
        if (atomic_load(&t->slots[i].pid) == 0)
            slot = i;
    if (slot < 0)
        snprintf(why, why_len, "the server's session table is full (%d sessions)", SRV_TABLE_SLOTS);
    else if ((*verdict_p = sched_admit(&req, gpus, a->ngpus, why, why_len)) != SCHED_ADMIT)
        slot = -1;
    else
        slot_claim(t, slot, a, tenant);
    srv_table_unlock(t);
    return slot;
}

/* Slot i no longer counts among the users of the GPUs it launched on; lock held. */
static void drop_users_locked(struct srv_table *t, int i)
{
    uint32_t mask = atomic_exchange(&t->slots[i].launch_mask, 0);

    for (int g = 0; g < SRV_TABLE_GPUS; g++)
        if (mask & (1u << g))
            atomic_fetch_sub(&t->gpus[g].users, 1);
}

static void yield_locked(struct srv_table *t, int i)
{
    for (int g = 0; g < SRV_TABLE_GPUS; g++) {
        int32_t me = i;
        atomic_compare_exchange_strong(&t->gpus[g].owner, &me, -1);
    }
    if (atomic_load(&t->slots[i].waiting)) {
        int g = atomic_load(&t->slots[i].gate_gpu);
        if (g >= 0)
            atomic_fetch_sub(&t->gpus[g].nwaiting, 1);
        atomic_store(&t->slots[i].waiting, 0);
    }
    atomic_store(&t->slots[i].inflight, 0);
    drop_users_locked(t, i);
}

void srv_table_yield(struct srv_table *t, int i)
{
    if (i < 0 || i >= SRV_TABLE_SLOTS)
        return;
    srv_table_lock(t);
    yield_locked(t, i);
    srv_table_unlock(t);
}

static void ipc_drop_locked(struct srv_table *t, int i);

/* Keep an ending session's counters in its tenant's totals. */
static void tenant_add_ended(struct srv_table *t, struct srv_table_slot *s)
{
    struct srv_table_tenant *e;

    if (s->tenant < 0 || s->tenant >= t->ntenants)
        return;
    e = &t->tenants[s->tenant];
    e->ended_gpu_ns += atomic_load(&s->gpu_ns);
    e->ended_launches += atomic_load(&s->launches);
    e->ended_calls += atomic_load(&s->calls);
    e->ended_errors += atomic_load(&s->errors);
    e->ended_bytes_in += atomic_load(&s->bytes_in);
    e->ended_bytes_out += atomic_load(&s->bytes_out);
    e->ended_held_ns += atomic_load(&s->held_ns);
}

void srv_table_release_pid(struct srv_table *t, int32_t pid, char *tenant, size_t len)
{
    tenant[0] = '\0';
    srv_table_lock(t);
    for (int i = 0; i < atomic_load(&t->hiwater); i++) {
        if (atomic_load(&t->slots[i].pid) != pid)
            continue;
        snprintf(tenant, len, "%s", srv_table_tenant_name(t, i));
        tenant_add_ended(t, &t->slots[i]);
        yield_locked(t, i);
        ipc_drop_locked(t, i); /* the worker's own drop did not run if it crashed */
        atomic_store(&t->slots[i].pid, 0);
        atomic_fetch_sub(&t->live, 1);
    }
    srv_table_unlock(t);
}

void srv_table_due_shares(const struct srv_table *t, uint64_t now, double *share)
{
    struct sched_session ss[SRV_TABLE_SLOTS]; /* 36 KiB of stack, touched up to hiwater */
    int idx[SRV_TABLE_SLOTS];
    double got[SRV_TABLE_SLOTS];
    struct sched_tenant tens[SCHED_MAX_TENANTS];
    int hi = atomic_load(&t->hiwater);
    int nt = t->ntenants < SCHED_MAX_TENANTS - 1 ? t->ntenants : SCHED_MAX_TENANTS - 1;

    for (int k = 0; k < nt; k++)
        tens[k] = (struct sched_tenant){t->tenants[k].weight, t->tenants[k].cap_permille,
                                        t->tenants[k].best_effort};
    tens[nt] = (struct sched_tenant){.weight = 1};
    for (int i = 0; i < SRV_TABLE_SLOTS; i++)
        share[i] = 0;
    for (int g = 0; g < SRV_TABLE_GPUS; g++) {
        int n = 0;
        for (int i = 0; i < hi; i++) {
            const struct srv_table_slot *sl = &t->slots[i];
            bool busy = atomic_load(&sl->waiting) || atomic_load(&sl->inflight) > 0;
            if (atomic_load(&sl->pid) == 0 || atomic_load(&sl->gate_gpu) != g)
                continue;
            idx[n] = i;
            ss[n++] = (struct sched_session){
                .tenant = sl->tenant >= 0 && sl->tenant < nt ? sl->tenant : nt,
                .active = busy || now - atomic_load(&sl->last_launch_ns) < t->horizon_ns};
        }
        if (n == 0)
            continue;
        sched_session_shares(tens, nt + 1, ss, n, got);
        for (int k = 0; k < n; k++)
            share[idx[k]] = got[k];
    }
}

const char *srv_table_tenant_name(const struct srv_table *t, int i)
{
    int k = t->slots[i].tenant;

    return k >= 0 && k < t->ntenants ? t->tenants[k].name : "";
}

/* ---- CUDA IPC registry ------------------------------------------------------------------ */

/* The live entry for hash of that kind (exporter still alive), or -1; lock held. */
static int ipc_find(struct srv_table *t, enum srv_ipc_kind kind, const uint8_t hash[32])
{
    for (int e = 0; e < SRV_TABLE_IPC; e++) {
        const struct srv_table_ipc *x = &t->ipc[e];
        if (x->kind == (uint32_t)kind && memcmp(x->hash, hash, 32) == 0 &&
            atomic_load(&t->slots[x->slot].pid) == x->pid)
            return e;
    }
    return -1;
}

rg_status_t srv_table_ipc_export(struct srv_table *t, int i, enum srv_ipc_kind kind,
                                 const uint8_t hash[32])
{
    int32_t pid = atomic_load(&t->slots[i].pid);
    int mine = 0, free_e = -1;
    rg_status_t st = RG_OK;

    srv_table_lock(t);
    for (int e = 0; e < SRV_TABLE_IPC; e++) {
        const struct srv_table_ipc *x = &t->ipc[e];
        if (x->kind == 0 && free_e < 0)
            free_e = e;
        if (x->kind == 0 || x->slot != i)
            continue;
        if (x->kind == (uint32_t)kind && memcmp(x->hash, hash, 32) == 0)
            goto out; /* exported before */
        mine++;
    }
    if (free_e < 0 || mine >= SRV_IPC_PER_SESSION) {
        st = RG_ERR_NOMEM;
        goto out;
    }
    t->ipc[free_e] =
        (struct srv_table_ipc){.kind = kind, .slot = i, .pid = pid, .tenant = t->slots[i].tenant};
    memcpy(t->ipc[free_e].hash, hash, 32);
out:
    srv_table_unlock(t);
    return st;
}

rg_status_t srv_table_ipc_check(struct srv_table *t, int i, enum srv_ipc_kind kind,
                                const uint8_t hash[32], char *other, size_t other_len)
{
    rg_status_t st = RG_ERR_NOT_FOUND;
    int e;

    other[0] = '\0';
    srv_table_lock(t);
    if ((e = ipc_find(t, kind, hash)) >= 0) {
        st = t->ipc[e].tenant == t->slots[i].tenant ? RG_OK : RG_ERR_REFUSED;
        snprintf(other, other_len, "%s", srv_table_tenant_name(t, t->ipc[e].slot));
    }
    srv_table_unlock(t);
    return st;
}

static void ipc_drop_locked(struct srv_table *t, int i)
{
    for (int e = 0; e < SRV_TABLE_IPC; e++)
        if (t->ipc[e].kind != 0 && t->ipc[e].slot == i)
            t->ipc[e].kind = 0;
}

void srv_table_ipc_drop(struct srv_table *t, int i)
{
    if (i < 0 || i >= SRV_TABLE_SLOTS)
        return;
    srv_table_lock(t);
    ipc_drop_locked(t, i);
    srv_table_unlock(t);
}
