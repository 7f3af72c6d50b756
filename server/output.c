/* What kernels print: device printf goes to the worker's stdout and device assert messages to
 * its stderr, as locally. Both are pipes; whatever is in them is sent to the client (flagged
 * with the stream it came from) before each reply, so it appears in order with the call that
 * synchronized. The worker's own log lines keep going to the original stderr. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "common/log.h"
#include "server/session.h"

/* The process's original stderr, where the log goes once fd 2 is a pipe. Process-wide, not the
 * session's: fds 1 and 2 and the log callback (common/log.h, which takes no argument) belong
 * to the process, whichever session captured them. */
static int log_fd = STDERR_FILENO;

/* The output component's state (server/components.def): the read ends of the pipes that are
 * stdout and stderr, or -1. No teardown: the pipes are the process's stdout and stderr until
 * it exits (closing their read ends would make a later write there raise SIGPIPE). */
struct srv_output {
    int fd[2];
};

static struct srv_output *output_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_OUTPUT);
}

static rg_status_t output_init(struct srv_session *s, void *state)
{
    struct srv_output *o = state;

    o->fd[0] = o->fd[1] = -1;
    return RG_OK;
}

const struct srv_component srv_output_component = {
    .name = "output", .state_size = sizeof(struct srv_output), .init = output_init};

static void log_to_original_stderr(enum rg_log_level level, const char *line)
{
    (void)level;
    dprintf(log_fd, "%s\n", line);
}

/* Make fd (1 or 2) the write end of a pipe; the read end, or -1. */
static int capture_fd(int fd)
{
    int fds[2];

    if (pipe(fds) != 0)
        return -1;
    if (dup2(fds[1], fd) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    close(fds[1]);
    /* As large as CUDA's default printf FIFO (1 MiB), so a kernel's output fits before we read
     * it; a larger cudaLimitPrintfFifoSize could fill the pipe (documented limit). */
    fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    return fds[0];
}

void srv_output_capture(struct srv_session *s)
{
    struct srv_output *o = output_of(s);
    int saved = dup(STDERR_FILENO);

    fflush(stdout);
    fflush(stderr);
    o->fd[0] = capture_fd(STDOUT_FILENO);
    o->fd[1] = -1;
    if (saved < 0)
        return;
    fcntl(saved, F_SETFD, FD_CLOEXEC);
    log_fd = saved;
    rg_log_set_callback(log_to_original_stderr);
    o->fd[1] = capture_fd(STDERR_FILENO);
}

rg_status_t srv_output_forward(struct srv_session *s)
{
    struct srv_output *o = output_of(s);
    struct pollfd p[2];
    char buf[16384];
    ssize_t n;

    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++)
        p[i] = (struct pollfd){o->fd[i], POLLIN, 0};
    /* One system call when nothing was printed, as after almost every call. */
    if (poll(p, 2, 0) <= 0)
        return RG_OK;
    for (int i = 0; i < 2; i++) {
        if (o->fd[i] < 0 || !(p[i].revents & POLLIN))
            continue;
        while ((n = read(o->fd[i], buf, sizeof(buf))) > 0) {
            rg_status_t st = proto_send_flags(s->conn, PROTO_OUTPUT, i ? PROTO_OUTPUT_STDERR : 0,
                                              NULL, buf, (uint64_t)n);
            if (st != RG_OK)
                return st;
        }
    }
    return RG_OK;
}
