/* The client's configuration: one file found by a search order, then environment variables
 * over it. Shared by libcuda.so.1 and the rgpu tool (both link client/session/config.c; it uses
 * nothing of the session). Sizes (mem_quota, rgpu run --memory) follow rg_parse_size
 * (common/config.h).
 *
 * Search order: the file RGPU_CONFIG names, else ~/.config/rgpu/client.conf, else
 * /etc/rgpu/client.conf; the first that exists is read, alone. Keys (section [client], or
 * before any section): pool, server, tenant, token, token_file, mem_quota, mem_share, policy,
 * connect_timeout_ms, probe_timeout_ms, probe_sample, transport, lanes, gpus, session_timeout; one
 * typed row each in client/session/config.c. Every other section or key, every bad value, is an
 * error naming FILE:LINE (the client does not start on a file it cannot take whole). The file must
 * be a regular file (a FIFO is refused, never waited on); a file that sets token must be readable
 * by its owner only, as a token_file must. Environment, checked the same way: RGPU_SERVER (the
 * servers of the process, over any pool), RGPU_POOL (a pool, placed), RGPU_TENANT, RGPU_TOKEN,
 * RGPU_TOKEN_FILE, RGPU_MEM_QUOTA, RGPU_MEM_SHARE, RGPU_POLICY, RGPU_CONNECT_TIMEOUT_MS,
 * RGPU_PROBE_TIMEOUT_MS, RGPU_PROBE_SAMPLE, RGPU_TRANSPORT, RGPU_LANES, RGPU_GPUS,
 * RGPU_SESSION_TIMEOUT_MS. deploy/client.conf is the documented example; gpu-server --check-config
 * --client FILE checks one. */
#ifndef RGPU_CLIENT_CLIENT_CONFIG_H
#define RGPU_CLIENT_CLIENT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/status.h"
#include "scheduler/placement.h"

#define CLI_POOL_MAX       64
#define CLI_GPUS_MAX       64
#define CLI_DEFAULT_SERVER "127.0.0.1:7070"
#define CLI_DEFAULT_PORT   "7070"
#define CLI_TOKEN_MAX      255 /* characters of a token; a longer one is refused, not cut */
#define CLI_LANES_MAX      16  /* client/bulk/lanes.c */

struct cli_conf {
    char source[256];             /* the file read, "" when none */
    char pool[CLI_POOL_MAX][256]; /* entries as written: host:port, or a DNS name[:port] */
    int npool;
    /* The entries came from `pool` (or RGPU_POOL): the pool's placement picks ONE server for
     * the job. Else (`server`, repeated or a list, or RGPU_SERVER=a,b) every entry is a server
     * of the process: one session each, their devices 0..N-1 in order. */
    bool placed;
    char transport[8]; /* auto (default) | rdma | tcp */
    char tenant[128];
    char token[256];
    char token_file[256];
    uint64_t mem_quota; /* requested quota per GPU, 0 = the tenant's */
    double mem_share;   /* or the requested share of each GPU's memory (0, 1]; 0 = not asked.
                           The later of the two set wins (the environment over the file). */
    int lanes;          /* data lanes for large copies on TCP (0: none; default 4, measured on
                           the H100 host: client/bulk/lanes.c) */
    enum sched_policy policy;
    int connect_timeout_ms; /* per server, with the retries of a server busy or full */
    /* A call waiting this long without a word from its server (no reply, no keepalive) finds
     * the session gone: it and every later call fail with CUDA_ERROR_DEVICE_UNAVAILABLE. Only
     * against servers of protocol 1.3 and later (they keep a busy session talking); 0: never. */
    int session_timeout_ms;
    int probe_timeout_ms; /* the whole parallel probe of a pool */
    int probe_sample;     /* servers probed per round (0: all at once); docs/pool.md */
    /* GPUs the job asks for (0: not said). From a pool: placed on as many servers as it takes,
     * each admitting the job on all its GPUs, or refused; from listed servers: the first N of
     * their devices, refused when they have fewer. */
    int gpus;
};

/* A share of a GPU's memory: a fraction above 0 and at most 1 ("0.5") or a percentage ("50%").
 * false when malformed or out of range. */
bool cli_parse_share(const char *text, double *share_p);

/* The first of paths[0..n) that exists (NULL entries skipped), or NULL. */
const char *cli_conf_pick(const char *const *paths, int n);

/* Read the configuration as above into conf. On error (a bad value, a token file refused)
 * returns RG_ERR_INVALID with the reason in why. */
rg_status_t cli_conf_load(struct cli_conf *conf, char *why, size_t why_len);

/* Read one file (no search, no environment) over conf's current values; the first error (and
 * how many more) in why. */
rg_status_t cli_conf_read_file(struct cli_conf *conf, const char *path, char *why, size_t why_len);

/* Check one file as cli_conf_read_file would take it, every error to report (FILE:LINE: ...);
 * RG_OK when valid. For gpu-server --check-config --client. */
rg_status_t cli_conf_check_file(const char *path, rg_conf_report_fn report, void *report_arg);

/* Append the entries of list ("a:7070, b:7071 c") to conf's pool. */
rg_status_t cli_conf_add_pool(struct cli_conf *conf, const char *list, char *why, size_t why_len);

/* The token in path (its first line, at most CLI_TOKEN_MAX characters), if the file is a
 * regular file owned by this user and readable by nobody else; otherwise RG_ERR_REFUSED with
 * the reason in why. Never blocks on a FIFO. */
rg_status_t cli_token_file_read(const char *path, char *token, size_t token_len, char *why,
                                size_t why_len);

#endif
