/* gpu-server's settings and its two process roles: supervisor and session worker. */
#ifndef RGPU_SERVER_SERVER_H
#define RGPU_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/status.h"
#include "server/tenant_config.h"

struct srv_table;

#define SRV_DEFAULT_PORT       7070
#define SRV_CONFIG_DEVICES_MAX 16 /* entries of devices (SRV_MAX_DEVICES) */

enum srv_transport { SRV_TRANSPORT_AUTO, SRV_TRANSPORT_RDMA, SRV_TRANSPORT_TCP };

/* Everything gpu-server is told, typed: the [server] keys of the config file (one row each in
 * server/config.c, with bounds and defaults), its command-line flags, and its tenants. Parsed
 * once and checked whole; nothing reads the text again. */
struct srv_config {
    char listen[128]; /* address to listen on */
    int port;
    char devices[128];         /* "0,2" = serve driver ordinals 0 and 2; "" = all (checked: ordinals
                                  0..63, no repeats, at most SRV_CONFIG_DEVICES_MAX) */
    char driver[256];          /* driver library to dlopen; "" = libcuda.so.1 */
    int log_level;             /* enum rg_log_level */
    char name[64];             /* server name reported to clients */
    int busy_poll_us;          /* workers spin this long before blocking on a receive; 0 = off */
    int transport;             /* enum srv_transport: whether sessions may move to RDMA */
    char module_cache[256];    /* module cache directory; "" = default, "off" = none */
    uint64_t module_cache_max; /* its size bound in bytes; 0 = the default (4 GiB) */
    char host_nvml[256];       /* the host's NVML library; "" = libnvidia-ml.so.1, "off" */
    char config_path[256];     /* the config file, passed on to workers */
    char metrics_listen[128];  /* "ADDR:PORT" of /metrics and /status; "" = not served */
    char metrics_token[128];   /* required of their readers ("Authorization: Bearer"); "" = none,
                                  and then metrics_listen must be a loopback address */
    char metrics_public_listen[128]; /* "ADDR:PORT" of /metrics and /healthz without a token
                                        (cluster scraping, probes); "" = not served */
    bool rdma_direct;                /* GPUDirect RDMA for one-sided copies (default yes) */
    int sharing;             /* enum srv_sharing (server/session_table.h): time-sliced | mps */
    char nccl_library[256];  /* the GPU host's NCCL; "" = libnccl.so.2 (docs/nccl.md) */
    char nccl_secret[128];   /* mixed into the key binding NCCL unique ids to a tenant */
    int nccl_timeout_s;      /* before an unfinished collective aborts its comm; 0 = 600 */
    bool nccl_connect_pairs; /* connect p2p pairs of communicators a session holds whole */
    bool require_tenants;    /* refuse to start or reload with no [tenant] section */
    /* Bounds (docs/security.md) */
    int max_sessions;         /* sessions (worker processes) at once, all tenants */
    int max_pending;          /* connections before their hello, all peers */
    int max_pending_per_peer; /* ... from one peer address */
    int handshake_timeout_ms; /* for the hello to arrive whole, from the accept */
    int recv_timeout_ms;      /* a session's message (or copy) that stops arriving this long */
    int idle_timeout_s;       /* a session with no call this long is ended; 0 = never */
    int hello_fd;             /* workers: pipe with the hello the supervisor read; 0 = none */
    struct srv_tenants tenants;
    struct srv_table *table; /* workers: the supervisor's shared session table; NULL = none */
};

/* The config (server/config.c). Every error is reported once, as FILE:LINE: what is wrong and
 * what is accepted, through report (NULL: rg_error). */
/* The defaults of every key; name = the host name. */
void srv_config_init(struct srv_config *c);
/* The text of a config file (origin names it in messages) over c: [server] keys and
 * [tenant NAME] sections, every one checked; RG_OK only when there was no error. */
rg_status_t srv_config_parse(struct srv_config *c, const char *text, size_t len, const char *origin,
                             rg_conf_report_fn report, void *report_arg);
/* rg_conf_read_file (regular files only, never blocking on a FIFO), then the above. */
rg_status_t srv_config_load_file(struct srv_config *c, const char *path, rg_conf_report_fn report,
                                 void *report_arg);
/* One [server] key from a flag, checked as in a file; the accepted form in why. */
rg_status_t srv_config_set(struct srv_config *c, const char *key, const char *value, char *why,
                           size_t why_len);
/* A [server] key's value as text its parser takes back (for the workers' flags). */
void srv_config_format(const struct srv_config *c, const char *key, char *buf, size_t len);
/* Checks of the config as a whole, at start and before a reload is taken: with no tenant, an
 * error when require_tenants is set, else a warning (the server is open to any client). */
rg_status_t srv_config_check(const struct srv_config *c, const char *origin,
                             rg_conf_report_fn report, void *report_arg);
/* The [server] and [tenant NAME] sections (their keys and defaults), for the usage text. */
extern const struct rg_conf_section srv_config_sections[2];

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
