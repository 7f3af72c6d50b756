#include "scheduler/placement.h"

#include <stdlib.h>
#include <string.h>

static const char *const policy_names[] = {
    [SCHED_SPREAD] = "spread", [SCHED_PACK] = "pack", [SCHED_FIRST] = "first"};

bool sched_policy_parse(const char *name, enum sched_policy *policy_p)
{
    for (unsigned i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]); i++)
        if (name != NULL && strcmp(name, policy_names[i]) == 0) {
            *policy_p = (enum sched_policy)i;
            return true;
        }
    return false;
}

const char *sched_policy_name(enum sched_policy policy)
{
    return (unsigned)policy < sizeof(policy_names) / sizeof(policy_names[0]) ? policy_names[policy]
                                                                             : "?";
}

/* Memory decides first (in whole thousandths, so that near-equal servers tie and the random
 * order spreads them), then sessions, then utilization in percent. */
double sched_load(const struct sched_candidate *c)
{
    uint64_t reserved = c->total_mem > c->free_mem ? c->total_mem - c->free_mem : 0;
    double mem = c->total_mem ? (double)(reserved * 1000 / c->total_mem) : 0;
    double util = c->utilization < 0 ? 0 : c->utilization > 1 ? 1 : c->utilization;

    return mem * 1e6 + (double)(c->sessions < 999 ? c->sessions : 999) * 1e3 +
           (double)(int)(util * 100);
}

static uint64_t next_random(uint64_t *seed)
{
    uint64_t x = *seed ? *seed : 0x9e3779b97f4a7c15ull;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *seed = x;
    return x;
}

int sched_place(enum sched_policy policy, const struct sched_candidate *c, int n, uint64_t *seed,
                int *order_p)
{
    double *key = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    uint64_t *tie = malloc(sizeof(uint64_t) * (size_t)(n > 0 ? n : 1));
    int count = 0;

    for (int i = 0; key != NULL && tie != NULL && i < n; i++) {
        if (!c[i].answered || !c[i].fits)
            continue;
        /* Insertion by (key, tie): spread wants the lowest load, pack the highest, first the
         * list order (its key is the index, so no ties). */
        double k = policy == SCHED_FIRST  ? (double)i
                   : policy == SCHED_PACK ? -sched_load(&c[i])
                                          : sched_load(&c[i]);
        uint64_t t = policy == SCHED_FIRST ? 0 : next_random(seed);
        int j = count++;
        while (j > 0 && (key[j - 1] > k || (key[j - 1] == k && tie[j - 1] > t))) {
            key[j] = key[j - 1];
            tie[j] = tie[j - 1];
            order_p[j] = order_p[j - 1];
            j--;
        }
        key[j] = k;
        tie[j] = t;
        order_p[j] = i;
    }
    free(key);
    free(tie);
    return count;
}

int sched_gpus_prefix(const struct sched_candidate *c, const int *order, int n, int want)
{
    uint64_t have = 0;

    for (int k = 0; k < n; k++) {
        have += c[order[k]].ngpus;
        if (have >= (uint64_t)(want > 0 ? want : 1))
            return k + 1;
    }
    return 0;
}

void sched_probe_order(enum sched_policy policy, int n, uint64_t *seed, int *order_p)
{
    for (int i = 0; i < n; i++)
        order_p[i] = i;
    if (policy == SCHED_FIRST)
        return;
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(next_random(seed) % (uint64_t)(i + 1)), t = order_p[i];
        order_p[i] = order_p[j];
        order_p[j] = t;
    }
}

int sched_probe_round(int sample, int want, int n)
{
    int d = sample;

    if (sample <= 0 || n <= 0)
        return n > 0 ? n : 0;
    if (want > 0 && d < 2 * want)
        d = 2 * want;
    return d < n ? d : n;
}

double sched_hedge_ms(double first_fit_ms)
{
    double wait = first_fit_ms * SCHED_HEDGE_FACTOR;

    return wait > SCHED_HEDGE_MIN_MS ? wait : SCHED_HEDGE_MIN_MS;
}
