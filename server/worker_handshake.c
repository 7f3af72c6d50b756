/* The worker's handshake: the Hello (from the supervisor's pipe), the gate, the session's quota
 * and admission, then the Welcome with a snapshot of the devices (server/worker_handshake.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "server/lanes.h"
#include "server/peer_gate.h"
#include "server/probe.h"
#include "server/tenancy.h"
#include "server/worker_handshake.h"
#include "scheduler/admission.h"

static int parse_devices(struct srv_session *s, const char *list)
{
    int count = 0;
    char buf[128], *tok, *save = NULL;

    if (s->drv.cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return -1;
    s->ndevices = 0;
    if (list == NULL || list[0] == '\0') {
        for (int i = 0; i < count && i < SRV_MAX_DEVICES; i++)
            s->drv.cuDeviceGet(&s->devices[s->ndevices++], i);
        return 0;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int ord = atoi(tok);
        if (ord < 0 || ord >= count || s->ndevices == SRV_MAX_DEVICES)
            return -1;
        s->drv.cuDeviceGet(&s->devices[s->ndevices++], ord);
    }
    return 0;
}

/* Device i as the Welcome describes it, into *info (its strings and arrays in the buffers
 * given, which must outlive it). */
static void device_info(struct srv_session *s, int i, Rgpu__DeviceInfo *info, int32_t *attrs,
                        char *name, char *pci, uint8_t *uuid)
{
    CUuuid u;
    size_t total = 0;

    rgpu__device_info__init(info);
    s->drv.cuDeviceGetName(name, 256, s->devices[i]);
    s->drv.cuDeviceTotalMem(&total, s->devices[i]);
    s->drv.cuDeviceGetPCIBusId(pci, 32, s->devices[i]);
    if (s->drv.cuDeviceGetUuid(&u, s->devices[i]) == CUDA_SUCCESS)
        memcpy(uuid, u.bytes, 16);
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
        if (s->drv.cuDeviceGetAttribute(&attrs[a], a, s->devices[i]) != CUDA_SUCCESS)
            attrs[a] = 0;
    info->name = name;
    info->uuid = (ProtobufCBinaryData){16, uuid};
    info->total_mem = s->mem_quota != 0 && s->mem_quota < total ? s->mem_quota : total;
    info->n_attrs = CU_DEVICE_ATTRIBUTE_MAX;
    info->attrs = attrs;
    info->pci_bus_id = pci;
    info->ordinal = s->devices[i];
}

/* What the Welcome's devices point to (about 10 KiB a device: on the heap). */
struct welcome_devices {
    Rgpu__DeviceInfo infos[SRV_MAX_DEVICES], *ptrs[SRV_MAX_DEVICES];
    int32_t attrs[SRV_MAX_DEVICES][CU_DEVICE_ATTRIBUTE_MAX];
    char names[SRV_MAX_DEVICES][256], pcis[SRV_MAX_DEVICES][32];
    uint8_t uuids[SRV_MAX_DEVICES][16];
};

static rg_status_t send_welcome(struct srv_session *s, const struct srv_config *cfg,
                                struct srv_worker_rdma *rdma)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;
    struct welcome_devices *d = calloc(1, sizeof(*d));
    int version = 0;
    rg_status_t st;

    if (d == NULL)
        return RG_ERR_NOMEM;
    for (int i = 0; i < s->ndevices; i++) {
        device_info(s, i, &d->infos[i], d->attrs[i], d->names[i], d->pcis[i], d->uuids[i]);
        d->ptrs[i] = &d->infos[i];
    }
    s->drv.cuDriverGetVersion(&version);
    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.session_id = s->id;
    w.driver_version = version;
    w.n_devices = (size_t)s->ndevices;
    w.devices = d->ptrs;
    w.server_name = (char *)cfg->name;
    srv_lanes_offer(s, &w);
    if (rdma->offer.side != NULL) {
        w.rdma_addr = rdma->offer.addr;
        w.rdma_secret = (ProtobufCBinaryData){sizeof(rdma->offer.secret), rdma->offer.secret};
    } else {
        w.transport_note = rdma->note;
    }
    st = proto_send(s->conn, PROTO_WELCOME, &w.base, NULL, 0);
    free(d);
    return st;
}

static void send_refusal(struct srv_session *s, CUresult status, const char *reason)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;

    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.status = status;
    w.reason = (char *)reason;
    proto_send(s->conn, PROTO_WELCOME, &w.base, NULL, 0);
}

void srv_worker_refuse(struct srv_session *s, CUresult status, const char *reason)
{
    rg_warn("session %llu (%s): refused: %s", (unsigned long long)s->id, s->peer, reason);
    send_refusal(s, status, reason);
}

void srv_worker_log_prefix(const struct srv_session *s)
{
    char prefix[128];

    snprintf(prefix, sizeof(prefix), "gpu-server[%d]%s%s session %llu", (int)getpid(),
             s->tenant[0] ? " tenant=" : "", s->tenant, (unsigned long long)s->id);
    rg_log_set_prefix(prefix);
}

/* The Hello through the gate (server/peer_gate.h; the supervisor passed it there first, but
 * the tenants may have been reloaded since): the session's minor and tenant. 0 when admitted;
 * refused (and logged by the gate) otherwise. */
static int authenticate(struct srv_session *s, const struct srv_config *cfg,
                        const Rgpu__Hello *hello, const struct srv_tenant **tenant_p)
{
    struct srv_gate g;

    *tenant_p = NULL;
    if (!srv_peer_gate(&cfg->tenants,
                       &(struct srv_gate_peer){"hello", s->peer, NULL, hello->proto_version,
                                               hello->proto_minor, hello->tenant, hello->token},
                       &g)) {
        send_refusal(s, g.status, g.reason);
        return 1;
    }
    s->proto_minor = g.minor;
    if (g.tenant == NULL)
        return 0;
    snprintf(s->tenant, sizeof(s->tenant), "%s", g.tenant->name);
    *tenant_p = g.tenant;
    srv_worker_log_prefix(s);
    return 0;
}

/* The session's quota from what the client asked (bytes, or a share of the smallest GPU it is
 * served), refused above the tenant's quota (scheduler/admission.h). 0, or 1 when refused. */
static int grant_quota(struct srv_session *s, const struct srv_tenant *t, uint64_t asked,
                       double share)
{
    uint64_t smallest = 0;
    char why[256];

    for (int i = 0; i < s->ndevices; i++) {
        size_t total = 0;
        s->drv.cuDeviceTotalMem(&total, s->devices[i]);
        smallest = i == 0 || total < smallest ? total : smallest;
    }
    if (sched_request_quota(t ? t->name : "", t ? t->mem_quota : 0, asked, share, smallest,
                            &s->mem_quota, why, sizeof(why)) == SCHED_ADMIT)
        return 0;
    rg_warn("session %llu (%s): %s", (unsigned long long)s->id, s->peer, why);
    srv_worker_refuse(s, CUDA_ERROR_NOT_PERMITTED, why);
    return 1;
}

/* The Hello: read by the supervisor and passed in a pipe (cfg->hello_fd), or, when a test
 * drives a worker directly, from the connection. */
static rg_status_t recv_hello(struct srv_session *s, const struct srv_config *cfg,
                              struct proto_frame_hdr *hdr)
{
    size_t got = 0, want = sizeof(*hdr);
    uint8_t *dst = (uint8_t *)hdr;

    if (cfg->hello_fd <= 0)
        return proto_recv(s->conn, hdr, s->msg_buf, PROTO_MSG_MAX);
    while (got < want) {
        ssize_t n = read(cfg->hello_fd, dst + got, want - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof(*hdr) && dst == (uint8_t *)hdr) {
            if (hdr->msg_len > PROTO_MSG_MAX)
                break;
            dst = s->msg_buf;
            got = 0;
            want = hdr->msg_len;
        }
    }
    close(cfg->hello_fd);
    return got == want && dst == s->msg_buf ? RG_OK : RG_ERR_PROTO;
}

/* Hello -> Welcome, with rdma for the move to RDMA. */
static int handshake_steps(struct srv_session *s, const struct srv_config *cfg,
                           uint32_t *timeout_ms_p, struct srv_worker_rdma *rdma)
{
    struct proto_frame_hdr hdr;
    Rgpu__Hello *hello;
    char reason[320], client[RG_PEER_STR_MAX * 2 + 32];
    const struct srv_tenant *tenant;
    uint64_t asked;
    double share;
    CUresult res;
    rg_status_t st = recv_hello(s, cfg, &hdr);

    if (st == RG_ERR_CLOSED) { /* a port probe (load balancer, liveness check) */
        rg_info("session %llu: %s closed the connection before its hello",
                (unsigned long long)s->id, s->peer);
        return 0;
    }
    if (st == RG_OK && hdr.type == PROTO_PROBE) /* not a session: server/probe.h */
        return srv_probe_serve(s, cfg, &hdr);
    if (st != RG_OK || hdr.type != PROTO_HELLO || hdr.bulk_len != 0 ||
        (hello = rgpu__hello__unpack(NULL, hdr.msg_len, s->msg_buf)) == NULL) {
        rg_error("session %llu: malformed message from %s: expected a hello frame",
                 (unsigned long long)s->id, s->peer);
        return SRV_EXIT_MALFORMED;
    }
    snprintf(client, sizeof(client), "%s pid %u on %s", RG_PEER_STR(hello->client_name),
             hello->client_pid, RG_PEER_STR(hello->client_host));
    rg_info("session %llu: client %s (%s), tenant '%s'", (unsigned long long)s->id, client, s->peer,
            RG_PEER_STR(hello->tenant));
    if (authenticate(s, cfg, hello, &tenant) != 0 ||
        srv_worker_rdma_offer(s, cfg, hello->transport, rdma) != 0) {
        rgpu__hello__free_unpacked(hello, NULL);
        return 0;
    }
    asked = hello->mem_quota;
    share = hello->mem_share;
    *timeout_ms_p = hello->session_timeout_ms;
    rgpu__hello__free_unpacked(hello, NULL);
    /* sharing = mps: an MPS client, its memory limit from the tenant's quota (the session's own
     * grant, at most that, is known only once the driver tells the GPUs' sizes) */
    srv_tenancy_driver_env(cfg->table, tenant, tenant != NULL ? tenant->mem_quota : 0);
    if (srv_driver_open(cfg->driver[0] ? cfg->driver : NULL, &s->drv) != RG_OK ||
        (res = s->drv.cuInit(0)) != CUDA_SUCCESS || parse_devices(s, cfg->devices) != 0) {
        srv_worker_refuse(s, CUDA_ERROR_NO_DEVICE, "the server cannot open its GPUs");
        return 1;
    }
    if (grant_quota(s, tenant, asked, share) != 0)
        return 0;
    if (cfg->table != NULL && /* admission: session limit, quota against free capacity */
        (res = srv_tenancy_admit(s, cfg->table, tenant, client, reason, sizeof(reason))) !=
            CUDA_SUCCESS) {
        srv_worker_refuse(s, res, reason);
        return 0;
    }
    return send_welcome(s, cfg, rdma) == RG_OK ? srv_worker_rdma_upgrade(s, cfg, rdma) : 1;
}

int srv_worker_handshake(struct srv_session *s, const struct srv_config *cfg,
                         uint32_t *timeout_ms_p)
{
    struct srv_worker_rdma rdma = {.note = ""};
    int rc = handshake_steps(s, cfg, timeout_ms_p, &rdma);

    transport_rdma_offer_close(&rdma.offer);
    return rc;
}
