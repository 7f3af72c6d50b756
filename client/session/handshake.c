/* The handshake (Hello -> Welcome, the protocol version agreed) and the transport: tcp, or a
 * move to RDMA after the handshake. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "client/session/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

#define HANDSHAKE_TIMEOUT_MS 30000 /* a server that accepts and never answers */

/* ---- handshake -------------------------------------------------------------------------- */

static rg_status_t send_hello(struct cli_session *s, const struct cli_conf *conf)
{
    Rgpu__Hello hello = RGPU__HELLO__INIT;
    char host[256] = "";
    extern char *program_invocation_short_name;

    gethostname(host, sizeof(host) - 1);
    hello.proto_version = PROTO_VERSION;
    hello.proto_minor = PROTO_VERSION_MINOR;
    hello.client_name = getenv("RGPU_CLIENT_NAME") != NULL ? getenv("RGPU_CLIENT_NAME")
                                                           : program_invocation_short_name;
    hello.client_host = host;
    hello.client_pid = (uint32_t)getpid();
    hello.tenant = (char *)conf->tenant;
    hello.token = (char *)conf->token;
    hello.mem_quota = conf->mem_quota;
    hello.mem_share = conf->mem_share;
    hello.transport = s->transport;
    hello.session_timeout_ms = (uint32_t)conf->session_timeout_ms;
    return proto_send(s->conn, PROTO_HELLO, &hello.base, NULL, 0);
}

static void device_from_info(struct cli_device *dev, int ordinal, const Rgpu__DeviceInfo *info)
{
    memset(dev, 0, sizeof(*dev));
    dev->ordinal = ordinal;
    snprintf(dev->name, sizeof(dev->name), "%s", info->name ? info->name : "");
    if (info->uuid.len == sizeof(dev->uuid.bytes))
        memcpy(dev->uuid.bytes, info->uuid.data, sizeof(dev->uuid.bytes));
    dev->total_mem = info->total_mem;
    for (size_t i = 0; i < info->n_attrs && i < CU_DEVICE_ATTRIBUTE_MAX; i++)
        dev->attrs[i] = info->attrs[i];
    snprintf(dev->pci_bus_id, sizeof(dev->pci_bus_id), "%s",
             info->pci_bus_id ? info->pci_bus_id : "");
    dev->pci_domain = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID];
    dev->pci_bus = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID];
    dev->pci_device = dev->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
}

static CUresult take_welcome(struct cli_session *s, const Rgpu__Welcome *w, char *why,
                             size_t why_len)
{
    char reason[320];

    if (w->status != 0) {
        snprintf(why, why_len, "gpu-server at %s refused the session: %s", s->server,
                 w->reason ? rg_log_escape(reason, sizeof(reason), w->reason) : "(no reason)");
        s->retry_ms = (int)(w->retry_after_ms < 60000 ? w->retry_after_ms : 60000);
        return w->status > 0 ? (CUresult)w->status : CUDA_ERROR_NOT_SUPPORTED;
    }
    /* The server accepted our major; it may be older (speaking an older minor) or newer. */
    s->proto_minor = w->proto_minor < PROTO_VERSION_MINOR ? w->proto_minor : PROTO_VERSION_MINOR;
    s->devices = calloc(w->n_devices ? w->n_devices : 1, sizeof(*s->devices));
    if (s->devices == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < w->n_devices; i++)
        device_from_info(&s->devices[i], (int)i, w->devices[i]);
    s->ndevices = (int)w->n_devices;
    rg_info("session %llu on %s (%s), driver %d, %d device(s), protocol %u.%u",
            (unsigned long long)w->session_id, s->server, RG_PEER_STR(w->server_name),
            w->driver_version, s->ndevices, PROTO_VERSION, s->proto_minor);
    if (s->ndevices == 0) {
        snprintf(why, why_len, "gpu-server at %s serves no GPU", s->server);
        return CUDA_ERROR_NO_DEVICE;
    }
    return CUDA_SUCCESS;
}

/* ---- transport: tcp, or a move to RDMA after the handshake ------------------------------ */

/* What to ask the server for. auto without RDMA here asks for tcp, saying why in one line. */
CUresult cli_transport_choose(struct cli_session *s, const char *want)
{
    char why[256];

    if (strcmp(want, "tcp") != 0 && strcmp(want, "rdma") != 0 && strcmp(want, "auto") != 0) {
        rg_error("transport = %s is not one of auto, rdma, tcp (RGPU_TRANSPORT or the config)",
                 want);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* one of the three names (checked above): it fits */
    memcpy(s->transport, want, strlen(want) + 1);
    if (strcmp(want, "tcp") == 0 || transport_rdma_probe(why, sizeof(why)) == RG_OK)
        return CUDA_SUCCESS;
    if (strcmp(want, "rdma") == 0) {
        rg_error("transport = rdma, but this host cannot use RDMA: %s", why);
        return CUDA_ERROR_NO_DEVICE;
    }
    rg_info("transport: tcp to %s (auto: %s here)", s->server, why);
    snprintf(s->transport, sizeof(s->transport), "tcp");
    return CUDA_SUCCESS;
}

/* After the Welcome: take the server's RDMA offer, or say in one line why not. */
static CUresult transport_upgrade(struct cli_session *s, const Rgpu__Welcome *w,
                                  const struct transport_opts *opts, char *why, size_t why_len)
{
    bool required = strcmp(s->transport, "rdma") == 0;
    struct transport_conn *rconn;
    rg_status_t st;

    if (strcmp(s->transport, "tcp") == 0)
        return CUDA_SUCCESS;
    if (w->rdma_addr == NULL || w->rdma_addr[0] == '\0') {
        const char *note = w->transport_note && w->transport_note[0]
                               ? RG_PEER_STR(w->transport_note)
                               : "no RDMA offer";
        if (required)
            snprintf(why, why_len, "transport = rdma, but gpu-server at %s offers no RDMA: %s",
                     s->server, note);
        else
            rg_info("transport: tcp to %s (auto: %s)", s->server, note);
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    st = transport_rdma_upgrade(w->rdma_addr, w->rdma_secret.data, w->rdma_secret.len,
                                transport_fd(s->conn), opts, &rconn);
    if (st != RG_OK) {
        if (required)
            snprintf(why, why_len, "transport = rdma, but connecting to %s over RDMA failed: %s",
                     RG_PEER_STR(w->rdma_addr), rg_status_str(st));
        else
            rg_info("transport: tcp to %s (auto: RDMA connect to %s failed: %s)", s->server,
                    RG_PEER_STR(w->rdma_addr), rg_status_str(st));
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    s->tcp_ctl = s->conn;
    s->conn = rconn;
    rg_info("transport: rdma to %s (session with %s)", RG_PEER_STR(w->rdma_addr), s->server);
    return CUDA_SUCCESS;
}

/* A server of 1.3 or later keeps a session whose call runs long talking (Keepalive frames), so
 * a receive that hears nothing for session_timeout_ms means the session no longer answers (its
 * worker stopped, its host gone quiet): the call, and every later one, fails
 * (client/session/call_stream.c). An older server is not held to it. */
static CUresult session_deadline(struct cli_session *s, const struct cli_conf *conf, char *why,
                                 size_t why_len)
{
    s->session_timeout_ms = 0;
    if (conf->session_timeout_ms <= 0 || s->proto_minor < PROTO_MINOR_KEEPALIVE)
        return CUDA_SUCCESS;
    if (transport_set_recv_idle(s->conn, conf->session_timeout_ms) != RG_OK) {
        snprintf(why, why_len, "cannot set the session's receive deadline on %s", s->server);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    s->session_timeout_ms = conf->session_timeout_ms;
    return CUDA_SUCCESS;
}

static void set_recv_timeout(struct cli_session *s, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    setsockopt(transport_fd(s->conn), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

CUresult cli_handshake(struct cli_session *s, const struct cli_conf *conf,
                       const struct transport_opts *opts, char *why, size_t why_len)
{
    struct proto_frame_hdr hdr;
    Rgpu__Welcome *w;
    char seen[80];
    rg_status_t st;
    CUresult res;

    s->retry_ms = 0;
    set_recv_timeout(s, HANDSHAKE_TIMEOUT_MS);
    if ((st = send_hello(s, conf)) == RG_OK &&
        (st = proto_peek_answer(s->conn, seen, sizeof(seen))) == RG_OK)
        st = proto_recv(s->conn, &hdr, s->recv_buf, RECV_BUF_SIZE);
    set_recv_timeout(s, 0);
    if (st == RG_ERR_PROTO && seen[0] != '\0') {
        snprintf(why, why_len, "%s is not a gpu-server (it answered \"%s\")", s->server, seen);
        return CUDA_ERROR_NO_DEVICE;
    }
    if (st != RG_OK) {
        snprintf(why, why_len, "gpu-server at %s %s during the handshake", s->server,
                 st == RG_ERR_TIMEOUT ? "did not answer" : "closed the connection");
        /* closed before a word: what a server's limits on connections before their Hello do
         * (an older server's, or a reset racing the busy refusal): worth another try */
        s->retry_ms = st == RG_ERR_CLOSED ? 1 : 0;
        return CUDA_ERROR_NO_DEVICE;
    }
    if (hdr.type != PROTO_WELCOME || hdr.bulk_len != 0 ||
        (w = rgpu__welcome__unpack(NULL, hdr.msg_len, s->recv_buf)) == NULL) {
        snprintf(why, why_len, "%s answered the handshake with a malformed %s frame", s->server,
                 proto_frame_type_name(hdr.type));
        return CUDA_ERROR_NO_DEVICE;
    }
    res = take_welcome(s, w, why, why_len);
    if (res == CUDA_SUCCESS && conf->mem_share != 0 && w->proto_minor < PROTO_MINOR_MEM_SHARE) {
        /* an older server ignored the share: the session would hold the tenant's whole quota */
        snprintf(why, why_len,
                 "gpu-server at %s speaks protocol %u.%u, which cannot honour "
                 "mem_share (rgpu run --share; %u.%u or later): ask with mem_quota (--memory)",
                 s->server, PROTO_VERSION, w->proto_minor, PROTO_VERSION, PROTO_MINOR_MEM_SHARE);
        res = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (res == CUDA_SUCCESS)
        res = transport_upgrade(s, w, opts, why, why_len);
    if (res == CUDA_SUCCESS)
        res = session_deadline(s, conf, why, why_len);
    if (res == CUDA_SUCCESS && s->tcp_ctl == NULL && s->index == 0) /* TCP, first */
        cli_proc.hooks->lanes_offered(w->lane_addr, w->lane_secret.data, w->lane_secret.len,
                                      conf->lanes);
    rgpu__welcome__free_unpacked(w, NULL);
    return res;
}
