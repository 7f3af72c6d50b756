/* The compute gate: kernel-granular sharing of a GPU between the sessions on it.
 *
 * Measuring. Each launch (kernel or graph) is bracketed by two events on its stream; a meter
 * thread waits for the end event (blocking sync, so it sleeps), reads the elapsed time and
 * charges it to the session's slot in the shared table: in total, in the current accounting
 * window (CLOCK_MONOTONIC / window_ns, the same for every process), and in virtual time (the
 * time over the session's share, scheduler/share.h). The one session launching on a GPU (the
 * ranks of a job on one server each have their own), uncapped, measures one launch in SAMPLE
 * and charges it for SAMPLE (the meter collects those on its 2 ms tick, unwoken): nobody can
 * contend with it, and measuring every launch halved launch throughput on an H100.
 *
 * Gating (sharing = time-sliced, the default). One session per GPU is the owner: the one
 * allowed to launch. A launch by the owner while nobody waits (and its tenant is uncapped, and
 * it is not best effort beside an active guaranteed session) passes after a few atomic loads.
 * Otherwise the session waits at its gate, polling every 50 us: under the table's lock it asks
 * sched_pick which session should run (the contender with the least virtual time; the owner
 * keeps the GPU for about a quantum beyond it), and takes ownership when the answer is itself
 * and the previous owner's launches have all completed (or none of them has completed for
 * stall_ns: a hung kernel must not stop everyone; the driver time-slices it with the next). So
 * while sessions contend, only one has kernels on the GPU, and the elapsed time of its launches is
 * its own GPU time; the contended owner keeps only about 2 ms of work queued so that handing over
 * is quick. An owner with nothing queued for grace_ns (2 ms: longer than the gaps inside a burst of
 * launches and a client's round trip) gives the GPU up to a session that waits.
 *
 * Work conservation. A light launch (the session's queued GPU time with it under 0.5 ms, from
 * its mean launch time: short kernels into a shallow queue, a launch-bound request loop) goes
 * at once beside the owner's work, unless its session is a quantum ahead of the owner in virtual
 * time (scheduler/share.h, sched_light_pass); the driver time-slices the contexts, as natively.
 * Serializing such sessions left the GPU idle through their host time and made each pay a
 * handover for microseconds of work. GPU-bound and capped sessions take turns as above.
 *
 * Class. A best-effort session waits while a guaranteed one is active, polling without the lock
 * and without counting as a waiter (so the guaranteed owner keeps its fast path), and keeps one
 * launch in flight for a second after a guaranteed session was active.
 *
 * Concurrent (sharing = mps). The workers are clients of the server's MPS daemon and their
 * kernels run at the same time: there is no owner; launches are sampled as for a lone session,
 * and only the class rule holds at the gate (best effort waits while a guaranteed session is
 * active). Caps and quotas are MPS's limits, set at the worker's start (server/tenancy.c). */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "scheduler/share.h"
#include "server/compute_gate.h"
#include "server/session.h"

#define RING    256
#define POLL_NS 50000
/* Uncontended and uncapped, one launch in SAMPLE is measured and stands for SAMPLE launches;
 * the others pass with a few atomic operations and no driver call. */
#define SAMPLE          256
#define METER_TICK_NS   2000000L /* the meter looks for sampled launches at least this often */
#define QUEUE_TARGET_NS 2000000ull
/* A best-effort session keeps a short queue for this long after a guaranteed one was active. */
#define BE_RECENT_NS 1000000000ull

typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);

struct gate_entry {
    CUevent start, end;
    CUcontext ctx;    /* the context the events belong to */
    uint32_t weight;  /* launches the measurement stands for */
    uint32_t sharers; /* sessions with launches in flight on the GPU at its start, itself too */
};

struct srv_gate {
    struct srv_session *s; /* for its driver table only (immutable once open) */
    struct srv_table *t;
    int slot;
    struct gate_entry ring[RING];
    _Atomic uint32_t head, tail; /* head: published by the worker; tail: done by the meter */
    _Atomic bool stop;
    _Atomic uint64_t avg_ns; /* running mean of one launch's GPU time */
    sem_t ready;
    pthread_t meter;
    CUcontext meter_ctx; /* the meter thread's current context */
    is_capturing_fn is_capturing;
    uint32_t fast_launches;  /* launches through the fast path (worker thread only) */
    uint64_t surveyed_ns;    /* when light() last surveyed the sessions (worker thread only) */
    uint64_t light_launches; /* launches that went beside the owner's work (worker thread) */
    /* What the gate did, said at the session's end (worker thread only): measured launches,
     * turns waited for (and the time), refusals of the light rule by its queue test and by
     * its virtual-time test, waits for room in the queue. */
    uint64_t measured, turns, turn_ns, light_queue, light_vtime, room_waits;
};

static void sleep_ns(long ns)
{
    struct timespec ts = {0, ns};

    nanosleep(&ts, NULL);
}

static struct srv_table_slot *my_slot(struct srv_gate *g)
{
    return &g->t->slots[g->slot];
}

static const struct srv_table_tenant *my_tenant(struct srv_gate *g)
{
    int k = my_slot(g)->tenant;

    return k >= 0 && k < g->t->ntenants ? &g->t->tenants[k] : NULL;
}

/* ---- the meter thread -------------------------------------------------------------------- */

/* Charge one launch's ns, standing for `weight` launches (sampled); the mean launch is the
 * launch's own (a sampled one's weighted time made a lone session's mean 256 times its launch,
 * and its first contended launches looked heavy). */
static void charge(struct srv_gate *g, uint64_t one_ns, uint32_t weight)
{
    struct srv_table_slot *sl = my_slot(g);
    const struct srv_table_tenant *ten = my_tenant(g);
    uint64_t now = srv_now_ns(), epoch = now / g->t->window_ns;
    int gpu = atomic_load(&sl->gate_gpu);
    uint64_t ns = one_ns * (weight ? weight : 1);

    if (atomic_load(&sl->win_epoch) != epoch) { /* only this thread writes the window */
        atomic_store(&sl->win_used_ns, 0);
        atomic_store(&sl->win_epoch, epoch);
    }
    atomic_fetch_add(&sl->win_used_ns, ns);
    atomic_fetch_add(&sl->gpu_ns, ns);
    atomic_fetch_add(&sl->vtime, sched_vtime_charge(ns, atomic_load(&sl->share_ppm)));
    atomic_store(&sl->last_done_ns, now);
    atomic_store(&g->avg_ns, (atomic_load(&g->avg_ns) * 7 + one_ns) / 8);
    if ((ten == NULL || !ten->best_effort) && gpu >= 0)
        atomic_store(&g->t->gpus[gpu].last_guaranteed_ns, now);
}

static void measure(struct srv_gate *g, struct gate_entry *e)
{
    const struct srv_driver *d = &g->s->drv;
    float ms = 0;

    if (e->ctx != g->meter_ctx && d->cuCtxSetCurrent(e->ctx) == CUDA_SUCCESS)
        g->meter_ctx = e->ctx;
    /* A light launch runs beside other sessions' work: the driver time-slices the contexts and
     * the elapsed time between its two events holds their slices too. It is charged 1/k of it,
     * k the sessions with launches in flight at its start (as each had about 1/k of the GPU);
     * without that, light sessions were charged more than the wall time (four on an H100: 5 s
     * of GPU time in 2 s), soon looked heavy and took turns, the GPU idle through each owner's
     * host time (ctest share_bursts). The owner's launches are charged in full: the light work
     * beside them is short by definition. */
    if (d->cuEventSynchronize(e->end) == CUDA_SUCCESS &&
        d->cuEventElapsedTime(&ms, e->start, e->end) == CUDA_SUCCESS && ms > 0)
        charge(g, (uint64_t)((double)ms * 1e6 / (e->sharers > 1 ? e->sharers : 1)), e->weight);
}

static void *meter_main(void *arg)
{
    struct srv_gate *g = arg;
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;

    /* This thread waits on events while the session's thread may be capturing a graph in global
     * mode (PyTorch's default), where such calls from any other thread would invalidate the
     * capture; in relaxed mode they do not. */
    g->s->drv.cuThreadExchangeStreamCaptureMode(&relaxed);
    for (;;) {
        uint32_t tail = atomic_load(&g->tail);
        if (tail == atomic_load(&g->head)) {
            if (atomic_load(&g->stop))
                return NULL;
            struct timespec tick;
            clock_gettime(CLOCK_REALTIME, &tick);
            tick.tv_nsec += METER_TICK_NS;
            if (tick.tv_nsec >= 1000000000L) {
                tick.tv_sec++;
                tick.tv_nsec -= 1000000000L;
            }
            sem_timedwait(&g->ready, &tick);
            continue;
        }
        measure(g, &g->ring[tail % RING]);
        atomic_store(&g->tail, tail + 1);
        atomic_fetch_sub(&my_slot(g)->inflight, 1);
    }
}

/* ---- the gate ------------------------------------------------------------------------------ */

/* The server GPU of the current context. */
static int current_gpu(struct srv_session *s)
{
    uint64_t id = s->current_ctx, dev = 0;
    struct srv_handle *h;

    if (id != 0 && id < ((uint64_t)PROTO_ID_FIRST_COUNTER << 4))
        dev = (id >> 4) - 1;
    else if (id != 0 && (h = srv_handle_get(s, id, PROTO_H_CTX)) != NULL)
        dev = h->size; /* the device index h_ctx_create kept */
    if (dev >= (uint64_t)s->ndevices)
        dev = 0;
    return s->devices[dev] >= 0 && s->devices[dev] < SRV_TABLE_GPUS ? s->devices[dev] : 0;
}

static bool concurrent(const struct srv_table *t)
{
    return t->sharing == SRV_SHARING_MPS;
}

/* Under the lock: the owner of gpu has launches in flight but has neither launched nor seen
 * one complete for stall_ns since it took the GPU (a hung kernel, or one far longer than a
 * turn, while its client waits for it). */
static bool owner_stalled(struct srv_table *t, int gpu, uint64_t now)
{
    int owner = atomic_load(&t->gpus[gpu].owner);
    const struct srv_table_slot *sl;
    uint64_t last;

    if (owner < 0 || atomic_load(&t->slots[owner].pid) == 0 ||
        atomic_load(&t->slots[owner].inflight) == 0)
        return false;
    sl = &t->slots[owner];
    last = atomic_load(&t->gpus[gpu].owner_since_ns);
    if (atomic_load(&sl->last_done_ns) > last)
        last = atomic_load(&sl->last_done_ns);
    if (atomic_load(&sl->last_launch_ns) > last)
        last = atomic_load(&sl->last_launch_ns);
    return now > last && now - last > t->stall_ns;
}

/* Under the lock: the sessions on gpu as sched_pick sees them (ss, slots[i] the table slot of
 * ss[i]); *mine is the caller's index, -1 when it is not among them. */
static int snapshot(struct srv_table *t, int me, int gpu, uint64_t now, struct sched_session *ss,
                    int *slots, int *mine)
{
    int n = 0, hi = atomic_load(&t->hiwater), owner = atomic_load(&t->gpus[gpu].owner);
    bool stalled = owner_stalled(t, gpu, now);
    int nt = t->ntenants < SCHED_MAX_TENANTS - 1 ? t->ntenants : SCHED_MAX_TENANTS - 1;
    uint64_t epoch = now / t->window_ns;

    *mine = -1;
    for (int i = 0; i < hi; i++) {
        struct srv_table_slot *sl = &t->slots[i];
        uint64_t last = atomic_load(&sl->last_launch_ns), since = last < now ? now - last : 0;
        bool waiting = atomic_load(&sl->waiting), busy = waiting || atomic_load(&sl->inflight) > 0;
        if (atomic_load(&sl->pid) == 0 || atomic_load(&sl->gate_gpu) != gpu)
            continue;
        if (i == me)
            *mine = n;
        slots[n] = i;
        ss[n++] = (struct sched_session){
            .tenant = sl->tenant >= 0 && sl->tenant < nt ? sl->tenant : nt,
            .active = busy || since < t->horizon_ns,
            /* Contends now: a session at its gate, or the owner while it has work queued or is
             * between the launches of a burst, unless it stalled. Another session's work still
             * in flight (a stalled owner's, passed) gives it no claim until it launches again. */
            .wants = i == owner ? (busy || since < t->grace_ns) && !stalled : waiting,
            .owner = i == owner,
            .used_ns = atomic_load(&sl->win_epoch) == epoch ? atomic_load(&sl->win_used_ns) : 0,
            .vtime = atomic_load(&sl->vtime)};
    }
    return n;
}

/* Under the lock: the sessions on gpu and their shares (published in their slots on the way:
 * an idle session keeps the share it last contended with). joining: `me` starts to contend
 * after being idle, or launches light (its virtual time may have to catch up with the
 * contenders', scheduler/share.h). Returns the number of sessions; *mine as snapshot's. */
static int survey(struct srv_table *t, int me, int gpu, uint64_t now, bool joining,
                  struct sched_tenant *tens, int *ntens, struct sched_session *ss, int *slots,
                  double *share, int *mine)
{
    struct sched_params p = {.window_ns = t->window_ns, .quantum_ns = t->quantum_ns};
    int nt = t->ntenants < SCHED_MAX_TENANTS - 1 ? t->ntenants : SCHED_MAX_TENANTS - 1, n;

    for (int k = 0; k < nt; k++)
        tens[k] = (struct sched_tenant){t->tenants[k].weight, t->tenants[k].cap_permille,
                                        t->tenants[k].best_effort};
    tens[nt] = (struct sched_tenant){.weight = 1}; /* sessions of a server without tenants */
    *ntens = nt + 1;
    n = snapshot(t, me, gpu, now, ss, slots, mine);
    if (joining && *mine >= 0) /* about to launch: active, whatever its past (a new session's
                                * share would be 0, and its catch-up a thousand quanta) */
        ss[*mine].active = true;
    sched_session_shares(tens, nt + 1, ss, n, share);
    if (joining && *mine >= 0) {
        uint64_t want = sched_join_vtime(ss, n, *mine, share[*mine], &p);
        uint64_t cur = ss[*mine].vtime;
        /* raised only, and never over a charge our meter adds meanwhile (a light session may
         * have launches in flight) */
        while ((int64_t)(want - cur) > 0 &&
               !atomic_compare_exchange_weak(&t->slots[me].vtime, &cur, want))
            ;
        ss[*mine].vtime = atomic_load(&t->slots[me].vtime);
    }
    for (int i = 0; i < n; i++)
        if (share[i] > 0)
            atomic_store(&t->slots[slots[i]].share_ppm, (uint32_t)(share[i] * 1e6 + 0.5));
    return n;
}

/* Under the lock: whether session `me` should launch on gpu now (joining: as survey's). */
static bool decide(struct srv_table *t, int me, int gpu, uint64_t now, bool joining)
{
    struct sched_session ss[SRV_TABLE_SLOTS]; /* 36 KiB of stack, touched up to n */
    int slots[SRV_TABLE_SLOTS];
    double share[SRV_TABLE_SLOTS];
    struct sched_tenant tens[SCHED_MAX_TENANTS];
    struct sched_params p = {.window_ns = t->window_ns, .quantum_ns = t->quantum_ns};
    int n, nt, mine, pick, owner = atomic_load(&t->gpus[gpu].owner);

    n = survey(t, me, gpu, now, joining, tens, &nt, ss, slots, share, &mine);
    if (mine < 0)
        return false;
    pick = sched_pick(tens, nt, ss, n, &p, share);
    if (pick != mine)
        return false;
    if (owner < 0 || owner == me || atomic_load(&t->slots[owner].pid) == 0 ||
        atomic_load(&t->slots[owner].inflight) == 0)
        return true;
    /* Due the GPU while the owner's launches still run: they end within about the queue target
     * normally; those of a stalled owner are left to the driver's time-slicing. */
    if (!owner_stalled(t, gpu, now))
        return false;
    rg_warn("session %llu's launches on GPU %d completed nothing for %llu ms; launching beside "
            "them (the driver time-slices the two)",
            (unsigned long long)t->slots[owner].session, gpu,
            (unsigned long long)(t->stall_ns / 1000000));
    return true;
}

static void set_waiting(struct srv_table *t, struct srv_table_slot *sl, int gpu, bool on)
{
    if (atomic_load(&sl->waiting) == (uint32_t)on)
        return;
    atomic_store(&sl->waiting, on);
    if (on)
        atomic_fetch_add(&t->gpus[gpu].nwaiting, 1);
    else
        atomic_fetch_sub(&t->gpus[gpu].nwaiting, 1);
}

/* Whether this launch may go at once beside the owner's work (scheduler/share.h,
 * sched_light_pass): light, and the session not ahead of the owner by its quantum. Lock-free
 * but for a survey at most every horizon (and when the session comes back from idle), which
 * publishes the shares and keeps a light session's virtual time within a quantum of the
 * contenders' (it must not bank the time it leaves unused). */
static bool light(struct srv_gate *g, int gpu, uint64_t now)
{
    static struct sched_session ss[SRV_TABLE_SLOTS];
    static int slots[SRV_TABLE_SLOTS];
    static double share[SRV_TABLE_SLOTS];
    struct srv_table *t = g->t;
    struct srv_table_slot *sl = my_slot(g);
    struct sched_params p = {.window_ns = t->window_ns, .quantum_ns = t->quantum_ns};
    struct sched_tenant tens[SCHED_MAX_TENANTS];
    int owner = atomic_load(&t->gpus[gpu].owner), nt, mine;
    struct sched_light l;

    if (owner < 0 || owner == g->slot || atomic_load(&t->slots[owner].pid) == 0)
        return false;
    l = (struct sched_light){.avg_ns = atomic_load(&g->avg_ns),
                             .inflight = atomic_load(&sl->inflight)};
    if (l.avg_ns == 0 ? l.inflight != 0 : (uint64_t)l.inflight + 1 > SCHED_LIGHT_NS / l.avg_ns) {
        g->light_queue++;
        return false; /* not light: no need to look further */
    }
    if (now - g->surveyed_ns >= t->horizon_ns) {
        srv_table_lock(t);
        survey(t, g->slot, gpu, now, true, tens, &nt, ss, slots, share, &mine);
        srv_table_unlock(t);
        g->surveyed_ns = now;
    }
    l.vtime = atomic_load(&sl->vtime);
    l.ref_vtime = atomic_load(&t->slots[owner].vtime);
    l.share = atomic_load(&sl->share_ppm) / 1e6;
    if (sched_light_pass(&l, &p))
        return true;
    g->light_vtime++;
    return false;
}

/* A best-effort session waits while a guaranteed one is active on gpu, polling the GPU's
 * entry without the lock and without counting as a waiter: the guaranteed owner keeps its fast
 * path, and the table's lock is left to the sessions that can get the GPU. The caller counts
 * the time held. */
static void hold_class(struct srv_gate *g, int gpu, uint64_t *now)
{
    struct srv_table_gpu *G = &g->t->gpus[gpu];

    while (*now - atomic_load(&G->last_guaranteed_ns) < g->t->horizon_ns) {
        sleep_ns(POLL_NS);
        *now = srv_now_ns();
    }
}

/* Hold the caller until it is the session to run on gpu, or (may_light) until its launch may
 * go beside the owner's work: a session that waited for a turn (ahead of the owner, or the
 * owner itself while others waited) must not wait out a whole turn of the next owner when its
 * work is light and it is no longer ahead. */
static bool wait_turn(struct srv_gate *g, int gpu, uint64_t now, bool may_light)
{
    struct srv_table *t = g->t;
    struct srv_table_slot *sl = my_slot(g);
    const struct srv_table_tenant *ten = my_tenant(g);
    bool best_effort = ten != NULL && ten->best_effort;
    uint64_t t0 = now;
    bool go, went_light = false;

    for (;;) {
        bool joining;
        if (best_effort && now - atomic_load(&t->gpus[gpu].last_guaranteed_ns) < t->horizon_ns) {
            /* a guaranteed session became active meanwhile: it has the GPU whatever the turn */
            srv_table_lock(t);
            set_waiting(t, sl, gpu, false);
            srv_table_unlock(t);
            hold_class(g, gpu, &now);
        }
        srv_table_lock(t);
        /* back from idle (or new): nothing in flight, no launch within the horizon */
        joining = !atomic_load(&sl->waiting) && atomic_load(&sl->inflight) == 0 &&
                  now - atomic_load(&sl->last_launch_ns) >= t->horizon_ns;
        set_waiting(t, sl, gpu, true);
        go = decide(t, g->slot, gpu, now, joining);
        if (go) {
            if (atomic_load(&t->gpus[gpu].owner) != g->slot)
                atomic_store(&t->gpus[gpu].owner_since_ns, now);
            atomic_store(&t->gpus[gpu].owner, g->slot);
            set_waiting(t, sl, gpu, false);
        }
        srv_table_unlock(t);
        if (go)
            break;
        sleep_ns(POLL_NS);
        now = srv_now_ns();
        if (may_light && light(g, gpu, now)) {
            srv_table_lock(t);
            set_waiting(t, sl, gpu, false);
            srv_table_unlock(t);
            went_light = true;
            break;
        }
    }
    if (now > t0)
        atomic_fetch_add(&sl->held_ns, now - t0);
    if (!went_light) { /* a turn taken (the light rule's exits are counted as light) */
        g->turns++;
        g->turn_ns += now - t0;
    }
    return went_light;
}

/* The sessions with launches in flight on gpu, this one included (its launch is about to be). */
static uint32_t sharers(struct srv_gate *g, int gpu)
{
    struct srv_table *t = g->t;
    int hi = atomic_load(&t->hiwater);
    uint32_t k = 1;

    for (int i = 0; i < hi; i++)
        if (i != g->slot && atomic_load(&t->slots[i].pid) != 0 &&
            atomic_load(&t->slots[i].gate_gpu) == gpu && atomic_load(&t->slots[i].inflight) > 0)
            k++;
    return k;
}

/* Keep at most `limit` measured launches in flight. */
static void wait_room(struct srv_gate *g, uint32_t limit)
{
    if (atomic_load(&g->head) - atomic_load(&g->tail) >= limit)
        g->room_waits++;
    while (atomic_load(&g->head) - atomic_load(&g->tail) >= limit)
        sleep_ns(POLL_NS / 2);
}

/* Hold the caller until its launch may go; true when it goes beside another session's work
 * (the light rule), not as the GPU's owner. */
static bool hold(struct srv_gate *g, int gpu)
{
    struct srv_table *t = g->t;
    struct srv_table_gpu *G = &t->gpus[gpu];
    const struct srv_table_tenant *ten = my_tenant(g);
    bool best_effort = ten != NULL && ten->best_effort;
    bool capped = ten != NULL && ten->cap_permille != 0;
    uint64_t now = srv_now_ns(), t0 = now, avg;
    uint32_t limit = RING - 1;
    bool went_light = false;

    atomic_store(&my_slot(g)->gate_gpu, gpu);
    if (best_effort) {
        hold_class(g, gpu, &now);
        if (now > t0)
            atomic_fetch_add(&my_slot(g)->held_ns, now - t0);
    }
    if (capped || atomic_load(&G->owner) != g->slot || atomic_load(&G->nwaiting) != 0) {
        /* a capped session's time must be its own: it always takes its turn */
        went_light = (!capped && light(g, gpu, now)) || wait_turn(g, gpu, now, !capped);
    }
    g->light_launches += went_light;
    /* Contended: keep the queue short, so that a handover waits for little. Best effort
     * beside a guaranteed tenant active in the last second: one launch at a time, so that the
     * guaranteed tenant's return waits for at most one of its kernels. */
    if (capped || atomic_load(&G->nwaiting) != 0) {
        avg = atomic_load(&g->avg_ns);
        limit = avg == 0 ? 2 : (uint32_t)(QUEUE_TARGET_NS / avg);
        limit = limit < 2 ? 2 : limit > RING - 1 ? RING - 1 : limit;
    }
    if (best_effort && now - atomic_load(&G->last_guaranteed_ns) < BE_RECENT_NS)
        limit = 1;
    wait_room(g, limit);
    return went_light;
}

static bool capturing(struct srv_gate *g, CUstream st)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;

    if (g->is_capturing == NULL)
        return false;
    return g->is_capturing(st, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The next ring entry with events in the current context; -1 if they cannot be made. */
static int entry_ready(struct srv_gate *g)
{
    const struct srv_driver *d = &g->s->drv;
    uint32_t head = atomic_load(&g->head);
    struct gate_entry *e = &g->ring[head % RING];
    CUcontext cur = NULL;

    if (d->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur == NULL)
        return -1;
    if (e->ctx != cur) {
        if (e->ctx != NULL) {
            d->cuEventDestroy(e->start);
            d->cuEventDestroy(e->end);
            e->ctx = NULL;
        }
        if (d->cuEventCreate(&e->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            return -1;
        if (d->cuEventCreate(&e->end, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) {
            d->cuEventDestroy(e->start);
            return -1;
        }
        e->ctx = cur;
    }
    return (int)(head % RING);
}

/* Concurrent sharing: no owner; a best-effort session waits while a guaranteed one is active
 * on gpu (its launches already queued run on beside the guaranteed session's). */
static void hold_concurrent(struct srv_gate *g, int gpu)
{
    const struct srv_table_tenant *ten = my_tenant(g);
    struct srv_table_gpu *G = &g->t->gpus[gpu];
    uint64_t t0, now;

    atomic_store(&my_slot(g)->gate_gpu, gpu);
    if (ten == NULL || !ten->best_effort)
        return;
    t0 = now = srv_now_ns();
    while (now - atomic_load(&G->last_guaranteed_ns) < g->t->horizon_ns) {
        sleep_ns(POLL_NS);
        now = srv_now_ns();
    }
    if (now > t0)
        atomic_fetch_add(&my_slot(g)->held_ns, now - t0);
}

/* The session counts among the users of gpu from its first launch there to its end. (A worker
 * killed between the two atomics leaves users one low: harmless, uncontended() asks > 1, and
 * the owner and waiter checks still see a contender.) */
static void use_gpu(struct srv_gate *g, int gpu)
{
    struct srv_table_slot *sl = my_slot(g);
    uint32_t bit = 1u << gpu;

    if ((atomic_load(&sl->launch_mask) & bit) == 0 &&
        (atomic_fetch_or(&sl->launch_mask, bit) & bit) == 0)
        atomic_fetch_add(&g->t->gpus[gpu].users, 1);
}

/* The only session launching on gpu, its owner, uncapped: nobody can contend with it, so its
 * launches need not be measured one by one (SAMPLE). Sessions on other GPUs of the server (the
 * other ranks of a job) do not count. With another session on gpu, every launch is measured,
 * so that a handover waits for all of the owner's kernels. Concurrent sharing has no
 * handovers: its launches are always sampled. */
static bool uncontended(struct srv_gate *g, int gpu)
{
    struct srv_table_gpu *G = &g->t->gpus[gpu];
    const struct srv_table_tenant *ten = my_tenant(g);

    if (concurrent(g->t))
        return true;
    if (atomic_load(&G->users) > 1 || atomic_load(&G->owner) != g->slot ||
        atomic_load(&G->nwaiting) != 0)
        return false;
    if (ten != NULL && ten->cap_permille != 0)
        return false;
    return ten == NULL || !ten->best_effort ||
           srv_now_ns() - atomic_load(&G->last_guaranteed_ns) >= g->t->horizon_ns;
}

void srv_gate_begin(struct srv_session *s, CUstream st, struct srv_gate_ticket *tk)
{
    struct srv_gate *g = srv_tenancy_gate(s);
    bool went_light = false;
    int gpu;

    tk->entry = -1;
    tk->weight = 1;
    if (g == NULL)
        return;
    gpu = current_gpu(s);
    use_gpu(g, gpu);
    if (concurrent(g->t))
        hold_concurrent(g, gpu);
    if (uncontended(g, gpu)) {
        atomic_store(&my_slot(g)->gate_gpu, gpu);
        /* Sampled, and never waited for: with the ring full, this one goes unmeasured. */
        if (++g->fast_launches % SAMPLE != 0 ||
            atomic_load(&g->head) - atomic_load(&g->tail) >= RING - 1) {
            tk->entry = SRV_GATE_FAST;
            return;
        }
        tk->weight = SAMPLE;
    }
    if (capturing(g, st))
        return;
    if (tk->weight == 1) {
        went_light = hold(g, gpu);
        g->measured++;
    }
    /* In flight from now: a launch the driver runs before returning keeps others off too. */
    atomic_fetch_add(&my_slot(g)->inflight, 1);
    tk->entry = entry_ready(g);
    if (tk->entry >= 0) {
        g->ring[tk->entry].weight = tk->weight;
        g->ring[tk->entry].sharers = went_light ? sharers(g, gpu) : 1;
    }
    if (tk->entry >= 0 &&
        s->drv.cuEventRecordWithFlags(g->ring[tk->entry].start, st, 0) != CUDA_SUCCESS)
        tk->entry = -1;
    if (tk->entry < 0)
        atomic_fetch_sub(&my_slot(g)->inflight, 1);
}

void srv_gate_end(struct srv_session *s, CUstream st, struct srv_gate_ticket *tk, CUresult res)
{
    struct srv_gate *g = srv_tenancy_gate(s);
    const struct srv_table_tenant *ten;
    struct srv_table_slot *sl;
    uint64_t now;

    if (g == NULL || tk->entry == -1)
        return;
    sl = my_slot(g);
    if (res != CUDA_SUCCESS) {
        if (tk->entry >= 0)
            atomic_fetch_sub(&sl->inflight, 1);
        return;
    }
    now = tk->entry == SRV_GATE_FAST ? srv_coarse_now_ns() : srv_now_ns();
    atomic_fetch_add(&sl->launches, 1);
    atomic_store(&sl->last_launch_ns, now);
    ten = my_tenant(g);
    if (ten == NULL || !ten->best_effort)
        atomic_store(&g->t->gpus[atomic_load(&sl->gate_gpu)].last_guaranteed_ns, now);
    if (tk->entry == SRV_GATE_FAST) /* counted; its GPU time is in the sampled launches' */
        return;
    if (s->drv.cuEventRecordWithFlags(g->ring[tk->entry].end, st, 0) != CUDA_SUCCESS) {
        atomic_fetch_sub(&sl->inflight, 1);
        return;
    }
    atomic_fetch_add(&g->head, 1);
    /* A sampled launch of a lone session waits for the meter's next tick; waking the meter for
     * each would cost a context switch per SAMPLE launches. Contended launches wake it. */
    if (tk->weight == 1)
        sem_post(&g->ready);
}

/* Wait (at most about timeout_ns) for every published launch to be measured. */
static bool drain(struct srv_gate *g, uint64_t timeout_ns)
{
    uint64_t end = srv_now_ns() + timeout_ns;

    while (atomic_load(&g->tail) != atomic_load(&g->head)) {
        if (srv_now_ns() > end)
            return false;
        sleep_ns(POLL_NS);
    }
    return true;
}

static void drop_events(struct srv_gate *g)
{
    for (int i = 0; i < RING; i++) {
        struct gate_entry *e = &g->ring[i];
        if (e->ctx == NULL)
            continue;
        g->s->drv.cuEventDestroy(e->start);
        g->s->drv.cuEventDestroy(e->end);
        e->ctx = NULL;
    }
}

void srv_gate_forget_context(struct srv_session *s)
{
    struct srv_gate *g = srv_tenancy_gate(s);

    if (g == NULL)
        return;
    drain(g, UINT64_MAX / 2); /* cuCtxDestroy would wait for the work as well */
    drop_events(g);
    g->meter_ctx = NULL; /* the meter is idle: it set nothing since the drain */
}

struct srv_gate *srv_gate_create(struct srv_session *s, struct srv_table *table, int slot)
{
    struct srv_gate *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return NULL;
    g->s = s;
    g->t = table;
    g->slot = slot;
    g->is_capturing = (is_capturing_fn)dlsym(s->drv.dl, "cuStreamIsCapturing");
    if (sem_init(&g->ready, 0, 0) != 0 || pthread_create(&g->meter, NULL, meter_main, g) != 0) {
        rg_error("cannot start the compute meter thread: %m; launches go unmeasured");
        free(g);
        return NULL;
    }
    return g;
}

void srv_gate_destroy(struct srv_session *s, struct srv_gate *g)
{
    struct timespec until;

    if (g == NULL)
        return;
    atomic_store(&g->stop, true);
    sem_post(&g->ready);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    if (pthread_timedjoin_np(g->meter, NULL, &until) != 0) {
        rg_warn("launches still running at the end of the session; not waiting for them");
        return; /* the thread and its events go with the process */
    }
    if (g->light_launches != 0)
        rg_info("compute gate: %llu launches went beside another session's work (light)",
                (unsigned long long)g->light_launches);
    if (g->measured != 0)
        rg_info("compute gate: %llu measured launches; %llu turns waited for (%.1f ms); light "
                "refused %llu for its queue, %llu for its virtual time; %llu waits for room; mean "
                "launch %.1f us",
                (unsigned long long)g->measured, (unsigned long long)g->turns, g->turn_ns / 1e6,
                (unsigned long long)g->light_queue, (unsigned long long)g->light_vtime,
                (unsigned long long)g->room_waits, atomic_load(&g->avg_ns) / 1e3);
    drop_events(g);
    sem_destroy(&g->ready);
    free(g);
}
