/* The supervisor: a libevent loop that accepts clients and forks/execs one worker process per
 * authenticated session, reaps workers and logs how each session ended. A connection gets no
 * process until its Hello has arrived and named a tenant with the right token: the Hello is
 * read in this loop, bounded in time, size and number (server/preauth.h), then handed to the
 * worker with the socket. It owns the shared session table
 * (server/session_table.h) that its workers inherit, reloads the tenants on SIGHUP without
 * touching running sessions, and serves /metrics and /status (server/metrics.c). It never
 * touches CUDA itself. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "server/metrics.h"
#include "server/peer_gate.h"
#include "server/mps.h"
#include "server/preauth.h"
#include "server/sd_notify.h"
#include "server/server.h"
#include "server/session_table.h"
#include "transport/rdma.h"
#include "transport/transport.h"

#define MAX_WORKERS 1024

/* Load refusals (the server full) tell the client to try again after about this long. */
#define RETRY_AFTER_MS 200

struct worker {
    pid_t pid;
    uint64_t session;
    bool probe;      /* a probe's worker (server/probe.h), not a session */
    char tenant[64]; /* the tenant it authenticated as ("" on a server without tenants) */
    char peer[64];
};

static struct {
    const struct srv_config *cfg;
    const char *self_exe;
    struct event_base *base;
    struct transport_listener *listener;
    struct event *ev_accept, *ev_resume; /* accepting pauses 1 s after a failed accept */
    struct worker workers[MAX_WORKERS];
    uint64_t next_session;
    struct srv_table *table; /* shared with the workers (--table-fd) */
    int table_fd;
    struct srv_metrics *metrics;
    struct srv_preauth *preauth; /* connections before their hello */
    struct srv_tenants *tenants; /* as last loaded: the hello is checked against them */
    int conf_fd; /* memfd with the text of the last config that loaded (workers read it); -1 */
    struct srv_mps *mps; /* sharing = mps: the MPS control daemon we own */
} sup;

/* In the child: exec ourselves as a worker on the inherited socket, with the Hello the
 * supervisor read in the pipe hello_fd. The worker dies with the supervisor (PR_SET_PDEATHSIG):
 * a supervisor that is killed leaves no session running that a new one could not see, so
 * max_sessions and the tenants' limits hold across a restart (docs/security.md). */
static void exec_worker(int fd, int hello_fd, uint64_t session, const char *peer, pid_t parent)
{
    const struct srv_config *c = sup.cfg;
    char fdbuf[16], sid[24], tfd[16], hfd[16], conf[40], level[16], poll[24], transport[8];
    int wfd = dup(fd); /* dup clears close-on-exec */
    int flags = fcntl(wfd, F_GETFL);
    char *argv[] = {(char *)sup.self_exe,
                    "--worker-fd",
                    fdbuf,
                    "--session",
                    sid,
                    "--peer",
                    (char *)peer,
                    "--driver",
                    (char *)c->driver,
                    "--devices",
                    (char *)c->devices,
                    "--log-level",
                    level,
                    "--name",
                    (char *)c->name,
                    "--busy-poll-us",
                    poll,
                    "--transport",
                    transport,
                    "--table-fd",
                    tfd,
                    "--hello-fd",
                    hfd,
                    NULL,
                    NULL,
                    NULL};
    size_t n = sizeof(argv) / sizeof(argv[0]) - 3;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127); /* the supervisor is already gone */
    if (flags >= 0)
        fcntl(wfd, F_SETFL, flags & ~O_NONBLOCK);
    srv_config_format(c, "log_level", level, sizeof(level)); /* typed: back to flag text */
    srv_config_format(c, "busy_poll_us", poll, sizeof(poll));
    srv_config_format(c, "transport", transport, sizeof(transport));
    if (sup.conf_fd >= 0) { /* the last config that loaded, not the file as it is now */
        snprintf(conf, sizeof(conf), "/proc/self/fd/%d", sup.conf_fd);
        argv[n] = "--config";
        argv[n + 1] = conf;
    }
    snprintf(fdbuf, sizeof(fdbuf), "%d", wfd);
    snprintf(sid, sizeof(sid), "%llu", (unsigned long long)session);
    snprintf(tfd, sizeof(tfd), "%d", sup.table_fd);
    snprintf(hfd, sizeof(hfd), "%d", hello_fd);
    execv(sup.self_exe, argv);
    rg_error("cannot exec the worker %s: %m", sup.self_exe);
    _exit(127);
}

static void send_refusal(int fd, CUresult status, const char *reason, uint32_t retry_after_ms);

static void refuse(int fd, const char *peer, CUresult status, const char *reason)
{
    rg_warn("refused %s: %s", peer, reason);
    send_refusal(fd, status, reason, 0);
}

static int workers_running(void)
{
    int n = 0;

    for (int i = 0; i < MAX_WORKERS; i++)
        n += sup.workers[i].pid != 0;
    return n;
}

/* The probes of a tenant in progress (workers answering or echoing). */
static int tenant_probes(const char *tenant)
{
    int n = 0;

    for (int i = 0; i < MAX_WORKERS; i++)
        n += sup.workers[i].pid != 0 && sup.workers[i].probe &&
             strcmp(sup.workers[i].tenant, tenant) == 0;
    return n;
}

/* Fork the worker of an authenticated session or probe (of tenant, NULL when the server has
 * none); the Hello or Probe frame goes to it through a pipe (it fits the pipe's buffer:
 * SRV_PREAUTH_FRAME_MAX). */
static void spawn(const struct srv_preauth_peer *who, const uint8_t *frame, size_t len,
                  const struct srv_tenant *tenant, bool probe)
{
    struct worker *w = NULL;
    int pfd[2];
    pid_t pid, self = getpid();

    for (int i = 0; i < MAX_WORKERS && w == NULL; i++)
        if (sup.workers[i].pid == 0)
            w = &sup.workers[i];
    if (w == NULL || pipe2(pfd, O_CLOEXEC) != 0) {
        refuse(who->fd, who->peer, CUDA_ERROR_OUT_OF_MEMORY, "the server cannot start a worker");
        return;
    }
    if (write(pfd[1], frame, len) != (ssize_t)len) {
        refuse(who->fd, who->peer, CUDA_ERROR_OUT_OF_MEMORY, "the server cannot start a worker");
        goto out;
    }
    w->session = ++sup.next_session;
    pid = fork();
    if (pid == 0) {
        int hfd = dup(pfd[0]); /* without close-on-exec */
        exec_worker(who->fd, hfd, w->session, who->peer, self);
    }
    if (pid < 0) {
        rg_error("fork for %s failed: %m", who->peer);
        refuse(who->fd, who->peer, CUDA_ERROR_OUT_OF_MEMORY, "the server cannot start a worker");
        goto out;
    }
    w->pid = pid;
    w->probe = probe;
    snprintf(w->tenant, sizeof(w->tenant), "%s", tenant != NULL ? tenant->name : "");
    snprintf(w->peer, sizeof(w->peer), "%s", who->peer);
    rg_info("%s %llu from %s: worker pid %d", probe ? "probe" : "session",
            (unsigned long long)w->session, who->peer, (int)pid);
out:
    close(pfd[0]);
    close(pfd[1]);
}

/* A Welcome that refuses, in the worker's form (the server's version and minor); for a refusal
 * for load, retry_after_ms tells the client when trying again may succeed. */
static void send_refusal(int fd, CUresult status, const char *reason, uint32_t retry_after_ms)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;

    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.status = status;
    w.reason = (char *)reason;
    w.retry_after_ms = retry_after_ms;
    srv_preauth_send(fd, PROTO_WELCOME, &w.base);
}

/* The server's slots: sessions and probes together count against max_sessions. */
static bool server_full(char *reason, size_t len)
{
    int n = workers_running();

    if (n < sup.cfg->max_sessions)
        return false;
    snprintf(reason, len, "the server is full: %d sessions and probes (max_sessions = %d)", n,
             sup.cfg->max_sessions);
    return true;
}

static bool on_hello(const struct srv_preauth_peer *who, const struct proto_frame_hdr *hdr,
                     const uint8_t *frame, size_t len)
{
    Rgpu__Hello *h = rgpu__hello__unpack(NULL, hdr->msg_len, frame + sizeof(*hdr));
    char reason[160], detail[RG_PEER_STR_MAX * 2 + 32];
    struct srv_gate g;

    if (h == NULL) {
        rg_warn("closing %s: its hello does not decode", who->peer);
        return false;
    }
    snprintf(detail, sizeof(detail), "client %s pid %u on %s", RG_PEER_STR(h->client_name),
             h->client_pid, RG_PEER_STR(h->client_host));
    /* the gate (server/peer_gate.h), passed again in the worker on the Hello it is handed */
    if (!srv_peer_gate(sup.tenants,
                       &(struct srv_gate_peer){"hello", who->peer, detail, h->proto_version,
                                               h->proto_minor, h->tenant, h->token},
                       &g)) {
        send_refusal(who->fd, g.status, g.reason, 0);
    } else if (server_full(reason, sizeof(reason))) {
        rg_warn("refused %s: %s", who->peer, reason);
        send_refusal(who->fd, CUDA_ERROR_NOT_PERMITTED, reason, RETRY_AFTER_MS);
    } else {
        spawn(who, frame, len, g.tenant, false);
    }
    rgpu__hello__free_unpacked(h, NULL);
    return false; /* the worker has its own copy of the fd */
}

/* A probe (server/probe.h), bounded and authenticated here like a Hello: a probe of another
 * version or without a valid tenant token is answered and closed by the supervisor, forking
 * nothing. An authenticated one goes to a worker by the Hello's path (--hello-fd), which
 * answers it: the answer may need the driver (the first probe records the GPUs in the session
 * table) and the echo that follows may last, neither of which the supervisor does. */
static void send_probe_refusal(const struct srv_preauth_peer *who, CUresult status,
                               const char *reason, uint32_t retry_after_ms)
{
    Rgpu__ProbeReply r = RGPU__PROBE_REPLY__INIT;

    r.proto_version = PROTO_VERSION;
    r.proto_minor = PROTO_VERSION_MINOR;
    r.server_name = (char *)sup.cfg->name;
    r.status = status;
    r.reason = (char *)reason;
    r.retry_after_ms = retry_after_ms;
    srv_preauth_send(who->fd, PROTO_PROBE_REPLY, &r.base);
}

/* Whether a tenant may open one more probe: its probes in progress count against its
 * max_sessions (apart from its sessions, so that `rgpu status` works while its jobs run), and
 * every probe against the server's max_sessions with the sessions (docs/security.md). */
static bool probe_over_limit(const struct srv_tenant *t, char *reason, size_t len)
{
    int n;

    if (t == NULL || t->max_sessions == 0 || (n = tenant_probes(t->name)) < (int)t->max_sessions)
        return false;
    snprintf(reason, len,
             "the tenant has %d probes in progress here, its limit (max_sessions = %u)", n,
             t->max_sessions);
    return true;
}

static bool on_probe(const struct srv_preauth_peer *who, const struct proto_frame_hdr *hdr,
                     const uint8_t *frame, size_t len)
{
    Rgpu__Probe *p = rgpu__probe__unpack(NULL, hdr->msg_len, frame + sizeof(*hdr));
    char reason[200];
    struct srv_gate g;

    if (p == NULL) {
        rg_warn("closing %s: its probe does not decode", who->peer);
        return false;
    }
    if (!srv_peer_gate(sup.tenants,
                       &(struct srv_gate_peer){"probe", who->peer, NULL, p->proto_version,
                                               p->proto_minor, p->tenant, p->token},
                       &g)) {
        send_probe_refusal(who, g.status, g.reason, 0);
    } else if (probe_over_limit(g.tenant, reason, sizeof(reason))) {
        rg_warn("refused the probe of %s: tenant '%s': %s", who->peer, g.tenant->name, reason);
        send_probe_refusal(who, CUDA_ERROR_NOT_PERMITTED, reason, RETRY_AFTER_MS);
    } else if (server_full(reason, sizeof(reason))) {
        rg_warn("refused the probe of %s: %s", who->peer, reason);
        send_probe_refusal(who, CUDA_ERROR_NOT_PERMITTED, reason, RETRY_AFTER_MS);
    } else {
        spawn(who, frame, len, g.tenant, true);
    }
    rgpu__probe__free_unpacked(p, NULL);
    return false;
}

/* Frames a peer may send before it has a session, and who answers them (server/preauth.h). */
static const struct {
    uint16_t type;
    bool (*fn)(const struct srv_preauth_peer *who, const struct proto_frame_hdr *hdr,
               const uint8_t *frame, size_t len);
} presession_frames[] = {
    {PROTO_HELLO, on_hello},
    {PROTO_PROBE, on_probe},
};

static bool on_first_frame(void *arg, const struct srv_preauth_peer *who,
                           const struct proto_frame_hdr *hdr, const uint8_t *frame, size_t len)
{
    for (size_t i = 0; i < sizeof(presession_frames) / sizeof(presession_frames[0]); i++)
        if (presession_frames[i].type == hdr->type)
            return presession_frames[i].fn(who, hdr, frame, len);
    rg_warn("closing %s: its first frame is a %s, not a hello or a probe", who->peer,
            proto_frame_type_name(hdr->type));
    return false;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    if (srv_preauth_accept(sup.preauth, (int)lfd) != RG_OK) {
        /* e.g. out of file descriptors: the listener stays readable, so do not spin on it */
        struct timeval pause = {1, 0};
        rg_warn("not accepting new sessions for 1 s after a failed accept");
        event_del(sup.ev_accept);
        evtimer_add(sup.ev_resume, &pause);
    }
}

static void reap(evutil_socket_t sig, short what, void *arg)
{
    int status;
    pid_t pid;
    char tenant[64], who[80];

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (srv_mps_reaped(sup.mps, pid, status))
            continue;
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct worker *w = &sup.workers[i];
            if (w->pid != pid)
                continue;
            srv_table_release_pid(sup.table, pid, tenant, sizeof(tenant));
            snprintf(who, sizeof(who), "%s%s%s", tenant[0] ? "tenant=" : "", tenant,
                     tenant[0] ? " " : "");
            if (WIFEXITED(status))
                rg_info("%ssession %llu (peer %s) ended: worker exited with status %d%s", who,
                        (unsigned long long)w->session, w->peer, WEXITSTATUS(status),
                        WEXITSTATUS(status) == 2 ? " (malformed message)" : "");
            else
                rg_warn("%ssession %llu (peer %s) ended: worker killed by signal %d", who,
                        (unsigned long long)w->session, w->peer, WTERMSIG(status));
            w->pid = 0;
        }
    }
}

static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    rg_info("signal %d: stopping; ending every session", (int)sig);
    srv_notify("STOPPING=1");
    for (int i = 0; i < MAX_WORKERS; i++)
        if (sup.workers[i].pid > 0)
            kill(sup.workers[i].pid, SIGTERM);
    event_base_loopexit(sup.base, NULL);
}

/* Read the config file, check it whole (every key, and srv_config_check) and copy its text
 * into a new memfd (inherited by the workers: not close-on-exec), so the supervisor and the
 * workers it starts read the same text, whatever happens to the file later. Errors are
 * reported once each, with the file's own path and line. */
static rg_status_t conf_snapshot(const char *path, int *fd_p, struct srv_tenants *tenants)
{
    struct srv_config *check = malloc(sizeof(*check));
    char *text = NULL, why[512];
    size_t len = 0;
    int fd = -1;
    rg_status_t st = RG_ERR_INVALID;

    if (check == NULL)
        return RG_ERR_NOMEM;
    if (rg_conf_read_file(path, &text, &len, NULL, why, sizeof(why)) != RG_OK) {
        rg_error("%s", why);
        goto out;
    }
    srv_config_init(check);
    if (srv_config_parse(check, text, len, path, NULL, NULL) != RG_OK ||
        srv_config_check(check, path, NULL, NULL) != RG_OK)
        goto out;
    if ((fd = memfd_create("rgpu-config", 0)) < 0 || write(fd, text, len) != (ssize_t)len) {
        rg_error("cannot copy %s for the workers: %m", path);
        goto out;
    }
    *tenants = check->tenants;
    st = RG_OK;
out:
    if (st != RG_OK && fd >= 0)
        close(fd);
    else if (st == RG_OK)
        *fd_p = fd;
    free(check);
    free(text);
    return st;
}

/* SIGHUP: read the tenants again. Running sessions keep going: their weight, cap and class
 * come from the table and change at once; tokens, quotas and session limits apply to the
 * sessions that start from now on (each worker reads the config the supervisor last loaded).
 * A config that does not load changes nothing, for new sessions either. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    struct srv_tenants *fresh;
    int fd;

    if (sup.cfg->config_path[0] == '\0') {
        rg_warn("SIGHUP: no config file to reload (started without --config)");
        return;
    }
    if ((fresh = calloc(1, sizeof(*fresh))) == NULL)
        return;
    srv_notify("RELOADING=1");
    if (conf_snapshot(sup.cfg->config_path, &fd, fresh) != RG_OK) {
        rg_error("SIGHUP: %s not loaded (the errors above); the running config stays, for "
                 "new sessions too",
                 sup.cfg->config_path);
        free(fresh);
        srv_notify("READY=1");
        return;
    }
    close(sup.conf_fd);
    sup.conf_fd = fd;
    free(sup.tenants);
    sup.tenants = fresh;
    srv_table_set_tenants(sup.table, fresh);
    rg_info("SIGHUP: reloaded %s: %d tenant(s); running sessions go on", sup.cfg->config_path,
            fresh->n);
    srv_notify("READY=1");
}

static void resume_accept(evutil_socket_t fd, short what, void *arg)
{
    event_add(sup.ev_accept, NULL);
}

/* One line on what clients can use; with transport = rdma and no RDMA here, an error. */
static int transport_check(const struct srv_config *cfg)
{
    char why[256] = "";

    if (cfg->transport == SRV_TRANSPORT_TCP) {
        rg_info("transport tcp: sessions stay on TCP");
        return 0;
    }
    if (transport_rdma_probe(why, sizeof(why)) == RG_OK) {
        rg_info("transport %s: sessions whose client asks move to RDMA",
                cfg->transport == SRV_TRANSPORT_RDMA ? "rdma" : "auto");
        return 0;
    }
    if (cfg->transport == SRV_TRANSPORT_RDMA) {
        rg_error("transport = rdma but this host cannot use RDMA: %s", why);
        return 1;
    }
    rg_info("transport auto: TCP only (%s)", why);
    return 0;
}

/* The tenants as the config file has them now, and its copy for the workers. */
static rg_status_t tenants_init(const struct srv_config *cfg)
{
    sup.conf_fd = -1;
    if ((sup.tenants = calloc(1, sizeof(*sup.tenants))) == NULL)
        return RG_ERR_NOMEM;
    if (cfg->config_path[0] == '\0') {
        *sup.tenants = cfg->tenants;
        return srv_config_check(cfg, "no --config", NULL, NULL);
    }
    if (conf_snapshot(cfg->config_path, &sup.conf_fd, sup.tenants) != RG_OK) {
        rg_error("not started: %s is not a valid config (the errors above)", cfg->config_path);
        return RG_ERR_INVALID;
    }
    return RG_OK;
}

static rg_status_t preauth_init(const struct srv_config *cfg)
{
    struct srv_preauth_limits lim = {.max_pending = cfg->max_pending,
                                     .max_pending_per_peer = cfg->max_pending_per_peer,
                                     .handshake_ms = cfg->handshake_timeout_ms};
    int lfd = transport_tcp_ops.listener_fd(sup.listener);
    int flags = fcntl(lfd, F_GETFL);

    if (flags < 0 || fcntl(lfd, F_SETFL, flags | O_NONBLOCK) != 0) {
        rg_error("cannot make the session port non-blocking: %m");
        return RG_ERR_IO;
    }
    rg_info("limits: %d session(s), %d connection(s) before their hello (%d per peer), "
            "%d ms for the hello, %d ms without progress inside a message",
            cfg->max_sessions, lim.max_pending, lim.max_pending_per_peer, lim.handshake_ms,
            cfg->recv_timeout_ms);
    return srv_preauth_create(sup.base, &lim, on_first_frame, NULL, &sup.preauth);
}

int srv_supervisor_run(const struct srv_config *cfg, const char *self_exe)
{
    char addr[192], bound[192];
    struct event *ev_chld, *ev_int, *ev_term, *ev_hup;

    sup.cfg = cfg;
    sup.self_exe = self_exe;
    snprintf(addr, sizeof(addr), "%s:%d", cfg->listen, cfg->port);
    if (transport_tcp_ops.listen(addr, &sup.listener) != RG_OK) {
        rg_error("cannot listen on %s", addr);
        return 1;
    }
    transport_tcp_ops.listener_addr(sup.listener, bound, sizeof(bound));
    if (transport_check(cfg) != 0) {
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    if (srv_table_create(&sup.table_fd, &sup.table) != RG_OK) {
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    if (tenants_init(cfg) != RG_OK) {
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    srv_table_set_tenants(sup.table, sup.tenants);
    signal(SIGPIPE, SIG_IGN);
    sup.base = event_base_new();
    if (preauth_init(cfg) != RG_OK) {
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    if (cfg->sharing == SRV_SHARING_MPS && srv_mps_start(sup.table, &sup.mps) != RG_OK) {
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    if ((cfg->metrics_listen[0] != '\0' || cfg->metrics_public_listen[0] != '\0') &&
        srv_metrics_start(sup.base,
                          &(struct srv_metrics_conf){cfg->metrics_listen, cfg->metrics_token,
                                                     cfg->metrics_public_listen},
                          sup.table, cfg->name, &sup.metrics) != RG_OK) {
        srv_mps_stop(sup.mps);
        transport_tcp_ops.listener_close(sup.listener);
        return 1;
    }
    sup.ev_accept = event_new(sup.base, transport_tcp_ops.listener_fd(sup.listener),
                              EV_READ | EV_PERSIST, on_accept, NULL);
    sup.ev_resume = evtimer_new(sup.base, resume_accept, NULL);
    ev_chld = evsignal_new(sup.base, SIGCHLD, reap, NULL);
    ev_int = evsignal_new(sup.base, SIGINT, on_stop, NULL);
    ev_term = evsignal_new(sup.base, SIGTERM, on_stop, NULL);
    ev_hup = evsignal_new(sup.base, SIGHUP, on_reload, NULL);
    event_add(ev_hup, NULL);
    event_add(sup.ev_accept, NULL);
    event_add(ev_chld, NULL);
    event_add(ev_int, NULL);
    event_add(ev_term, NULL);
    rg_info("listening on %s", bound);
    srv_notify("READY=1");
    event_base_dispatch(sup.base);
    event_free(sup.ev_accept);
    event_free(sup.ev_resume);
    event_free(ev_chld);
    event_free(ev_int);
    event_free(ev_term);
    event_free(ev_hup);
    srv_metrics_stop(sup.metrics);
    srv_mps_stop(sup.mps);
    srv_preauth_destroy(sup.preauth);
    event_base_free(sup.base);
    transport_tcp_ops.listener_close(sup.listener);
    return 0;
}
