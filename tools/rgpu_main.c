/* rgpu: the command line.
 *   rgpu run [--pool LIST | --server HOST:PORT] [--memory SIZE] [--config FILE] -- CMD [ARGS...]
 *   rgpu status [--json]        the pool as a table, per server and GPU
 *   rgpu top [--once] [--interval S]   the same, refreshed in place
 *   rgpu ping [--count N] [--json]     round trips, copy bandwidth and the TCP ceiling
 * Pool commands read the client configuration (client/config.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rgpu.h"

void rgpu_usage(FILE *out)
{
    fprintf(out,
            "usage: rgpu run [--pool LIST | --server HOST:PORT] [--memory SIZE] [--policy P]\n"
            "                [--config FILE] -- CMD [ARGS...]\n"
            "  Runs CMD with rgpu's libcuda.so.1 first in LD_LIBRARY_PATH, so every CUDA call\n"
            "  goes to a gpu-server of the pool: --pool, --server, RGPU_SERVER, or the client\n"
            "  config (RGPU_CONFIG, ~/.config/rgpu/client.conf, /etc/rgpu/client.conf).\n"
            "  rgpu's libnccl.so.2 is preloaded (LD_PRELOAD) so NCCL calls run on the GPU\n"
            "  hosts (RGPU_NCCL=0: not).\n"
            "       rgpu status [--json]              the pool: per server and GPU, memory,\n"
            "                                         your sessions, utilization, round trip\n"
            "       rgpu top [--once] [--interval S]  the same, refreshed until interrupted\n"
            "       rgpu ping [--count N] [--json]    round-trip percentiles, copy bandwidth\n"
            "                                         and the raw TCP ceiling per server\n"
            "  Pool commands also take --config, --pool, --server, --tenant, --token-file,\n"
            "  --memory and --policy; they exit 1 when no server answers.\n");
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"run", rgpu_cmd_run},
                {"status", rgpu_cmd_status},
                {"top", rgpu_cmd_top},
                {"ping", rgpu_cmd_ping}};

    rg_log_set_level(RG_LOG_ERROR); /* what fails is in the table */
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    for (size_t i = 0; argc >= 2 && i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)) {
        rgpu_usage(stdout);
        return 0;
    }
    rgpu_usage(stderr);
    return 2;
}
