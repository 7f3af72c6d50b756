/* Admission of a session onto a server's GPUs, and memory quota arithmetic.
 *
 * Pure functions over counts the caller gathers (from the shared session table, under its
 * lock), so every refusal reason is unit-tested without processes or sockets. */
#ifndef RGPU_SCHEDULER_ADMISSION_H
#define RGPU_SCHEDULER_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One GPU as admission sees it. */
struct sched_gpu {
    uint64_t total_mem; /* bytes on the card */
    uint64_t reserved;  /* sum of the quotas of the sessions admitted on it */
    int sessions;       /* how many sessions are admitted on it */
};

struct sched_request {
    const char *tenant;
    uint64_t quota;       /* bytes this session reserves on each GPU it uses; 0 = none */
    int tenant_sessions;  /* sessions the tenant already has on this server */
    int max_sessions;     /* the tenant's limit; 0 = none */
};

/* The quota a session is granted: the tenant's quota, or what the client asked for when that
 * is smaller (0 from either side means "no limit" from that side). */
uint64_t sched_grant_quota(uint64_t tenant_quota, uint64_t requested);

enum sched_verdict {
    SCHED_ADMIT = 0,
    SCHED_SESSION_LIMIT, /* the tenant has max_sessions sessions already */
    SCHED_NO_MEMORY,     /* the quota does not fit a GPU's unreserved memory */
};

/* Admit when the tenant is under its session limit and the quota fits into what is left
 * (total - reserved) of every GPU in gpus[]. SCHED_ADMIT, or the refusal with its reason (for
 * the client's Welcome and the log) written to why. */
enum sched_verdict sched_admit(const struct sched_request *req, const struct sched_gpu *gpus, int ngpus,
                 char *why, size_t why_len);

/* Whether size more bytes fit under quota with used already taken (0 quota = no limit), without
 * overflow. */
bool sched_quota_fits(uint64_t quota, uint64_t used, uint64_t size);

#endif
