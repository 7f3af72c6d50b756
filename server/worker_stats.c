/* RGPU_WORKER_STATS=1 in gpu-server's environment: each worker logs at the session's end, per
 * operation, how many calls it executed and the time spent in their handlers (the driver call
 * and what surrounds it), and how much of the session's busy time went outside the handlers
 * (receiving, decoding, replying). A tuning aid for the launch path. It also logs which
 * operations raised the worker's peak resident memory, and by how much: the peak is read after
 * each call, and a rise is charged to that call (its receiving and decoding included). */
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "common/log.h"
#include "proto/ops.h"
#include "server/server.h"

static struct {
    uint64_t n, ns;
    long peak_kb; /* rises of the process's peak RSS charged to this operation */
} per_op[PROTO_OP_COUNT];
static uint64_t first_ns, calls_ns;
static long peak_kb, first_peak_kb;
static int enabled = -1;

/* The process's peak RSS so far, in KiB (0 if unknown). */
static long peak_now_kb(void)
{
    struct rusage ru;

    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

static void charge_peak(unsigned op)
{
    long kb = peak_now_kb();

    if (kb > peak_kb) {
        per_op[op].peak_kb += kb - peak_kb;
        peak_kb = kb;
    }
}

uint64_t srv_worker_stats_now(void)
{
    struct timespec ts;

    if (enabled < 0) {
        const char *env = getenv("RGPU_WORKER_STATS");
        enabled = env != NULL && env[0] == '1';
        peak_kb = enabled ? peak_now_kb() : 0; /* what the worker held before its first call */
        first_peak_kb = peak_kb;
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
    charge_peak(op);
}

void srv_worker_stats_report(void)
{
    uint64_t span = first_ns != 0 ? srv_worker_stats_now() - first_ns : 0;

    if (span == 0)
        return;
    rg_info("worker stats: %.3f s from the first call, %.3f s in handlers; peak RSS %.1f MiB "
            "before teardown, %.1f MiB before the first call",
            span / 1e9, calls_ns / 1e9, peak_now_kb() / 1024.0, first_peak_kb / 1024.0);
    for (unsigned op = 0; op < PROTO_OP_COUNT; op++)
        if (per_op[op].n > 0)
            rg_info("worker stats: %-24s %10llu calls %10.3f us each", proto_op_name(op),
                    (unsigned long long)per_op[op].n, per_op[op].ns / 1e3 / per_op[op].n);
    for (unsigned op = 0; op < PROTO_OP_COUNT; op++)
        if (per_op[op].peak_kb >= 1024)
            rg_info("worker stats: %-24s raised the peak RSS by %.1f MiB", proto_op_name(op),
                    per_op[op].peak_kb / 1024.0);
}
