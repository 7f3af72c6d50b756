/* rgpu: the command line.
 *   rgpu run [OPTIONS] [--] CMD [ARGS...]   CMD with rgpu's libcuda.so.1 first in its path
 *   rgpu status [OPTIONS]                   the pool as a table, per server and GPU
 *   rgpu top [OPTIONS]                      the same, refreshed in place
 *   rgpu ping [OPTIONS]                     round trips (and, with --bandwidth, copies)
 *   rgpu --version | --help
 * Options: tools/rgpu_common.c (one table for every command). Pool commands read the client
 * configuration (client/session/config.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rgpu.h"

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
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
        rgpu_version(stdout);
        return 0;
    }
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        rgpu_usage(stdout, 0);
        return 0;
    }
    if (argc >= 2)
        fprintf(stderr, "rgpu: unknown command '%s'\n", argv[1]);
    rgpu_usage(stderr, 0);
    return 2;
}
