/* A pool of gpu-servers: the entries of the client's configuration resolved to servers (a DNS
 * name with several addresses is several servers), probed in parallel with a bounded wait
 * (server/probe.h), placed by policy (scheduler/placement.h) and tried in that order.
 * Shared by libcuda.so.1 (cli_pool_connect, at cuInit) and the rgpu tool (status, top, ping). */
#ifndef RGPU_CLIENT_POOL_H
#define RGPU_CLIENT_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "client/session/config.h"
#include "proto/frame.h"

struct cli_server {
    char name[256];          /* the pool entry it came from */
    char addr[80];           /* "ip:port" or "[ip6]:port"; "" when the name did not resolve */
    bool probed;             /* a probe was started (or it did not resolve); a large pool is
                                probed in rounds, and the rounds may end before reaching it */
    bool answered;           /* its probe was answered (reply set) */
    bool late;               /* not waited for once the job fitted elsewhere (the hedge): probed
                                again before the next round if those that answered fail */
    bool unprobed;           /* it closed the connection at the probe: an older server that does
                                not know probes; tried after those that answered */
    int busy_retry_ms;       /* refused for load (server full, busy): retry after this (0: not) */
    char why[256];           /* else why not: unreachable, refused, no answer in time */
    Rgpu__ProbeReply *reply; /* the answer (owned) */
    double rtt_ms;           /* connect to answer */
};

struct cli_pool {
    struct cli_server *servers;
    int n;
    int cap; /* room in servers (grows by doubling: a pool of 10,000 resolves in linear time) */
    int *by_addr;    /* open addressing over servers[].addr, -1 = empty: duplicates are found in
                        constant time while resolving */
    int by_addr_cap; /* a power of two, at least twice n */
};

/* Resolve every entry (a name without a port gets CLI_DEFAULT_PORT). Names that do not
 * resolve stay as servers with an empty addr and the reason in why. */
rg_status_t cli_pool_resolve(const struct cli_conf *conf, struct cli_pool *pool);
void cli_pool_free(struct cli_pool *pool);

/* Probe every resolved server (PROBE_INFLIGHT open at once at most, one thread, nonblocking);
 * returns when all answered or timeout_ms passed (a server still silent then is marked so).
 * For rgpu status and rgpu-slurm-licenses; a job's start probes in rounds (docs/pool.md). */
void cli_pool_probe(struct cli_pool *pool, const struct cli_conf *conf, int timeout_ms);

/* The probed pool in the order the configuration's policy would try it: indices of the servers
 * that answered and would admit the job, best first, into order_p (room for pool->n). */
int cli_pool_order(const struct cli_pool *pool, const struct cli_conf *conf, int *order_p);

/* One probe on a connection of its own, kept open for Echo frames (rgpu ping). On RG_OK the
 * connection and the answer are the caller's (rgpu__probe_reply__free_unpacked). */
rg_status_t cli_probe_open(const char *addr, const struct cli_conf *conf, int timeout_ms,
                           struct transport_conn **conn_p, Rgpu__ProbeReply **reply_p, char *why,
                           size_t why_len);

/* Try one server: connect and hand-shake a session. CUDA_SUCCESS, or a failure with the
 * reason (for the one error that names every server tried) in why. */
typedef int (*cli_pool_try_fn)(const char *addr, const struct cli_conf *conf, char *why,
                               size_t why_len);

/* The client's start (from cuInit): with one server, try it; with several, probe them in
 * rounds of probe_sample servers (sched_probe_order, sched_probe_round: a random sample for
 * spread and pack, the list's order for first; the next round only when none of those that
 * answered so far took the job), order them by the policy and try each in turn until one takes
 * the job. Logs one info line naming
 * the chosen server and why, or one error naming every server tried and why each could not
 * take the job. Returns try_one's result for the last server tried (0 = started). */
int cli_pool_connect(const struct cli_conf *conf, cli_pool_try_fn try_one, int fail_result);

/* A server placement chose for a job that asks for several GPUs, and how many it has. */
struct cli_placed {
    char addr[80];
    int ngpus;
};

/* A job asking for want GPUs (`gpus = N`): probe the pool in rounds until the answers have room
 * for want GPUs (or all were probed, or probe_timeout_ms passed) and order it by the policy; every
 * server that would admit the job on all its GPUs, best first, into out (room for cap): the
 * caller takes them whole in that order until it has want GPUs (those after stand by for one
 * that fails). Returns how many, or 0 when they have fewer than want GPUs together, with one
 * reason naming every server left out in why (the job is then refused: all or nothing). */
int cli_pool_place_gpus(const struct cli_conf *conf, int want, struct cli_placed *out, int cap,
                        char *why, size_t why_len);

#endif
