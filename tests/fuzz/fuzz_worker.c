/* Fuzz target: a session worker on the fake driver (srv_worker_run, in this process) reading
 * the input as the frames a client sends after its Hello: every handler behind the dispatch,
 * with the checks the wire gets. The session is a tenant's with a 64 MiB quota, so what it
 * asks the worker to hold stays bounded; the fake driver has 64 MiB of device memory. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "proto/frame.h"
#include "server/server.h"
#include "server/tenant_config.h"
#include "tests/fuzz/fuzz.h"

#define FD_SCAN 1024

static struct srv_config cfg = {.driver = FAKECUDA_PATH,
                                .log_level = RG_LOG_ERROR,
                                .name = "fuzz",
                                .module_cache = "off",
                                .host_nvml = "off"};
static uint8_t hello[256];
static size_t hello_len;
static bool quiet;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    Rgpu__Hello h = RGPU__HELLO__INIT;
    struct proto_frame_hdr hdr = {.magic = PROTO_MAGIC, .type = PROTO_HELLO};

    (void)argc, (void)argv;
    setenv("FAKECUDA_MEM_MB", "64", 1);
    quiet = getenv("RGPU_FUZZ_LOG") == NULL; /* RGPU_FUZZ_LOG=1: the worker's log, to debug */
    rg_log_level_current = quiet ? -1 : RG_LOG_DEBUG;
    if (srv_tenant_key(&cfg.tenants, "fuzz", "token", "fuzz") != RG_OK ||
        srv_tenant_key(&cfg.tenants, "fuzz", "mem_quota", "64MiB") != RG_OK)
        return 1;
    h.proto_version = PROTO_VERSION;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.tenant = "fuzz";
    h.token = "fuzz";
    hdr.msg_len = (uint32_t)rgpu__hello__get_packed_size(&h);
    memcpy(hello, &hdr, sizeof(hdr));
    hello_len = sizeof(hdr) + rgpu__hello__pack(&h, hello + sizeof(hdr));
    return 0;
}

/* Descriptors left open by earlier inputs: what they are (a few of each kind), then abort. */
static void fd_leak_abort(int fd)
{
    char path[64], target[256];

    fprintf(stderr, "fuzz_worker: descriptors leak across sessions (fd %d); open now:\n", fd);
    for (int i = 0; i <= fd; i++) {
        ssize_t n;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
        if ((n = readlink(path, target, sizeof(target) - 1)) > 0 && (i < 64 || i % 64 == 0)) {
            target[n] = '\0';
            fprintf(stderr, "  %d -> %s\n", i, target);
        }
    }
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool open_before[FD_SCAN];
    struct fuzz_feed feed;
    int out = dup(STDOUT_FILENO), err = dup(STDERR_FILENO);

    for (int fd = 0; fd < FD_SCAN; fd++)
        open_before[fd] = fcntl(fd, F_GETFD) >= 0;
    if (fuzz_feed_start(&feed, hello, hello_len, data, size) != 0) { /* no socket pair now */
        close(out);
        close(err);
        return 0;
    }
    if (feed.fds[0] >= FD_SCAN || feed.fds[1] >= FD_SCAN) /* earlier sessions leaked some */
        fd_leak_abort(feed.fds[1]);
    open_before[feed.fds[0]] = true;
    srv_worker_run(&cfg, feed.fds[1], 1, "fuzz");
    /* The worker made stdout and stderr pipes for kernels' output, kept a copy of stderr for
     * its log and of its connection, as a worker process that exits after one session may:
     * undo that, which also lets the feeding thread see the end of the session. */
    fflush(stdout);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    close(out);
    close(err);
    for (int fd = 3; fd < FD_SCAN; fd++)
        if (!open_before[fd] && fcntl(fd, F_GETFD) >= 0)
            close(fd);
    fuzz_feed_end(&feed);
    rg_log_set_callback(NULL);
    rg_log_level_current = quiet ? -1 : RG_LOG_DEBUG;
    return 0;
}
