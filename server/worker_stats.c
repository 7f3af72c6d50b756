/* RGPU_WORKER_STATS=1 in gpu-server's environment: each worker logs at the session's end, per
 * operation, how many calls it executed and the time spent in their handlers (the driver call
 * and what surrounds it), and how much of the session's busy time went outside the handlers
 * (receiving, decoding, replying). A tuning aid for the launch path. */
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "proto/ops.h"
#include "server/server.h"

static struct {
    uint64_t n, ns;
} per_op[PROTO_OP_COUNT];
static uint64_t first_ns, calls_ns;
static int enabled = -1;

uint64_t srv_worker_stats_now(void)
{
    struct timespec ts;

    if (enabled < 0) {
        const char *env = getenv("RGPU_WORKER_STATS");
        enabled = env != NULL && env[0] == '1';
    }
    if (!enabled)
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void srv_worker_stats_add(unsigned op, uint64_t since_ns)
{
    uint64_t now;

    if (since_ns == 0 || op >= PROTO_OP_COUNT)
        return;
    now = srv_worker_stats_now();
    if (first_ns == 0)
        first_ns = since_ns;
    per_op[op].n++;
    per_op[op].ns += now - since_ns;
    calls_ns += now - since_ns;
}

void srv_worker_stats_report(void)
{
    uint64_t span = first_ns != 0 ? srv_worker_stats_now() - first_ns : 0;

    if (span == 0)
        return;
    rg_info("worker stats: %.3f s from the first call, %.3f s in handlers", span / 1e9,
            calls_ns / 1e9);
    for (unsigned op = 0; op < PROTO_OP_COUNT; op++)
        if (per_op[op].n > 0)
            rg_info("worker stats: %-24s %10llu calls %10.3f us each", proto_op_name(op),
                    (unsigned long long)per_op[op].n, per_op[op].ns / 1e3 / per_op[op].n);
}
