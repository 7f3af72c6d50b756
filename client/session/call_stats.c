/* RGPU_STATS=1: at exit, what went on the wire, per operation: how many calls waited for a
 * reply (and for how long in all), how many went asynchronously. A tuning aid: it shows which
 * synchronous calls an application pays round trips for. Counted under the session lock. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "client/session/call.h"

static struct op_stats {
    uint64_t sync, async;
    double wait_us;
} stats[PROTO_OP_COUNT];
static bool enabled;
static uint64_t cc_hits, cc_misses; /* compute_cache.c: NVRTC's compile cache */

__attribute__((constructor)) static void call_stats_init(void)
{
    const char *env = getenv("RGPU_STATS");

    enabled = env != NULL && env[0] == '1';
}

double cli_stats_now_us(void)
{
    struct timespec ts;

    if (!enabled)
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

void cli_stats_count(unsigned op, bool sync, double since_us)
{
    if (!enabled || op >= PROTO_OP_COUNT)
        return;
    if (!sync) {
        stats[op].async++;
        return;
    }
    stats[op].sync++;
    stats[op].wait_us += cli_stats_now_us() - since_us;
}

void cli_stats_note_compute_cache(bool hit)
{
    if (enabled)
        __atomic_add_fetch(hit ? &cc_hits : &cc_misses, 1, __ATOMIC_RELAXED);
}

static int by_wait(const void *a, const void *b)
{
    const struct op_stats *x = &stats[*(const unsigned *)a], *y = &stats[*(const unsigned *)b];

    return x->wait_us < y->wait_us ? 1 : x->wait_us > y->wait_us ? -1 : 0;
}

__attribute__((destructor)) static void call_stats_print(void)
{
    unsigned order[PROTO_OP_COUNT], n = 0;

    if (!enabled)
        return;
    for (unsigned op = 0; op < PROTO_OP_COUNT; op++)
        if (stats[op].sync + stats[op].async > 0)
            order[n++] = op;
    qsort(order, n, sizeof(*order), by_wait);
    fprintf(stderr, "rgpu stats: %-26s %10s %12s %10s\n", "operation", "sync", "wait ms", "async");
    for (unsigned i = 0; i < n; i++)
        fprintf(stderr, "rgpu stats: %-26s %10llu %12.3f %10llu\n", proto_op_name(order[i]),
                (unsigned long long)stats[order[i]].sync, stats[order[i]].wait_us / 1e3,
                (unsigned long long)stats[order[i]].async);
    if (cc_hits + cc_misses > 0)
        fprintf(stderr, "rgpu stats: compute cache (NVRTC): %llu hits, %llu misses\n",
                (unsigned long long)cc_hits, (unsigned long long)cc_misses);
}
