/* rgpu run: CMD with rgpu's libcuda.so.1 first in its library path; the pool options go to it
 * through the environment the client configuration reads. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
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

/* One option with its value; 1 when taken, 0 when not an option, -1 on a bad value. */
static int run_option(const char *opt, const char *val)
{
    static const char *const map[][2] = {
        {"--server", "RGPU_SERVER"},        {"--pool", "RGPU_POOL"},
        {"--config", "RGPU_CONFIG"},        {"--memory", "RGPU_MEM_QUOTA"},
        {"--policy", "RGPU_POLICY"},        {"--tenant", "RGPU_TENANT"},
        {"--token-file", "RGPU_TOKEN_FILE"}};
    uint64_t bytes;
    enum sched_policy policy;

    for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++) {
        if (strcmp(opt, map[k][0]) != 0)
            continue;
        if (val == NULL || (strcmp(opt, "--memory") == 0 && !rg_parse_size(val, &bytes)) ||
            (strcmp(opt, "--policy") == 0 && !sched_policy_parse(val, &policy))) {
            fprintf(stderr, "rgpu run: %s needs %s\n", opt,
                    strcmp(opt, "--memory") == 0   ? "a size such as 4GiB"
                    : strcmp(opt, "--policy") == 0 ? "spread, pack or first"
                                                   : "a value");
            return -1;
        }
        if (strcmp(opt, "--pool") == 0)
            unsetenv("RGPU_SERVER"); /* RGPU_SERVER would win over the pool */
        setenv(map[k][1], val, 1);
        return 1;
    }
    return 0;
}

int rgpu_cmd_run(int argc, char **argv)
{
    char libdir[PATH_MAX], probe[PATH_MAX + 32];
    int i, taken = 0;

    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        rgpu_usage(stdout);
        return 0;
    }
    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if ((taken = run_option(argv[i], i + 1 < argc ? argv[i + 1] : NULL)) <= 0)
            break;
        i++;
    }
    if (taken < 0)
        return 2;
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        rgpu_usage(stderr);
        return 2;
    }
    if (rgpu_find_libdir(libdir, sizeof(libdir)) != 0) {
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
