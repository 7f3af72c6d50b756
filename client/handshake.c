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

#include "client/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

#define HANDSHAKE_TIMEOUT_MS 30000 /* a server that accepts and never answers */

/* ---- handshake -------------------------------------------------------------------------- */

static rg_status_t send_hello(const struct cli_conf *conf)
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
    hello.transport = cli_sess.transport;
    return proto_send(cli_sess.conn, PROTO_HELLO, &hello.base, NULL, 0);
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

static CUresult take_welcome(const Rgpu__Welcome *w, char *why, size_t why_len)
{
    if (w->status != 0) {
        snprintf(why, why_len, "gpu-server at %s refused the session: %s", cli_sess.server,
                 w->reason ? w->reason : "(no reason)");
        return w->status > 0 ? (CUresult)w->status : CUDA_ERROR_NOT_SUPPORTED;
    }
    /* The server accepted our major; it may be older (speaking an older minor) or newer. */
    cli_sess.proto_minor =
        w->proto_minor < PROTO_VERSION_MINOR ? w->proto_minor : PROTO_VERSION_MINOR;
    cli_sess.devices = calloc(w->n_devices ? w->n_devices : 1, sizeof(*cli_sess.devices));
    if (cli_sess.devices == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < w->n_devices; i++)
        device_from_info(&cli_sess.devices[i], (int)i, w->devices[i]);
    cli_sess.ndevices = (int)w->n_devices;
    rg_info("session %llu on %s (%s), driver %d, %d device(s), protocol %u.%u",
            (unsigned long long)w->session_id, cli_sess.server,
            w->server_name ? w->server_name : "", w->driver_version, cli_sess.ndevices,
            PROTO_VERSION, cli_sess.proto_minor);
    if (cli_sess.ndevices == 0) {
        snprintf(why, why_len, "gpu-server at %s serves no GPU", cli_sess.server);
        return CUDA_ERROR_NO_DEVICE;
    }
    return CUDA_SUCCESS;
}

/* ---- transport: tcp, or a move to RDMA after the handshake ------------------------------ */

/* What to ask the server for. auto without RDMA here asks for tcp, saying why in one line. */
CUresult cli_transport_choose(const char *want)
{
    char why[256];

    if (strcmp(want, "tcp") != 0 && strcmp(want, "rdma") != 0 && strcmp(want, "auto") != 0) {
        rg_error("transport = %s is not one of auto, rdma, tcp (RGPU_TRANSPORT or the config)",
                 want);
        return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(cli_sess.transport, want, strlen(want) + 1); /* one of the three: it fits */
    if (strcmp(want, "tcp") == 0 || transport_rdma_probe(why, sizeof(why)) == RG_OK)
        return CUDA_SUCCESS;
    if (strcmp(want, "rdma") == 0) {
        rg_error("transport = rdma, but this host cannot use RDMA: %s", why);
        return CUDA_ERROR_NO_DEVICE;
    }
    rg_info("transport: tcp to %s (auto: %s here)", cli_sess.server, why);
    snprintf(cli_sess.transport, sizeof(cli_sess.transport), "tcp");
    return CUDA_SUCCESS;
}

/* After the Welcome: take the server's RDMA offer, or say in one line why not. */
static CUresult transport_upgrade(const Rgpu__Welcome *w, const struct transport_opts *opts,
                                  char *why, size_t why_len)
{
    bool required = strcmp(cli_sess.transport, "rdma") == 0;
    struct transport_conn *rconn;
    rg_status_t st;

    if (strcmp(cli_sess.transport, "tcp") == 0)
        return CUDA_SUCCESS;
    if (w->rdma_addr == NULL || w->rdma_addr[0] == '\0') {
        const char *note =
            w->transport_note && w->transport_note[0] ? w->transport_note : "no RDMA offer";
        if (required)
            snprintf(why, why_len, "transport = rdma, but gpu-server at %s offers no RDMA: %s",
                     cli_sess.server, note);
        else
            rg_info("transport: tcp to %s (auto: %s)", cli_sess.server, note);
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    st = transport_rdma_upgrade(w->rdma_addr, w->rdma_secret.data, w->rdma_secret.len,
                                transport_fd(cli_sess.conn), opts, &rconn);
    if (st != RG_OK) {
        if (required)
            snprintf(why, why_len, "transport = rdma, but connecting to %s over RDMA failed: %s",
                     w->rdma_addr, rg_status_str(st));
        else
            rg_info("transport: tcp to %s (auto: RDMA connect to %s failed: %s)", cli_sess.server,
                    w->rdma_addr, rg_status_str(st));
        return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
    }
    cli_sess.tcp_ctl = cli_sess.conn;
    cli_sess.conn = rconn;
    rg_info("transport: rdma to %s (session with %s)", w->rdma_addr, cli_sess.server);
    return CUDA_SUCCESS;
}

static void set_recv_timeout(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    setsockopt(transport_fd(cli_sess.conn), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

CUresult cli_handshake(const struct cli_conf *conf, const struct transport_opts *opts, char *why,
                       size_t why_len)
{
    struct proto_frame_hdr hdr;
    Rgpu__Welcome *w;
    rg_status_t st;
    CUresult res;

    set_recv_timeout(HANDSHAKE_TIMEOUT_MS);
    if ((st = send_hello(conf)) == RG_OK)
        st = proto_recv(cli_sess.conn, &hdr, cli_sess.recv_buf, RECV_BUF_SIZE);
    set_recv_timeout(0);
    if (st != RG_OK) {
        snprintf(why, why_len, "gpu-server at %s %s during the handshake", cli_sess.server,
                 st == RG_ERR_TIMEOUT ? "did not answer" : "closed the connection");
        return CUDA_ERROR_NO_DEVICE;
    }
    if (hdr.type != PROTO_WELCOME || hdr.bulk_len != 0 ||
        (w = rgpu__welcome__unpack(NULL, hdr.msg_len, cli_sess.recv_buf)) == NULL) {
        snprintf(why, why_len, "%s answered the handshake with a malformed %s frame",
                 cli_sess.server, proto_frame_type_name(hdr.type));
        return CUDA_ERROR_NO_DEVICE;
    }
    res = take_welcome(w, why, why_len);
    if (res == CUDA_SUCCESS)
        res = transport_upgrade(w, opts, why, why_len);
    if (res == CUDA_SUCCESS && cli_sess.tcp_ctl == NULL) /* still on TCP */
        cli_sess.hooks->lanes_offered(w->lane_addr, w->lane_secret.data, w->lane_secret.len,
                                      conf->lanes);
    rgpu__welcome__free_unpacked(w, NULL);
    return res;
}
