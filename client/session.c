/* The session with gpu-server: its state (cli_sess, client/session.h), the hooks of the layers
 * above, and its opening on first use: configuration (config.c), connection, handshake
 * (handshake.c), then the call stream (call_stream.c) on one connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

static CUresult session_open(void)
{
    struct cli_conf conf;
    struct transport_opts opts = {0};
    const char *timeout = getenv("RGPU_CONNECT_TIMEOUT_MS");
    rg_status_t status;
    CUresult res;

    /* A library stays quiet unless asked: warnings and errors only by default. */
    rg_log_set_level(RG_LOG_WARN);
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    cli_conf_load(&conf);
    cli_sess.trace_calls = getenv("RGPU_TRACE_CALLS") != NULL;
    snprintf(cli_sess.server, sizeof(cli_sess.server), "%s", conf.server);
    opts.connect_timeout_ms = timeout ? atoi(timeout) : 5000;
    cli_sess.recv_buf = malloc(RECV_BUF_SIZE);
    if (cli_sess.recv_buf == NULL || proto_arena_init(&cli_sess.arena, 64u << 10) != RG_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = cli_transport_choose(conf.transport)) != CUDA_SUCCESS)
        return res;
    status = transport_tcp_ops.connect(conf.server, &opts, &cli_sess.conn);
    if (status != RG_OK) {
        rg_error("cannot reach gpu-server at %s: %s. Start gpu-server there, or point "
                 "the client at one with RGPU_SERVER=host:port or RGPU_CONFIG=<file with "
                 "'server = host:port'>",
                 conf.server, rg_status_str(status));
        return CUDA_ERROR_NO_DEVICE;
    }
    cli_sess.pid = getpid();
    res = cli_handshake(&conf, &opts);
    if (res == CUDA_SUCCESS && getenv("RGPU_BUSY_POLL_US") != NULL)
        transport_set_busy_poll(cli_sess.conn, (unsigned)atoi(getenv("RGPU_BUSY_POLL_US")));
    if (res == CUDA_SUCCESS)
        res = cli_batch_start();
    if (res != CUDA_SUCCESS) {
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

