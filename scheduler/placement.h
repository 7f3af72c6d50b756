/* Pool placement: which gpu-server of a pool a job goes to.
 *
 * Pure functions over what each candidate's probe answered (client/pool.c gathers it), so every
 * policy is unit-tested without sockets. The client tries the servers in the order returned and
 * moves to the next on a refusal or a failure. */
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

#endif
