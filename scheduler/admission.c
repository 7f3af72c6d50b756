#include "scheduler/admission.h"

#include <stdio.h>

uint64_t sched_grant_quota(uint64_t tenant_quota, uint64_t requested)
{
    if (tenant_quota == 0)
        return requested;
    if (requested == 0)
        return tenant_quota;
    return requested < tenant_quota ? requested : tenant_quota;
}

bool sched_quota_fits(uint64_t quota, uint64_t used, uint64_t size)
{
    return quota == 0 || (size <= quota && used <= quota - size);
}

static double gib(uint64_t bytes)
{
    return bytes / 1073741824.0;
}

enum sched_verdict sched_admit(const struct sched_request *req, const struct sched_gpu *gpus, int ngpus,
                 char *why, size_t why_len)
{
    if (req->max_sessions > 0 && req->tenant_sessions >= req->max_sessions) {
        snprintf(why, why_len,
                 "session limit reached: tenant '%s' already has %d session(s) (max_sessions = "
                 "%d)",
                 req->tenant, req->tenant_sessions, req->max_sessions);
        return SCHED_SESSION_LIMIT;
    }
    for (int i = 0; i < ngpus && req->quota > 0; i++) {
        const struct sched_gpu *g = &gpus[i];
        uint64_t left = g->total_mem > g->reserved ? g->total_mem - g->reserved : 0;
        if (req->quota <= left)
            continue;
        snprintf(why, why_len,
                 "insufficient GPU memory: tenant '%s' needs a %.2f GiB quota but GPU %d has "
                 "%.2f GiB left (%.2f GiB total, %.2f GiB reserved by %d session(s))",
                 req->tenant, gib(req->quota), i, gib(left), gib(g->total_mem),
                 gib(g->reserved), g->sessions);
        return SCHED_NO_MEMORY;
    }
    return SCHED_ADMIT;
}
