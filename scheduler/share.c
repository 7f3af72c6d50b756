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

/* The tenant that should hold the GPU, or -1. */
static int pick_tenant(const struct sched_tenant *t, int nt, const bool *wants,
                       const uint64_t *used, int owner_tenant, const struct sched_params *p,
                       const double *share)
{
    int best = -1;
    double best_norm = 0, owner_norm = -1;

    for (int i = 0; i < nt; i++) {
        double norm;
        if (!wants[i] || share[i] <= 0 || sched_cap_room(&t[i], used[i], p->window_ns) == 0)
            continue;
        norm = (double)used[i] / share[i];
        if (i == owner_tenant)
            owner_norm = norm;
        if (best < 0 || norm < best_norm) {
            best = i;
            best_norm = norm;
        }
    }
    if (owner_norm >= 0 && owner_norm < best_norm + (double)p->quantum_ns)
        return owner_tenant;
    return best;
}

int sched_pick(const struct sched_tenant *tenants, int ntenants,
               const struct sched_session *sessions, int nsessions,
               const struct sched_params *params, double *share)
{
    bool active[SCHED_MAX_TENANTS] = {0}, wants[SCHED_MAX_TENANTS] = {0};
    uint64_t used[SCHED_MAX_TENANTS] = {0};
    double local[SCHED_MAX_TENANTS];
    int owner_tenant = -1, tenant, pick = -1;

    if (ntenants > SCHED_MAX_TENANTS)
        ntenants = SCHED_MAX_TENANTS;
    if (share == NULL)
        share = local;
    for (int i = 0; i < nsessions; i++) {
        const struct sched_session *s = &sessions[i];
        if (s->tenant < 0 || s->tenant >= ntenants)
            continue;
        active[s->tenant] |= s->active || s->wants;
        wants[s->tenant] |= s->wants;
        used[s->tenant] += s->used_ns;
        if (s->owner && s->wants)
            owner_tenant = s->tenant;
    }
    sched_shares(tenants, ntenants, active, share);
    tenant = pick_tenant(tenants, ntenants, wants, used, owner_tenant, params, share);
    for (int i = 0; i < nsessions && tenant >= 0; i++) {
        const struct sched_session *s = &sessions[i];
        if (s->tenant != tenant || !s->wants)
            continue;
        if (s->owner)
            return i;
        if (pick < 0 || s->used_ns < sessions[pick].used_ns)
            pick = i;
    }
    return pick;
}
