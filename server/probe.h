/* The probe: a client (the pool placement of client/session/pool.c, `rgpu status`, `rgpu ping`)
 * asks a server, before any session, what a session of its tenant could get here. Only a valid
 * tenant token is answered, and only with what that tenant may know: its own sessions, reservations
 * and use, and per GPU counts over all tenants that name nobody (memory still unreserved,
 * sessions, utilization). Never another tenant's name or figures. */
#ifndef RGPU_SERVER_PROBE_H
#define RGPU_SERVER_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

struct srv_config;
struct srv_session;
struct srv_table;
struct srv_tenant;

/* A GPU this server serves. */
struct srv_probe_gpu {
    int index; /* driver ordinal */
    char name[96];
    uint64_t total_mem;
};

/* The reply's figures (status 0), read from the session table under its lock; table NULL (no
 * shared table) answers totals only. tenant: the authenticated tenant, NULL when the server
 * has none. asked, share: the quota or the share of each GPU's memory the job would ask for
 * (refused above the tenant's quota: admit false). gpu_msgs and gpu_ptrs (ngpus each) hold
 * the per-GPU messages the reply points to; why (why_len) holds its why_not. */
void srv_probe_answer(struct srv_table *table, const struct srv_tenant *tenant, uint64_t asked,
                      double share, const struct srv_probe_gpu *gpus, int ngpus,
                      Rgpu__ProbeGpu *gpu_msgs, Rgpu__ProbeGpu **gpu_ptrs, char *why,
                      size_t why_len, Rgpu__ProbeReply *reply);

/* The GPUs this server serves (SRV_MAX_DEVICES at most), into gpus; their count, or -1 when
 * the driver cannot be opened. From the session table when an earlier probe recorded them,
 * else from the driver (s->drv; then recorded), so that a probe costs a driver start once per
 * server, not once per probe. */
int srv_probe_gpus(struct srv_session *s, const struct srv_config *cfg, struct srv_probe_gpu *gpus);

/* The worker's hook where the first frame of a connection is read: that frame (hdr, message in
 * s->msg_buf) is a Probe. Authenticate it, answer, then serve Echo frames until the client
 * leaves. Returns the worker's exit status. */
int srv_probe_serve(struct srv_session *s, const struct srv_config *cfg,
                    const struct proto_frame_hdr *hdr);

#endif
