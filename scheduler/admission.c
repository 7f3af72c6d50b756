#include "scheduler/admission.h"

#include <stdio.h>

bool sched_quota_fits(uint64_t quota, uint64_t used, uint64_t size)
{
    return quota == 0 || (size <= quota && used <= quota - size);
}

static double gib(uint64_t bytes)
{
    return bytes / 1073741824.0;
}

enum sched_verdict sched_request_quota(const char *tenant, uint64_t tenant_quota, uint64_t asked,
                                       double share, uint64_t smallest_gpu, uint64_t *quota_p,
                                       char *why, size_t why_len)
{
    uint64_t want = asked;
    char from_share[96] = "";

    if (asked != 0 && share != 0) {
        snprintf(why, why_len,
                 "the client asked for both a memory size and a share of the GPU: "
                 "ask for one (--memory or --share)");
        return SCHED_NOT_ENTITLED;
    }
    if (share != 0) {
        if (!(share > 0 && share <= 1)) { /* NaN fails here too */
            snprintf(why, why_len,
                     "a share of the GPU's memory must be above 0 and at most 1 "
                     "(100%%), not %g",
                     share);
            return SCHED_NOT_ENTITLED;
        }
        want = (uint64_t)(share * (double)smallest_gpu);
        want = want > 0 ? want : 1;
        snprintf(from_share, sizeof(from_share), " (%.0f%% of a %.2f GiB GPU)", share * 100,
                 gib(smallest_gpu));
    }
    if (want == 0) {
        *quota_p = tenant_quota;
        return SCHED_ADMIT;
    }
    if (tenant_quota != 0 && want > tenant_quota) {
        snprintf(why, why_len,
                 "not permitted: tenant '%s' may reserve at most %.2f GiB of each GPU (its "
                 "mem_quota) and the job asked for %.2f GiB%s",
                 tenant, gib(tenant_quota), gib(want), from_share);
        return SCHED_NOT_ENTITLED;
    }
    *quota_p = want;
    return SCHED_ADMIT;
}

enum sched_verdict sched_admit(const struct sched_request *req, const struct sched_gpu *gpus,
                               int ngpus, char *why, size_t why_len)
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
                 req->tenant, gib(req->quota), i, gib(left), gib(g->total_mem), gib(g->reserved),
                 g->sessions);
        return SCHED_NO_MEMORY;
    }
    return SCHED_ADMIT;
}
