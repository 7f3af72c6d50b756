/* rgpu: the command line.
 *   rgpu run [--server HOST:PORT] [--config FILE] -- CMD [ARGS...]
 * runs CMD with the rgpu client first in its library path, so its CUDA calls go to a remote
 * gpu-server. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rgpu run [--server HOST:PORT] [--config FILE] -- CMD [ARGS...]\n"
            "  Runs CMD with rgpu's libcuda.so.1 first in LD_LIBRARY_PATH, so every CUDA call\n"
            "  goes to the gpu-server named by --server, RGPU_SERVER, or the config file\n"
            "  (--config or RGPU_CONFIG; key 'server = host:port'). rgpu's libnccl.so.2 is\n"
            "  preloaded (LD_PRELOAD) so NCCL calls run on the GPU hosts (RGPU_NCCL=0: not).\n");
}

/* The directory holding libcuda.so.1: RGPU_LIBDIR, else <exe dir>/../lib/rgpu where the
 * client is there (as installed: /usr/bin/rgpu, /usr/lib/rgpu), else <exe dir>/../lib. */
static int find_libdir(char *buf, size_t len)
{
    char exe[PATH_MAX], *dir;
    ssize_t n;
    const char *env = getenv("RGPU_LIBDIR");

    if (env != NULL && env[0] != '\0')
        return snprintf(buf, len, "%s", env) < (int)len ? 0 : -1;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0)
        return -1;
    exe[n] = '\0';
    dir = dirname(exe);
    if (snprintf(buf, len, "%s/../lib/rgpu/libcuda.so.1", dir) < (int)len &&
        access(buf, R_OK) == 0)
        return snprintf(buf, len, "%s/../lib/rgpu", dir) < (int)len ? 0 : -1;
    return snprintf(buf, len, "%s/../lib", dir) < (int)len ? 0 : -1;
}

static int prepend_env(const char *name, const char *dir)
{
    const char *old = getenv(name);
    size_t len = strlen(dir) + (old ? strlen(old) : 0) + 2;
    char *val = malloc(len);
    int rc;

    if (val == NULL)
        return -1;
    snprintf(val, len, "%s%s%s", dir, old && old[0] ? ":" : "", old ? old : "");
    rc = setenv(name, val, 1);
    free(val);
    return rc;
}

/* PyTorch finds libnccl.so.2 through its own RUNPATH (site-packages/nvidia/nccl/lib), which
 * LD_LIBRARY_PATH does not override, so rgpu's NCCL shim is preloaded (RGPU_NCCL=0: not). */
static int preload_nccl(const char *libdir)
{
    char shim[PATH_MAX + 32];
    const char *off = getenv("RGPU_NCCL");

    snprintf(shim, sizeof(shim), "%s/libnccl.so.2", libdir);
    if ((off != NULL && strcmp(off, "0") == 0) || access(shim, R_OK) != 0)
        return 0;
    return prepend_env("LD_PRELOAD", shim);
}

static int cmd_run(int argc, char **argv)
{
    char libdir[PATH_MAX], probe[PATH_MAX + 32];
    int i;

    for (i = 0; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--server") == 0 && i + 1 < argc)
            setenv("RGPU_SERVER", argv[++i], 1);
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            setenv("RGPU_CONFIG", argv[++i], 1);
        else
            break;
    }
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (find_libdir(libdir, sizeof(libdir)) != 0) {
        fprintf(stderr, "rgpu: cannot locate the client library directory\n");
        return 1;
    }
    snprintf(probe, sizeof(probe), "%s/libcuda.so.1", libdir);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "rgpu: %s: %s (set RGPU_LIBDIR)\n", probe, strerror(errno));
        return 1;
    }
    if (prepend_env("LD_LIBRARY_PATH", libdir) != 0 || preload_nccl(libdir) != 0)
        return 1;
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "rgpu: cannot run %s: %s\n", argv[i], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
