/* The probe (server/probe.h): the answer from the session table, and the echo that follows. */
#include "server/probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "common/log.h"
#include "scheduler/admission.h"
#include "server/peer_gate.h"
#include "server/server.h"
#include "server/session.h"
#include "server/session_table.h"
#include "server/tenant_config.h"

#define ECHO_IDLE_S 10 /* an echo connection silent this long ends */

static int table_tenant(const struct srv_table *t, const struct srv_tenant *tenant)
{
    for (int i = 0; tenant != NULL && i < t->ntenants; i++)
        if (strcmp(t->tenants[i].name, tenant->name) == 0)
            return i;
    return -1;
}

/* Busy fraction of GPU g in the current compute-gate window, all sessions together. */
static double utilization(const struct srv_table *t, int g, uint64_t now)
{
    uint64_t epoch = now / t->window_ns, into = now - epoch * t->window_ns, used = 0;

    for (int i = 0; i < atomic_load(&t->hiwater); i++) {
        const struct srv_table_slot *sl = &t->slots[i];
        if (atomic_load(&sl->pid) != 0 && atomic_load(&sl->gate_gpu) == g &&
            atomic_load(&sl->win_epoch) == epoch)
            used += atomic_load(&sl->win_used_ns);
    }
    into = into < 1000000 ? 1000000 : into;
    return used >= into ? 1.0 : (double)used / (double)into;
}

/* The tenant's sessions' busy fraction of GPU g in the current window, and their due share. */
static void tenant_share(const struct srv_table *t, int me, int g, uint64_t now, const double *due,
                         Rgpu__ProbeGpu *msg)
{
    uint64_t epoch = now / t->window_ns, into = now - epoch * t->window_ns, used = 0;

    for (int i = 0; i < atomic_load(&t->hiwater); i++) {
        const struct srv_table_slot *sl = &t->slots[i];
        if (atomic_load(&sl->pid) == 0 || sl->tenant != me || atomic_load(&sl->gate_gpu) != g)
            continue;
        msg->tenant_share_due += due[i];
        if (atomic_load(&sl->win_epoch) == epoch)
            used += atomic_load(&sl->win_used_ns);
    }
    into = into < 1000000 ? 1000000 : into;
    msg->tenant_share = used >= into ? 1.0 : (double)used / (double)into;
}

/* Under the lock: per GPU, every session's count and reservation, the tenant's own. */
static void gather(struct srv_table *t, int me, const struct srv_probe_gpu *gpus, int ngpus,
                   struct sched_gpu *all, Rgpu__ProbeGpu *g, uint32_t *mine_p)
{
    *mine_p = 0;
    for (int i = 0; i < atomic_load(&t->hiwater); i++) {
        const struct srv_table_slot *sl = &t->slots[i];
        bool own = me >= 0 && sl->tenant == me;
        if (atomic_load(&sl->pid) == 0)
            continue;
        *mine_p += own;
        for (int k = 0; k < ngpus; k++) {
            if (gpus[k].index < 0 || gpus[k].index >= SRV_TABLE_GPUS ||
                !(sl->gpu_mask & (1u << gpus[k].index)))
                continue;
            all[k].reserved += sl->quota;
            all[k].sessions++;
            if (!own)
                continue;
            g[k].tenant_sessions++;
            g[k].reserved += sl->quota;
            g[k].used += atomic_load(&sl->mem_used);
        }
    }
}

void srv_probe_answer(struct srv_table *table, const struct srv_tenant *tenant, uint64_t asked,
                      double share, const struct srv_probe_gpu *gpus, int ngpus,
                      Rgpu__ProbeGpu *gpu_msgs, Rgpu__ProbeGpu **gpu_ptrs, char *why,
                      size_t why_len, Rgpu__ProbeReply *reply)
{
    struct sched_gpu all[SRV_MAX_DEVICES];
    struct sched_request req = {.tenant = tenant ? tenant->name : "",
                                .max_sessions = tenant ? (int)tenant->max_sessions : 0};
    uint32_t mine = 0;
    uint64_t now = srv_now_ns();

    uint64_t smallest = 0;
    bool entitled;

    ngpus = ngpus < SRV_MAX_DEVICES ? ngpus : SRV_MAX_DEVICES;
    for (int k = 0; k < ngpus; k++)
        smallest = k == 0 || gpus[k].total_mem < smallest ? gpus[k].total_mem : smallest;
    entitled = sched_request_quota(req.tenant, tenant ? tenant->mem_quota : 0, asked, share,
                                   smallest, &req.quota, why, why_len) == SCHED_ADMIT;
    for (int k = 0; k < ngpus; k++) {
        rgpu__probe_gpu__init(&gpu_msgs[k]);
        gpu_msgs[k].index = gpus[k].index;
        gpu_msgs[k].name = (char *)gpus[k].name;
        gpu_msgs[k].total_mem = gpus[k].total_mem;
        gpu_ptrs[k] = &gpu_msgs[k];
        all[k] = (struct sched_gpu){.total_mem = gpus[k].total_mem};
    }
    if (table != NULL) {
        double due[SRV_TABLE_SLOTS];
        srv_table_lock(table);
        gather(table, table_tenant(table, tenant), gpus, ngpus, all, gpu_msgs, &mine);
        srv_table_due_shares(table, now, due);
        for (int k = 0; k < ngpus; k++)
            if (gpus[k].index >= 0 && gpus[k].index < SRV_TABLE_GPUS) {
                gpu_msgs[k].utilization = utilization(table, gpus[k].index, now);
                tenant_share(table, table_tenant(table, tenant), gpus[k].index, now, due,
                             &gpu_msgs[k]);
            }
        srv_table_unlock(table);
    }
    for (int k = 0; k < ngpus; k++) {
        gpu_msgs[k].available =
            all[k].total_mem > all[k].reserved ? all[k].total_mem - all[k].reserved : 0;
        gpu_msgs[k].sessions = (uint32_t)all[k].sessions;
    }
    req.tenant_sessions = (int)mine;
    if (entitled)
        why[0] = '\0';
    reply->admit =
        entitled && ngpus > 0 && sched_admit(&req, all, ngpus, why, why_len) == SCHED_ADMIT;
    if (ngpus == 0)
        snprintf(why, why_len, "the server serves no GPU");
    reply->why_not = why;
    reply->n_gpus = (size_t)ngpus;
    reply->gpus = gpu_ptrs;
    reply->tenant_sessions = mine;
    reply->max_sessions = tenant ? tenant->max_sessions : 0;
    reply->quota = req.quota;
}

/* The GPUs this server serves (its devices list, or every one the driver has), from the
 * driver. */
static int open_gpus(struct srv_session *s, const struct srv_config *cfg,
                     struct srv_probe_gpu *gpus)
{
    int count = 0, n = 0;
    char buf[128], *tok, *save = NULL;

    if (srv_driver_open(cfg->driver[0] ? cfg->driver : NULL, &s->drv) != RG_OK ||
        s->drv.cuInit(0) != CUDA_SUCCESS || s->drv.cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return -1;
    snprintf(buf, sizeof(buf), "%s", cfg->devices);
    for (int i = 0; cfg->devices[0] == '\0' && i < count && n < SRV_MAX_DEVICES; i++)
        gpus[n++].index = i;
    for (tok = strtok_r(buf, ", ", &save); tok && n < SRV_MAX_DEVICES;
         tok = strtok_r(NULL, ", ", &save))
        if (atoi(tok) >= 0 && atoi(tok) < count)
            gpus[n++].index = atoi(tok);
    for (int k = 0; k < n; k++) {
        CUdevice dev;
        size_t total = 0;
        if (s->drv.cuDeviceGet(&dev, gpus[k].index) != CUDA_SUCCESS ||
            s->drv.cuDeviceGetName(gpus[k].name, sizeof(gpus[k].name), dev) != CUDA_SUCCESS)
            snprintf(gpus[k].name, sizeof(gpus[k].name), "?");
        s->drv.cuDeviceTotalMem(&total, dev);
        gpus[k].total_mem = total;
    }
    return n;
}

int srv_probe_gpus(struct srv_session *s, const struct srv_config *cfg, struct srv_probe_gpu *gpus)
{
    struct srv_table *t = cfg->table;
    int n;

    if (t != NULL && atomic_load(&t->probe_ready)) {
        for (n = 0; n < t->probe_ngpus && n < SRV_MAX_DEVICES; n++) {
            gpus[n].index = t->probe_gpus[n].index;
            memcpy(gpus[n].name, t->probe_gpus[n].name, sizeof(gpus[n].name));
            gpus[n].total_mem = t->probe_gpus[n].total_mem;
        }
        return n;
    }
    if ((n = open_gpus(s, cfg, gpus)) < 0 || t == NULL)
        return n;
    srv_table_lock(t);
    if (!atomic_load(&t->probe_ready)) {
        for (int k = 0; k < n && k < SRV_TABLE_GPUS; k++) {
            t->probe_gpus[k].index = gpus[k].index;
            memcpy(t->probe_gpus[k].name, gpus[k].name, sizeof(t->probe_gpus[k].name));
            t->probe_gpus[k].total_mem = gpus[k].total_mem;
        }
        t->probe_ngpus = n < SRV_TABLE_GPUS ? n : SRV_TABLE_GPUS;
        atomic_store(&t->probe_ready, 1);
    }
    srv_table_unlock(t);
    return n;
}

/* After the answer: Echo frames until the client leaves (rgpu ping). The worker holds one
 * buffer of ECHO_CHUNK bytes for them, whatever the peer sends (the probe's worker is counted
 * against its tenant's and the server's max_sessions: server/supervisor.c): a sink's bulk is
 * read through it and dropped, an Echo sent back is at most PROTO_ECHO_BACK_MAX, and anything
 * else ends the connection. */
#define ECHO_CHUNK (1u << 20)
static int serve_echo(struct srv_session *s)
{
    struct timeval idle = {ECHO_IDLE_S, 0};
    struct proto_frame_hdr hdr;
    uint8_t *buf = malloc(ECHO_CHUNK);
    rg_status_t st = buf != NULL ? RG_OK : RG_ERR_NOMEM;

    setsockopt(transport_fd(s->conn), SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
    while (st == RG_OK && (st = proto_recv(s->conn, &hdr, s->msg_buf, PROTO_MSG_MAX)) == RG_OK) {
        bool sink = hdr.flags & PROTO_ECHO_SINK;
        if (hdr.type != PROTO_ECHO ||
            hdr.bulk_len > (sink ? PROTO_ECHO_MAX : PROTO_ECHO_BACK_MAX)) {
            rg_warn("session %llu: probe from %s: %s of %llu bytes ends the echo (at most %u "
                    "bytes are echoed back, %u read and dropped)",
                    (unsigned long long)s->id, s->peer, proto_frame_type_name(hdr.type),
                    (unsigned long long)hdr.bulk_len, PROTO_ECHO_BACK_MAX, PROTO_ECHO_MAX);
            break;
        }
        for (uint64_t left = hdr.bulk_len; st == RG_OK && left > 0;) {
            size_t n = left < ECHO_CHUNK ? (size_t)left : ECHO_CHUNK;
            st = transport_recv(s->conn, buf, n);
            left -= n;
        }
        if (st == RG_OK)
            st = proto_send(s->conn, PROTO_ECHO, NULL, sink ? NULL : buf, sink ? 0 : hdr.bulk_len);
    }
    free(buf);
    return 0;
}

int srv_probe_serve(struct srv_session *s, const struct srv_config *cfg,
                    const struct proto_frame_hdr *hdr)
{
    Rgpu__ProbeReply reply = RGPU__PROBE_REPLY__INIT;
    Rgpu__ProbeGpu gpu_msgs[SRV_MAX_DEVICES], *gpu_ptrs[SRV_MAX_DEVICES];
    struct srv_probe_gpu gpus[SRV_MAX_DEVICES];
    const struct srv_tenant *tenant = NULL;
    const char *refusal = NULL;
    char why[320];
    struct srv_gate g;
    Rgpu__Probe *req =
        hdr->bulk_len == 0 ? rgpu__probe__unpack(NULL, hdr->msg_len, s->msg_buf) : NULL;
    int ngpus, rc = 0;

    if (req == NULL) {
        rg_error("session %llu: malformed probe from %s", (unsigned long long)s->id, s->peer);
        return 2;
    }
    reply.proto_version = PROTO_VERSION;
    reply.proto_minor = PROTO_VERSION_MINOR;
    reply.server_name = (char *)cfg->name;
    if (!srv_peer_gate(&cfg->tenants,
                       &(struct srv_gate_peer){"probe", s->peer, NULL, req->proto_version,
                                               req->proto_minor, req->tenant, req->token},
                       &g)) {
        refusal = g.reason;
        reply.status = g.status;
    } else if ((tenant = g.tenant, ngpus = srv_probe_gpus(s, cfg, gpus)) < 0) {
        refusal = "the server cannot open its GPUs";
        reply.status = CUDA_ERROR_NO_DEVICE;
    } else {
        srv_probe_answer(cfg->table, tenant, req->mem_quota, req->mem_share, gpus, ngpus, gpu_msgs,
                         gpu_ptrs, why, sizeof(why), &reply);
    }
    reply.reason = (char *)(refusal ? refusal : "");
    rg_info("session %llu: probe from %s, tenant '%s': %s", (unsigned long long)s->id, s->peer,
            RG_PEER_STR(req->tenant),
            reply.status  ? reply.reason
            : reply.admit ? "would admit"
                          : why);
    rgpu__probe__free_unpacked(req, NULL);
    if (proto_send(s->conn, PROTO_PROBE_REPLY, &reply.base, NULL, 0) != RG_OK)
        return 0;
    if (reply.status == 0)
        rc = serve_echo(s);
    return rc;
}
