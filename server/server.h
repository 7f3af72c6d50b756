/* gpu-server's settings and its two process roles: supervisor and session worker. */
#ifndef RGPU_SERVER_SERVER_H
#define RGPU_SERVER_SERVER_H

#include <stdint.h>

#include "common/status.h"
#include "server/tenant_config.h"

struct srv_table;

#define SRV_DEFAULT_PORT 7070

struct srv_config {
    char listen[128];   /* address to listen on */
    int port;
    char devices[128];  /* "0,2" = serve driver ordinals 0 and 2; "" = all */
    char driver[256];   /* driver library to dlopen; "" = libcuda.so.1 */
    char log_level[16];
    char name[64];      /* server name reported to clients */
    char busy_poll_us[16]; /* workers spin this long before blocking on a receive; "" = off */
    char transport[8];  /* auto | rdma | tcp: whether sessions may move to RDMA (docs/ARCHITECTURE.md) */
    char module_cache[256];    /* module cache directory; "" = default, "off" = none */
    char module_cache_max[32]; /* its size bound ("4GiB"); "" = default */
    char host_nvml[256];       /* the host's NVML library; "" = libnvidia-ml.so.1, "off" */
    char config_path[256]; /* the config file, passed on to workers */
    char metrics_listen[128]; /* "ADDR:PORT" of /metrics and /status; "" = not served */
    char metrics_token[128];  /* required of their readers ("Authorization: Bearer"); "" = none,
                                 and then metrics_listen must be a loopback address */
    char rdma_direct[8];      /* on | off: GPUDirect RDMA for one-sided copies; "" = on */
    char sharing[16];         /* time-sliced | mps: how sessions share a GPU; "" = time-sliced */
    char nccl_library[256];   /* the GPU host's NCCL; "" = libnccl.so.2 (docs/nccl.md) */
    char nccl_secret[128];    /* mixed into the key binding NCCL unique ids to a tenant */
    char nccl_timeout[16];    /* seconds before an unfinished collective aborts its comm */
    /* Bounds (docs/security.md; defaults in server/main.c) */
    int max_sessions;         /* sessions (worker processes) at once, all tenants */
    int max_pending;          /* connections before their hello, all peers */
    int max_pending_per_peer; /* ... from one peer address */
    int handshake_timeout_ms; /* for the hello to arrive whole, from the accept */
    int recv_timeout_ms;      /* a session's message (or copy) that stops arriving this long */
    int idle_timeout_s;       /* a session with no call this long is ended; 0 = never */
    int hello_fd;             /* workers: pipe with the hello the supervisor read; 0 = none */
    struct srv_tenants tenants;
    /* The config file parser (server/main.c) as the workers run it: the supervisor checks with
     * it that a file reloaded on SIGHUP will load in its workers too. */
    rg_status_t (*parse_file)(const char *path, struct srv_config *c);
    struct srv_table *table; /* workers: the supervisor's shared session table; NULL = none */
};

/* Supervisor: accept connections and fork/exec one worker per session. Returns exit status. */
int srv_supervisor_run(const struct srv_config *cfg, const char *self_exe);
/* Worker: serve one session on the connected socket fd. Returns exit status. */
int srv_worker_run(const struct srv_config *cfg, int fd, uint64_t session_id, const char *peer);

/* RGPU_WORKER_STATS=1 (server/worker_stats.c): time per operation, logged at the session's
 * end. srv_worker_stats_now is 0 when off; srv_worker_stats_add(op, 0) does nothing. */
uint64_t srv_worker_stats_now(void);
void srv_worker_stats_add(unsigned op, uint64_t since_ns);
void srv_worker_stats_report(void);
/* In a short-lived child: open the driver, log the GPUs served. 0 when usable. */
int srv_driver_check(const struct srv_config *cfg);

#endif
