/* The supervisor: a libevent loop that accepts clients and forks/execs one worker process per
 * session, reaps workers and logs how each session ended. It owns the shared session table
 * (server/session_table.h) that its workers inherit, reloads the tenants on SIGHUP without
 * touching running sessions, and serves /metrics and /status (server/metrics.c). It never
 * touches CUDA itself. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "server/metrics.h"
#include "server/sd_notify.h"
#include "server/server.h"
#include "server/session_table.h"
#include "transport/rdma.h"
#include "transport/transport.h"

#define MAX_WORKERS 1024

struct worker {
    pid_t pid;
    uint64_t session;
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
} sup;

static void peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
            port = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
            port = ntohs(sin6->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%d", host, port);
}

/* In the child: exec ourselves as a worker on the inherited socket. */
static void exec_worker(int fd, uint64_t session, const char *peer)
{
    const struct srv_config *c = sup.cfg;
    char fdbuf[16], sid[24], tfd[16];
    int wfd = dup(fd); /* dup clears close-on-exec */
    char *argv[] = {(char *)sup.self_exe, "--worker-fd", fdbuf, "--session", sid, "--peer",
                    (char *)peer, "--driver", (char *)c->driver, "--devices", (char *)c->devices,
                    "--log-level", (char *)c->log_level, "--name", (char *)c->name,
                    "--busy-poll-us", (char *)c->busy_poll_us, "--transport",
                    (char *)c->transport, "--table-fd", tfd, NULL, NULL, NULL};
    size_t n = sizeof(argv) / sizeof(argv[0]) - 3;

    if (c->config_path[0] != '\0') { /* the worker reads its tenants from the same file */
        argv[n] = "--config";
        argv[n + 1] = (char *)c->config_path;
    }
    snprintf(fdbuf, sizeof(fdbuf), "%d", wfd);
    snprintf(sid, sizeof(sid), "%llu", (unsigned long long)session);
    snprintf(tfd, sizeof(tfd), "%d", sup.table_fd);
    execv(sup.self_exe, argv);
    rg_error("cannot exec the worker %s: %m", sup.self_exe);
    _exit(127);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct transport_conn *conn;
    struct worker *w = NULL;
    char peer[64];
    pid_t pid;

    if (sup.listener->ops->accept(sup.listener, &conn) != RG_OK) {
        /* e.g. out of file descriptors: the listener stays readable, so do not spin on it */
        struct timeval pause = {1, 0};
        rg_warn("not accepting new sessions for 1 s after a failed accept");
        event_del(sup.ev_accept);
        evtimer_add(sup.ev_resume, &pause);
        return;
    }
    peer_name(transport_fd(conn), peer, sizeof(peer));
    for (int i = 0; i < MAX_WORKERS && w == NULL; i++)
        if (sup.workers[i].pid == 0)
            w = &sup.workers[i];
    if (w == NULL) {
        rg_warn("refusing %s: %d sessions already running", peer, MAX_WORKERS);
        transport_close(conn);
        return;
    }
    w->session = ++sup.next_session;
    pid = fork();
    if (pid == 0)
        exec_worker(transport_fd(conn), w->session, peer);
    if (pid < 0)
        rg_error("fork for %s failed: %m", peer);
    else {
        w->pid = pid;
        snprintf(w->peer, sizeof(w->peer), "%s", peer);
        rg_info("session %llu from %s: worker pid %d", (unsigned long long)w->session, peer,
                (int)pid);
    }
    transport_close(conn);
}

static void reap(evutil_socket_t sig, short what, void *arg)
{
    int status;
    pid_t pid;
    char tenant[64], who[80];

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct worker *w = &sup.workers[i];
            if (w->pid != pid)
                continue;
            srv_table_release_pid(sup.table, pid, tenant, sizeof(tenant));
            snprintf(who, sizeof(who), "%s%s%s", tenant[0] ? "tenant=" : "", tenant,
                     tenant[0] ? " " : "");
            if (WIFEXITED(status))
                rg_info("%ssession %llu (peer %s) ended: worker exited with status %d%s",
                        who, (unsigned long long)w->session, w->peer, WEXITSTATUS(status),
                        WEXITSTATUS(status) == 2 ? " (malformed message)" : "");
            else
                rg_warn("%ssession %llu (peer %s) ended: worker killed by signal %d",
                        who, (unsigned long long)w->session, w->peer, WTERMSIG(status));
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

/* SIGHUP: read the tenants again. Running sessions keep going: their weight, cap and class
 * come from the table and change at once; tokens, quotas and session limits apply to the
 * sessions that start from now on (each worker reads the file when it starts). */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    struct srv_tenants *fresh;

    if (sup.cfg->config_path[0] == '\0') {
        rg_warn("SIGHUP: no config file to reload (started without --config)");
        return;
    }
    if ((fresh = calloc(1, sizeof(*fresh))) == NULL)
        return;
    srv_notify("RELOADING=1");
    if (srv_tenants_load(sup.cfg->config_path, fresh) != RG_OK)
        rg_error("SIGHUP: cannot read %s; the tenants stay as they were", sup.cfg->config_path);
    else {
        srv_table_set_tenants(sup.table, fresh);
        rg_info("SIGHUP: reloaded %s: %d tenant(s); running sessions go on",
                sup.cfg->config_path, fresh->n);
    }
    free(fresh);
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

    if (strcmp(cfg->transport, "tcp") == 0) {
        rg_info("transport tcp: sessions stay on TCP");
        return 0;
    }
    if (transport_rdma_probe(why, sizeof(why)) == RG_OK) {
        rg_info("transport %s: sessions whose client asks move to RDMA", cfg->transport);
        return 0;
    }
    if (strcmp(cfg->transport, "rdma") == 0) {
        rg_error("transport = rdma but this host cannot use RDMA: %s", why);
        return 1;
    }
    rg_info("transport auto: TCP only (%s)", why);
    return 0;
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
    srv_table_set_tenants(sup.table, &cfg->tenants);
    signal(SIGPIPE, SIG_IGN);
    sup.base = event_base_new();
    if (cfg->metrics_listen[0] != '\0' &&
        srv_metrics_start(sup.base, cfg->metrics_listen, sup.table, cfg->name, &sup.metrics) !=
            RG_OK) {
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
    event_base_free(sup.base);
    transport_tcp_ops.listener_close(sup.listener);
    return 0;
}
