/* The server's own MPS control daemon (server/mps.h). */
#include "server/mps.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define MPS_CONTROL "nvidia-cuda-mps-control"

struct srv_mps {
    pid_t pid;    /* the daemon, our child; 0 once reaped */
    char dir[80]; /* what we created: pipe/ and log/ below it */
    char pipe_dir[96], log_dir[96];
};

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* In a child: the daemon's directories in the environment, then exec the control program with
 * argv (its stdin from in_fd when >= 0). Never returns. */
static void exec_control(const struct srv_mps *m, char *const argv[], int in_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* a supervisor killed outright takes it along */
    setenv("CUDA_MPS_PIPE_DIRECTORY", m->pipe_dir, 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", m->log_dir, 1);
    if (in_fd >= 0 && dup2(in_fd, STDIN_FILENO) < 0)
        _exit(127);
    execvp(MPS_CONTROL, argv);
    rg_error("cannot run %s: %m (sharing = mps needs NVIDIA's MPS on the PATH)", MPS_CONTROL);
    _exit(127);
}

/* waitpid(pid) for at most ms; true once it has ended (or is not our child any more). */
static bool wait_exit(pid_t pid, long ms)
{
    for (long waited = 0;; waited += 20) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (waited >= ms)
            return false;
        pause_ms(20);
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static void remove_dirs(struct srv_mps *m)
{
    if (m->dir[0] != '\0' && nftw(m->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
        rg_warn("cannot remove the MPS directory %s: %m", m->dir);
}

static bool came_up(const struct srv_mps *m)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/control", m->pipe_dir);
    if (access(path, F_OK) == 0)
        return true;
    snprintf(path, sizeof(path), "%s/" MPS_CONTROL ".pid", m->pipe_dir);
    return access(path, F_OK) == 0;
}

rg_status_t srv_mps_start(struct srv_table *t, struct srv_mps **mps_p)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    char *argv[] = {MPS_CONTROL, "-f", NULL};
    struct srv_mps *m = calloc(1, sizeof(*m));
    int waited;

    if (m == NULL)
        return RG_ERR_NOMEM;
    if (base == NULL || base[0] == '\0' || access(base, W_OK) != 0 || strlen(base) > 40)
        base = "/tmp";
    snprintf(m->dir, sizeof(m->dir), "%s/rgpu-mps-XXXXXX", base);
    if (mkdtemp(m->dir) == NULL) {
        rg_error("sharing = mps: cannot create a directory for the MPS daemon in %s: %m", base);
        goto err_free;
    }
    snprintf(m->pipe_dir, sizeof(m->pipe_dir), "%s/pipe", m->dir);
    snprintf(m->log_dir, sizeof(m->log_dir), "%s/log", m->dir);
    if (mkdir(m->pipe_dir, 0700) != 0 || mkdir(m->log_dir, 0700) != 0) {
        rg_error("sharing = mps: cannot create %s/pipe and log: %m", m->dir);
        goto err_dirs;
    }
    if ((m->pid = fork()) < 0) {
        rg_error("sharing = mps: fork: %m");
        goto err_dirs;
    }
    if (m->pid == 0)
        exec_control(m, argv, -1);
    for (waited = 0; waited < 5000 && !came_up(m); waited += 20) {
        if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
            rg_error("sharing = mps: %s -f exited at once (its log: %s)", MPS_CONTROL, m->log_dir);
            m->pid = 0;
            goto err_dirs;
        }
        pause_ms(20);
    }
    if (!came_up(m))
        rg_warn("sharing = mps: %s (pid %d) has not made its control pipe in %s after 5 s; "
                "going on",
                MPS_CONTROL, (int)m->pid, m->pipe_dir);
    snprintf(t->mps_pipe_dir, sizeof(t->mps_pipe_dir), "%s", m->pipe_dir);
    snprintf(t->mps_log_dir, sizeof(t->mps_log_dir), "%s", m->log_dir);
    t->sharing = SRV_SHARING_MPS;
    rg_info("sharing = mps: MPS control daemon pid %d, CUDA_MPS_PIPE_DIRECTORY=%s, "
            "CUDA_MPS_LOG_DIRECTORY=%s; the sessions' kernels run concurrently",
            (int)m->pid, m->pipe_dir, m->log_dir);
    *mps_p = m;
    return RG_OK;
err_dirs:
    remove_dirs(m);
err_free:
    free(m);
    return RG_ERR_IO;
}

bool srv_mps_reaped(struct srv_mps *m, pid_t pid, int status)
{
    if (m == NULL || m->pid == 0 || pid != m->pid)
        return false;
    m->pid = 0;
    rg_error("the MPS control daemon (pid %d) ended (%s %d): sessions that start now run "
             "without MPS; its log is in %s",
             (int)pid, WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), m->log_dir);
    return true;
}

/* "quit" to the daemon through the control program's client mode (bounded). */
static void send_quit(struct srv_mps *m)
{
    char *argv[] = {MPS_CONTROL, NULL};
    int fds[2];
    pid_t pid;

    if (pipe(fds) != 0)
        return;
    if ((pid = fork()) == 0) {
        close(fds[1]);
        exec_control(m, argv, fds[0]);
    }
    close(fds[0]);
    if (pid > 0 && write(fds[1], "quit\n", 5) != 5)
        rg_warn("cannot send quit to the MPS control daemon: %m");
    close(fds[1]);
    if (pid > 0 && !wait_exit(pid, 5000)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

void srv_mps_stop(struct srv_mps *m)
{
    if (m == NULL)
        return;
    if (m->pid > 0) {
        send_quit(m);
        if (!wait_exit(m->pid, 10000)) {
            rg_warn("the MPS control daemon (pid %d) did not quit in 10 s; killing it",
                    (int)m->pid);
            kill(m->pid, SIGKILL);
            waitpid(m->pid, NULL, 0);
        }
        rg_info("MPS control daemon stopped");
    }
    remove_dirs(m);
    free(m);
}
