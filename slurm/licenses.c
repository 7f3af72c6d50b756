/* rgpu-slurm-licenses: the pool's size as the cluster license slurmctld counts (docs/slurm.md).
 *
 *   rgpu-slurm-licenses [--name NAME] [--count]
 *
 * Probes every server of the pool the client configuration names (the same file and
 * variables as rgpu status: RGPU_CONFIG, RGPU_POOL, RGPU_TENANT, RGPU_TOKEN_FILE...) and prints
 * "Licenses=NAME:<100 x GPUs>" (NAME rgpu by default; --count: the number alone), counting the
 * GPUs of every server that answered, busy or not. Servers that did not answer are named on
 * stderr and not counted. Exit status 1 when no server answered, 2 on bad usage or config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/session/config.h"
#include "client/session/pool.h"
#include "common/log.h"

int main(int argc, char **argv)
{
    const char *name = "rgpu";
    bool count_only = false;
    struct cli_conf conf;
    struct cli_pool pool;
    char why[512];
    unsigned gpus = 0, answered = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 1 < argc && argv[i + 1][0] != '\0')
            name = argv[++i];
        else if (strcmp(argv[i], "--count") == 0)
            count_only = true;
        else {
            fprintf(stderr, "usage: rgpu-slurm-licenses [--name NAME] [--count]\n"
                            "  prints Licenses=NAME:<100 x the GPUs of the rgpu pool> for "
                            "slurm.conf\n");
            return 2;
        }
    }
    rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
    if (cli_conf_load(&conf, why, sizeof(why)) != RG_OK) {
        fprintf(stderr, "rgpu-slurm-licenses: %s\n", why);
        return 2;
    }
    if (cli_pool_resolve(&conf, &pool) != RG_OK) {
        fprintf(stderr, "rgpu-slurm-licenses: out of memory\n");
        return 2;
    }
    cli_pool_probe(&pool, &conf, conf.probe_timeout_ms);
    for (int i = 0; i < pool.n; i++) {
        const struct cli_server *s = &pool.servers[i];
        if (s->answered) {
            answered++;
            gpus += (unsigned)s->reply->n_gpus;
        } else {
            fprintf(stderr, "rgpu-slurm-licenses: not counted: %s (%s)\n",
                    s->addr[0] ? s->addr : s->name, s->why);
        }
    }
    cli_pool_free(&pool);
    if (answered == 0) {
        fprintf(stderr, "rgpu-slurm-licenses: no server of the pool answered\n");
        return 1;
    }
    if (count_only)
        printf("%u\n", gpus * 100);
    else
        printf("Licenses=%s:%u\n", name, gpus * 100);
    return 0;
}
