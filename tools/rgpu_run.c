/* rgpu run: CMD with rgpu's libcuda.so.1 first in its library path; the pool options go to it
 * through the environment the client configuration reads. The directory put on
 * LD_LIBRARY_PATH holds only the driver-shaped libraries (libcuda.so.1, libnvidia-ml.so.1,
 * libnccl.so.2): the libraries they need themselves, where rgpu brings its own copies (a
 * container layer, deploy/docker/Dockerfile.client), sit in its deps/ subdirectory, which only
 * their RUNPATH names, so the application keeps its own libcrypto and the like. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu.h"

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

int rgpu_cmd_run(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    char libdir[PATH_MAX], probe[PATH_MAX + 32];
    int first, rc = rgpu_parse_opts(RGPU_RUN, argc, argv, &opts, &conf, &first);

    if (rc >= 0)
        return rc;
    if (rgpu_find_libdir(libdir, sizeof(libdir)) != 0) {
        fprintf(stderr, "rgpu run: cannot locate the client library directory\n");
        return 1;
    }
    snprintf(probe, sizeof(probe), "%s/libcuda.so.1", libdir);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "rgpu run: %s: %s (set RGPU_LIBDIR)\n", probe, strerror(errno));
        return 1;
    }
    if (prepend_env("LD_LIBRARY_PATH", libdir) != 0 || preload_nccl(libdir) != 0)
        return 1;
    execvp(argv[first], &argv[first]);
    fprintf(stderr, "rgpu run: cannot run %s: %s\n", argv[first], strerror(errno));
    return 127;
}
