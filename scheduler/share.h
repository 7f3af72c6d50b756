/* Compute shares of one GPU between tenants and their sessions, and who may launch next.
 *
 * Pure arithmetic over a snapshot (no clocks, no locks): the worker's compute gate
 * (server/compute_gate.c) fills the snapshot from the shared session table and acts on the
 * answer. Times are nanoseconds of GPU time.
 *
 * Shares are two-level: tenants divide the GPU by weight, caps and class (sched_shares), and a
 * tenant's share is divided equally among its active sessions, so a client cannot raise its
 * tenant's share by opening more sessions. The order among contending sessions is by virtual
 * time: each session's GPU time divided by its share when it was used (the gate accumulates it,
 * sched_vtime_charge), least first, as in start-time fair queuing; the owner keeps the GPU for
 * about a quantum of its own GPU time beyond the least-served contender, so that handovers
 * (each idles the GPU for a moment) stay rare. */
#ifndef RGPU_SCHEDULER_SHARE_H
#define RGPU_SCHEDULER_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#define SCHED_MAX_TENANTS 64
/* Shares are published in millionths; below this a share counts as this much when virtual
 * time is charged (bounds how fast virtual time can grow: 1000x real time at most). */
#define SCHED_MIN_SHARE_PPM 1000u

/* A tenant's compute settings (from the server config). */
struct sched_tenant {
    uint32_t weight; /* divides contended time; 0 is taken as 1 */
    uint32_t
        cap_permille; /* hard cap on its share of GPU time, even when the GPU is idle; 0 = none */
    bool best_effort; /* yields to guaranteed tenants while those are active */
};

/* One session on the GPU, as the gate sees it. */
struct sched_session {
    int tenant;       /* index into the tenant array */
    bool active;      /* launched within the activity horizon, waits, or has work in flight */
    bool wants;       /* waits at its gate or has work in flight: contends for the GPU now */
    bool owner;       /* the session currently allowed to launch */
    uint64_t used_ns; /* GPU time charged to it in the current window (caps) */
    uint64_t vtime;   /* virtual time: GPU time over share, accumulated; wraps (only the
                       * difference between two sessions' values means anything) */
};

struct sched_params {
    uint64_t window_ns;  /* accounting window (caps are a fraction of it) */
    uint64_t quantum_ns; /* the owner keeps the GPU until it has used this much GPU time more
                          * than its share entitles it to beside the least-served contender */
};

/* Shares (fractions of the GPU, summing to at most 1) of the tenants that have an active
 * session: guaranteed tenants divide the GPU by weight, each held to its cap with the excess
 * going to the others (water-filling); best-effort tenants divide what the guaranteed ones
 * leave (all of it when none is active) the same way. Inactive tenants get 0. */
void sched_shares(const struct sched_tenant *tenants, int ntenants, const bool *active,
                  double *share);

/* Each session's share (nsessions entries): its tenant's share divided equally among the
 * tenant's sessions that are active or want the GPU; 0 for the others and for sessions whose
 * tenant index is out of range. */
void sched_session_shares(const struct sched_tenant *tenants, int ntenants,
                          const struct sched_session *sessions, int nsessions, double *share);

/* The session that may launch now, or -1 when none may (all contenders capped out or with no
 * share). Candidates are the sessions that want the GPU, with a positive share and cap room
 * left in their tenant; the one with the least virtual time wins, but the owner keeps the GPU
 * while its virtual time is less than quantum_ns / its share ahead of the winner's. share
 * (nsessions entries, may be NULL) receives the sessions' shares. */
int sched_pick(const struct sched_tenant *tenants, int ntenants,
               const struct sched_session *sessions, int nsessions,
               const struct sched_params *params, double *share);

/* The virtual time session `joining` (whose share is share) should have at least when it
 * starts to contend: one quantum of its own GPU time behind the least virtual time of the other
 * sessions that want the GPU. A session back from idle, or new, is thus served first but does
 * not take the GPU for as long as it was away (its own value when that is larger, or when
 * nobody else contends). */
uint64_t sched_join_vtime(const struct sched_session *sessions, int nsessions, int joining,
                          double share, const struct sched_params *params);

/* Work conservation (issue 30, the CPU-bound regression). While sessions contend, one owner
 * launches at a time and the others wait for its turn to end and its queue to drain; that is
 * what makes each session's measured time its own. It wastes the GPU when a session's work is
 * light, short kernels into an empty queue with host time between them (a launch-bound
 * request loop): the owner holds the GPU through its gaps and every waiter pays a handover
 * (a poll plus a drain) for a few microseconds of work. A light launch therefore goes at once,
 * beside the owner's work (the driver time-slices the two contexts, as natively), provided that
 * the session is not ahead of the owner in virtual time by its quantum: a light session that
 * would take more than its share is held like any other. Below this much queued GPU time
 * (including the launch, from the session's mean launch time) a launch counts as light:
 * serializing work shorter than about ten 50 us polls costs more than exclusivity buys, and
 * GPU-bound sessions (a kernel or a graph replay of a millisecond, or a deep queue) stay
 * above it. */
#define SCHED_LIGHT_NS 500000ull

/* A session about to launch, as the light-launch rule sees it. */
struct sched_light {
    uint64_t avg_ns;    /* its launches' mean GPU time so far; 0 = none measured yet */
    uint32_t inflight;  /* its launches in flight */
    uint64_t vtime;     /* its virtual time */
    uint64_t ref_vtime; /* the owner's virtual time */
    double share;       /* its share of the GPU (fraction) */
};

/* Whether the launch may go beside the owner's work without waiting for a turn: light (the
 * session's queued GPU time, this launch included, under SCHED_LIGHT_NS; before any launch of
 * it was measured, its first launch into an empty queue: a new session must not wait out a
 * whole turn to be measured) and the session not more than quantum_ns / share ahead of the
 * owner in virtual time (wrap-safe). */
bool sched_light_pass(const struct sched_light *l, const struct sched_params *params);

/* The virtual time ns of GPU time adds to a session whose share is share_ppm millionths. */
uint64_t sched_vtime_charge(uint64_t ns, uint32_t share_ppm);

/* How much GPU time a tenant may still use in this window before its cap stops it
 * (UINT64_MAX when uncapped). */
uint64_t sched_cap_room(const struct sched_tenant *t, uint64_t used_ns, uint64_t window_ns);

#endif
