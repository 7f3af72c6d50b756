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
    uint64_t quota;      /* bytes this session reserves on each GPU it uses; 0 = none */
    int tenant_sessions; /* sessions the tenant already has on this server */
    int max_sessions;    /* the tenant's limit; 0 = none */
};

enum sched_verdict {
    SCHED_ADMIT = 0,
    SCHED_SESSION_LIMIT, /* the tenant has max_sessions sessions already */
    SCHED_NO_MEMORY,     /* the quota does not fit a GPU's unreserved memory */
    SCHED_NOT_ENTITLED,  /* the client asked for more memory than the tenant may reserve */
};

/* The quota a session is granted from what its client asked of each GPU's memory: asked bytes
 * (0 = not said; `rgpu run --memory`, mem_quota) or a share of the card (0 = not said; `rgpu run
 * --share`, mem_share: that fraction of the smallest GPU it would get, smallest_gpu bytes), never
 * both. Nothing asked: the tenant's quota (0 = none). Asked: exactly that, and refused
 * (SCHED_NOT_ENTITLED, the reason in why) above the tenant's quota, or for a share outside (0, 1]
 * -- never cut down silently. SCHED_ADMIT with the quota in *quota_p. */
enum sched_verdict sched_request_quota(const char *tenant, uint64_t tenant_quota, uint64_t asked,
                                       double share, uint64_t smallest_gpu, uint64_t *quota_p,
                                       char *why, size_t why_len);

/* Admit when the tenant is under its session limit and the quota fits into what is left
 * (total - reserved) of every GPU in gpus[]. SCHED_ADMIT, or the refusal with its reason (for
 * the client's Welcome and the log) written to why. */
enum sched_verdict sched_admit(const struct sched_request *req, const struct sched_gpu *gpus,
                               int ngpus, char *why, size_t why_len);

/* Whether size more bytes fit under quota with used already taken (0 quota = no limit), without
 * overflow. */
bool sched_quota_fits(uint64_t quota, uint64_t used, uint64_t size);

#endif
