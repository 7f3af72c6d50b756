/* The session with gpu-server: its state (cli_sess, client/session.h), the hooks of the layers
 * above, and its opening on first use: configuration (config.c), a server of the pool (pool.c:
 * probe, placement, failover at start) connected and hand-shaken (handshake.c), then the call
 * stream (call_stream.c) on one connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "client/pool.h"
#include "client/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

/* ---- hooks of the layers above -------------------------------------------------------- */

static void no_lanes_offered(const char *addr, const void *secret, size_t secret_len, int want) {}

static CUresult no_after_reply(CUresult res)
{
    return res;
}

static const struct cli_session_hooks no_hooks = {
    .lanes_offered = no_lanes_offered,
    .after_reply = no_after_reply,
};

struct cli_session cli_sess = {.lock = PTHREAD_MUTEX_INITIALIZER,
                               .next_call_id = 1,
                               .batch_cond = PTHREAD_COND_INITIALIZER,
                               .hooks = &no_hooks};

void cli_session_set_hooks(const struct cli_session_hooks *h)
{
    cli_sess.hooks = h;
}

/* One server of the pool (cli_pool_try_fn): connect and hand-shake; on failure nothing is
 * left open and why says what happened. */
static int session_try(const char *addr, const struct cli_conf *conf, char *why, size_t why_len)
{
    struct transport_opts opts = {.connect_timeout_ms = conf->connect_timeout_ms};
    rg_status_t status;
    CUresult res;

    snprintf(cli_sess.server, sizeof(cli_sess.server), "%s", addr);
    status = transport_tcp_ops.connect(addr, &opts, &cli_sess.conn);
    if (status != RG_OK) {
        snprintf(why, why_len, "cannot reach gpu-server at %s: %s%s", addr, rg_status_str(status),
                 conf->npool > 1 ? ""
                                 : ". Start gpu-server there, or point the client at one with "
                                   "RGPU_SERVER=host:port or a client config (RGPU_CONFIG, "
                                   "~/.config/rgpu/client.conf, /etc/rgpu/client.conf) with "
                                   "'pool = host:port ...'");
        cli_sess.conn = NULL;
        return CUDA_ERROR_NO_DEVICE;
    }
    res = cli_handshake(conf, &opts, why, why_len);
    if (res != CUDA_SUCCESS) {
        transport_close(cli_sess.conn);
        if (cli_sess.tcp_ctl != NULL)
            transport_close(cli_sess.tcp_ctl);
        cli_sess.conn = cli_sess.tcp_ctl = NULL;
        free(cli_sess.devices);
        cli_sess.devices = NULL;
        cli_sess.ndevices = 0;
    }
    return res;
}

/* Configuration (config.c), then a server of the pool (pool.c tries them in the policy's order
 * through session_try), then the call stream. */
static CUresult session_open(void)
{
    struct cli_conf conf;
    char why[512];
    CUresult res;

    /* A library stays quiet unless asked: warnings and errors only by default. */
    rg_log_set_level(RG_LOG_WARN);
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    if (cli_conf_load(&conf, why, sizeof(why)) != RG_OK) {
        rg_error("client configuration: %s", why);
        return CUDA_ERROR_INVALID_VALUE;
    }
    cli_sess.trace_calls = getenv("RGPU_TRACE_CALLS") != NULL;
    snprintf(cli_sess.server, sizeof(cli_sess.server), "%s",
             conf.npool == 1 ? conf.pool[0] : "the pool");
    cli_sess.recv_buf = malloc(RECV_BUF_SIZE);
    if (cli_sess.recv_buf == NULL || proto_arena_init(&cli_sess.arena, 64u << 10) != RG_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = cli_transport_choose(conf.transport)) != CUDA_SUCCESS)
        return res;
    cli_sess.pid = getpid();
    res = (CUresult)cli_pool_connect(&conf, session_try, CUDA_ERROR_NO_DEVICE);
    if (res == CUDA_SUCCESS && getenv("RGPU_BUSY_POLL_US") != NULL)
        transport_set_busy_poll(cli_sess.conn, (unsigned)atoi(getenv("RGPU_BUSY_POLL_US")));
    if (res == CUDA_SUCCESS)
        res = cli_batch_start();
    if (res != CUDA_SUCCESS && cli_sess.conn != NULL) {
        transport_close(cli_sess.conn);
        if (cli_sess.tcp_ctl != NULL)
            transport_close(cli_sess.tcp_ctl);
        cli_sess.conn = cli_sess.tcp_ctl = NULL;
    }
    return res;
}

CUresult cli_ensure_init(void)
{
    CUresult res;

    pthread_mutex_lock(&cli_sess.lock);
    if (!cli_sess.tried) {
        cli_sess.init_result = session_open();
        cli_sess.tried = true;
    }
    res = cli_sess.init_result;
    pthread_mutex_unlock(&cli_sess.lock);
    return res;
}

bool cli_initialized(void)
{
    /* cli_sess.tried is only ever set once, under the lock, after init_result. */
    return __atomic_load_n(&cli_sess.tried, __ATOMIC_ACQUIRE) &&
           cli_sess.init_result == CUDA_SUCCESS;
}

int cli_device_count(void)
{
    return cli_initialized() ? cli_sess.ndevices : 0;
}

const struct cli_device *cli_device(int ordinal)
{
    if (!cli_initialized() || ordinal < 0 || ordinal >= cli_sess.ndevices)
        return NULL;
    return &cli_sess.devices[ordinal];
}

/* cli_sess.conn never changes once the session is open; a session lost meanwhile is noticed by
 * the call that follows. */
struct transport_conn *cli_session_rdma_conn(void)
{
    if (!cli_initialized() || cli_sess.forked || cli_sess.conn == NULL ||
        !(cli_sess.conn->ops->caps & TRANSPORT_CAP_ONE_SIDED))
        return NULL;
    return cli_sess.conn;
}

