#include "scheduler/share.h"

#include <string.h>

static uint32_t weight_of(const struct sched_tenant *t)
{
    return t->weight ? t->weight : 1;
}

/* Give `room` to the members of one class by weight, holding each to its cap; returns what
 * is left over (when every member is capped below its weighted share). */
static double water_fill(const struct sched_tenant *t, int n, const bool *member, double room,
                         double *share)
{
    bool fixed[SCHED_MAX_TENANTS] = {0};
    bool again = true;

    while (again && room > 0) {
        double wsum = 0;
        again = false;
        for (int i = 0; i < n; i++)
            if (member[i] && !fixed[i])
                wsum += weight_of(&t[i]);
        if (wsum == 0)
            break;
        for (int i = 0; i < n && !again; i++) {
            double want = room * weight_of(&t[i]) / wsum, cap = t[i].cap_permille / 1000.0;
            if (!member[i] || fixed[i] || t[i].cap_permille == 0 || want <= cap)
                continue;
            share[i] = cap; /* capped below its weighted part: fix it, divide the rest again */
            fixed[i] = true;
            room -= cap;
            again = true;
        }
        if (again)
            continue;
        for (int i = 0; i < n; i++)
            if (member[i] && !fixed[i])
                share[i] = room * weight_of(&t[i]) / wsum;
        return 0;
    }
    return room > 0 ? room : 0;
}

void sched_shares(const struct sched_tenant *tenants, int ntenants, const bool *active,
                  double *share)
{
    bool guaranteed[SCHED_MAX_TENANTS], best_effort[SCHED_MAX_TENANTS];
    double left;

    if (ntenants > SCHED_MAX_TENANTS)
        ntenants = SCHED_MAX_TENANTS;
    for (int i = 0; i < ntenants; i++) {
        share[i] = 0;
        guaranteed[i] = active[i] && !tenants[i].best_effort;
        best_effort[i] = active[i] && tenants[i].best_effort;
    }
    left = water_fill(tenants, ntenants, guaranteed, 1.0, share);
    water_fill(tenants, ntenants, best_effort, left, share);
}

uint64_t sched_cap_room(const struct sched_tenant *t, uint64_t used_ns, uint64_t window_ns)
{
    uint64_t cap;

    if (t->cap_permille == 0)
        return UINT64_MAX;
    cap = window_ns / 1000 * t->cap_permille;
    return used_ns < cap ? cap - used_ns : 0;
}

/* a before b in virtual time (wrap-safe). */
static bool vt_before(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

/* Per tenant: whether it has an active session, and how many. */
static void tenant_activity(int ntenants, const struct sched_session *sessions, int nsessions,
                            bool *active, int *nactive)
{
    for (int k = 0; k < ntenants; k++) {
        active[k] = false;
        nactive[k] = 0;
    }
    for (int i = 0; i < nsessions; i++) {
        const struct sched_session *s = &sessions[i];
        if (s->tenant < 0 || s->tenant >= ntenants || !(s->active || s->wants))
            continue;
        active[s->tenant] = true;
        nactive[s->tenant]++;
    }
}

void sched_session_shares(const struct sched_tenant *tenants, int ntenants,
                          const struct sched_session *sessions, int nsessions, double *share)
{
    bool active[SCHED_MAX_TENANTS];
    int nactive[SCHED_MAX_TENANTS];
    double tshare[SCHED_MAX_TENANTS];

    if (ntenants > SCHED_MAX_TENANTS)
        ntenants = SCHED_MAX_TENANTS;
    tenant_activity(ntenants, sessions, nsessions, active, nactive);
    sched_shares(tenants, ntenants, active, tshare);
    for (int i = 0; i < nsessions; i++) {
        const struct sched_session *s = &sessions[i];
        share[i] = 0;
        if (s->tenant >= 0 && s->tenant < ntenants && (s->active || s->wants))
            share[i] = tshare[s->tenant] / nactive[s->tenant];
    }
}

int sched_pick(const struct sched_tenant *tenants, int ntenants,
               const struct sched_session *sessions, int nsessions,
               const struct sched_params *params, double *share)
{
    uint64_t used[SCHED_MAX_TENANTS] = {0};
    double local[nsessions > 0 ? nsessions : 1];
    int best = -1, owner = -1;

    if (ntenants > SCHED_MAX_TENANTS)
        ntenants = SCHED_MAX_TENANTS;
    if (share == NULL)
        share = local;
    sched_session_shares(tenants, ntenants, sessions, nsessions, share);
    for (int i = 0; i < nsessions; i++)
        if (sessions[i].tenant >= 0 && sessions[i].tenant < ntenants)
            used[sessions[i].tenant] += sessions[i].used_ns;
    for (int i = 0; i < nsessions; i++) {
        const struct sched_session *s = &sessions[i];
        if (!s->wants || share[i] <= 0 ||
            sched_cap_room(&tenants[s->tenant], used[s->tenant], params->window_ns) == 0)
            continue;
        if (s->owner)
            owner = i;
        if (best < 0 || vt_before(s->vtime, sessions[best].vtime))
            best = i;
    }
    if (owner >= 0 && owner != best &&
        (double)(int64_t)(sessions[owner].vtime - sessions[best].vtime) <
            (double)params->quantum_ns / share[owner])
        return owner;
    return best;
}

uint64_t sched_join_vtime(const struct sched_session *sessions, int nsessions, int joining,
                          double share, const struct sched_params *params)
{
    uint64_t own = sessions[joining].vtime, least = 0, lag;
    bool any = false;

    for (int i = 0; i < nsessions; i++) {
        if (i == joining || !sessions[i].wants)
            continue;
        if (!any || vt_before(sessions[i].vtime, least))
            least = sessions[i].vtime;
        any = true;
    }
    if (!any)
        return own;
    if (share < SCHED_MIN_SHARE_PPM / 1e6)
        share = SCHED_MIN_SHARE_PPM / 1e6;
    lag = (uint64_t)((double)params->quantum_ns / share);
    return vt_before(own, least - lag) ? least - lag : own;
}

bool sched_light_pass(const struct sched_light *l, const struct sched_params *params)
{
    double share = l->share < SCHED_MIN_SHARE_PPM / 1e6 ? SCHED_MIN_SHARE_PPM / 1e6 : l->share;

    if (l->avg_ns == 0 ? l->inflight != 0 : (uint64_t)l->inflight + 1 > SCHED_LIGHT_NS / l->avg_ns)
        return false;
    return (double)(int64_t)(l->vtime - l->ref_vtime) < (double)params->quantum_ns / share;
}

uint64_t sched_vtime_charge(uint64_t ns, uint32_t share_ppm)
{
    if (share_ppm < SCHED_MIN_SHARE_PPM)
        share_ppm = SCHED_MIN_SHARE_PPM;
    return (uint64_t)((double)ns * 1e6 / share_ppm);
}
