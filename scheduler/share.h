/* Compute shares of one GPU between tenants, and who may launch next.
 *
 * Pure arithmetic over a snapshot (no clocks, no locks): the worker's compute gate
 * (server/compute_gate.c) fills the snapshot from the shared session table and acts on the
 * answer. Times are nanoseconds of GPU time measured in the current accounting window. */
#ifndef RGPU_SCHEDULER_SHARE_H
#define RGPU_SCHEDULER_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#define SCHED_MAX_TENANTS 64

/* A tenant's compute settings (from the server config). */
struct sched_tenant {
    uint32_t weight;       /* divides contended time; 0 is taken as 1 */
    uint32_t cap_permille; /* hard cap on its share of GPU time, even when the GPU is idle; 0 = none */
    bool best_effort;      /* yields to guaranteed tenants while those are active */
};

/* One session on the GPU, as the gate sees it. */
struct sched_session {
    int tenant;       /* index into the tenant array */
    bool active;      /* launched within the activity horizon, waits, or has work in flight */
    bool wants;       /* waits at its gate or has work in flight: contends for the GPU now */
    bool owner;       /* the session currently allowed to launch */
    uint64_t used_ns; /* GPU time charged to it in the current window */
};

struct sched_params {
    uint64_t window_ns;  /* accounting window (caps are a fraction of it) */
    uint64_t quantum_ns; /* the owner keeps the GPU until it is this far (in time normalized by
                          * share) ahead of the most deserving contender */
};

/* Shares (fractions of the GPU, summing to at most 1) of the tenants that have an active
 * session: guaranteed tenants divide the GPU by weight, each held to its cap with the excess
 * going to the others (water-filling); best-effort tenants divide what the guaranteed ones
 * leave (all of it when none is active) the same way. Inactive tenants get 0. */
void sched_shares(const struct sched_tenant *tenants, int ntenants, const bool *active,
                  double *share);

/* The session that may launch now, or -1 when none may (all contenders capped out or with no
 * share). Among tenants with a wanting session, a positive share and cap room left, the one
 * with the least GPU time per unit of share wins; the owner's tenant keeps the GPU while it is
 * within quantum_ns of that. Within the tenant: the owner session if it wants, else the
 * wanting session with the least time. share (ntenants entries, may be NULL) receives the
 * shares. */
int sched_pick(const struct sched_tenant *tenants, int ntenants,
               const struct sched_session *sessions, int nsessions,
               const struct sched_params *params, double *share);

/* How much GPU time a tenant may still use in this window before its cap stops it
 * (UINT64_MAX when uncapped). */
uint64_t sched_cap_room(const struct sched_tenant *t, uint64_t used_ns, uint64_t window_ns);

#endif
