/* Pool placement: which gpu-server of a pool a job goes to.
 *
 * Pure functions over what each candidate's probe answered (client/session/pool.c gathers it), so
 * every policy is unit-tested without sockets. The client tries the servers in the order returned
 * and moves to the next on a refusal or a failure. */
#ifndef RGPU_SCHEDULER_PLACEMENT_H
#define RGPU_SCHEDULER_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

enum sched_policy {
    SCHED_SPREAD = 0, /* least loaded first (the default): jobs spread over the pool */
    SCHED_PACK,       /* busiest server that still fits first: keeps whole GPUs free */
    SCHED_FIRST,      /* the pool's list order */
};

/* One server as its probe described it to this tenant. */
struct sched_candidate {
    bool answered;      /* false: unreachable, refused the probe or timed out (never placed) */
    bool fits;          /* the server says a session of this job would be admitted now */
    uint64_t total_mem; /* memory of its smallest GPU, bytes */
    uint64_t free_mem;  /* what the job could still reserve on its fullest GPU, bytes */
    uint32_t sessions;  /* sessions on its busiest GPU, all tenants together (a count) */
    double utilization; /* busy fraction of its busiest GPU, 0..1 */
    uint32_t ngpus;     /* GPUs a session gets there (admission is for all of them at once) */
};

/* "spread" | "pack" | "first" -> *policy_p; false (and *policy_p untouched) otherwise. */
bool sched_policy_parse(const char *name, enum sched_policy *policy_p);
const char *sched_policy_name(enum sched_policy policy);

/* The load the policies compare: the reserved fraction of the memory, then sessions, then
 * utilization, folded into one number (larger = busier). */
double sched_load(const struct sched_candidate *c);

/* The order in which to try the n candidates: indices of those that answered and fit, best
 * first, written to order_p[] (room for n). Returns how many. Candidates of equal load are
 * ordered at random from *seed (xorshift; any non-zero value, advanced on each use), so that
 * many clients starting at once with the same view do not all pick the same server. */
int sched_place(enum sched_policy policy, const struct sched_candidate *c, int n, uint64_t *seed,
                int *order_p);

/* A job asking for want GPUs (`gpus = N`): how many candidates, taken whole in the order
 * sched_place gave (order[0..n)), are needed for want GPUs: the shortest prefix whose ngpus
 * add up to want. 0 when all n together have fewer (the job is refused: all or nothing). */
int sched_gpus_prefix(const struct sched_candidate *c, const int *order, int n, int want);

/* ---- Pools that scale (docs/pool.md): probe a bounded sample, in rounds ----------------------
 * A job does not probe every server of a large pool: it probes rounds of d servers at once and
 * places itself among those that answered (all rounds so far), probing the next round only when
 * they cannot take it. spread and pack take the rounds from a random permutation of the pool
 * (spread: the least loaded of d random servers, the "power of d choices"; pack: the fullest
 * that fits among them), first takes them in the list's order (its choice is then the same as
 * probing all: the first server in the list that would take the job). */

/* The order in which to probe the n servers of a pool: 0..n-1 for first, a uniform random
 * permutation from *seed (advanced) for spread and pack, written to order_p[] (room for n). */
void sched_probe_order(enum sched_policy policy, int n, uint64_t *seed, int *order_p);

/* Servers per probe round for a job of want GPUs in a pool of n: sample (the configuration's
 * probe_sample; 0 = all n at once), at least 2 x want so that one round usually has room for
 * the job, at most n. */
int sched_probe_round(int sample, int want, int n);

/* How long a round still waits for the servers that have not answered once those that have can
 * take the job: first_fit_ms (from the round's start to the answer that made the job fit) times
 * SCHED_HEDGE_FACTOR, at least SCHED_HEDGE_MIN_MS. A server that slow is passed over as one that
 * did not answer in time, so one slow server does not hold every job for the probe's timeout. */
#define SCHED_HEDGE_FACTOR 4
#define SCHED_HEDGE_MIN_MS 50
double sched_hedge_ms(double first_fit_ms);

#endif
