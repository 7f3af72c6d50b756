/* The supervisor's HTTP endpoints (libevent evhttp): /metrics in Prometheus text format,
 * /status in JSON and /healthz, both read from the shared session table. Per session and per
 * tenant: memory used and quota, GPU time and share of the GPU over the last second, launches,
 * bytes each way, calls, errors, time held by the compute gate; per GPU: memory (total, reserved by
 * quotas, used) and utilization (measured kernel time over the last second). */
#ifndef RGPU_SERVER_METRICS_H
#define RGPU_SERVER_METRICS_H

#include <event2/buffer.h>
#include <event2/event.h>

#include "common/status.h"
#include "server/session_table.h"

struct srv_metrics;

/* The version of the JSON documents of /status and of `rgpu status -o json` and `rgpu ping -o
 * json` (docs/status-schema.md): raised when a field changes meaning or goes; new fields may
 * appear within a version. */
#define SRV_STATUS_SCHEMA 1

/* Where to serve ("ADDR:PORT"; port 0 picks one, logged as "metrics on http://..."; "" or NULL:
 * not served):
 *   listen: /metrics, /status and /healthz. With a token ("" = none) every request but /healthz
 *           must send "Authorization: Bearer TOKEN" (else 401); without one, listen must be a
 *           loopback address (RG_ERR_INVALID otherwise), since /status names every tenant's
 *           sessions, peers and programs.
 *   public_listen: /metrics and /healthz to anyone, no token (for a cluster's Prometheus and
 *           probes); never /status.
 * /healthz answers "ok" while the supervisor's event loop runs, and says nothing else. Each
 * listener holds at most 32 connections at once (more wait in the kernel's backlog), each
 * closed after 10 s idle or slow. */
struct srv_metrics_conf {
    const char *listen;
    const char *token;
    const char *public_listen;
};

rg_status_t srv_metrics_start(struct event_base *base, const struct srv_metrics_conf *conf,
                              struct srv_table *table, const char *server_name,
                              struct srv_metrics **m_p);
void srv_metrics_stop(struct srv_metrics *m);

/* The two documents (for the handlers and the tests). */
void srv_metrics_prometheus(struct srv_metrics *m, struct evbuffer *out);
void srv_metrics_json(struct srv_metrics *m, struct evbuffer *out);

#endif
