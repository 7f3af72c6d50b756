/* rgpu-bench-pool-place: the pool's probe and placement alone, repeated (bench/pool_scale.sh):
 * cli_pool_place_gpus as a job of one GPU calls it at cuInit, over the pool of the client
 * configuration (RGPU_POOL...), ITER times; prints the time of resolving the pool's names
 * alone, then of the whole placement (which resolves them again, as a job does), in ms, and
 * whether it placed:   resolve_ms=0.52 place_ms=3.21 placed=1 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "client/session/config.h"
#include "client/session/pool.h"

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    int iter = argc > 1 ? atoi(argv[1]) : 10;
    struct cli_conf conf;
    struct cli_placed out[8];
    char why[4096];

    if (cli_conf_load(&conf, why, sizeof(why)) != RG_OK) {
        fprintf(stderr, "config: %s\n", why);
        return 2;
    }
    for (int i = 0; i < iter; i++) {
        struct cli_pool pool;
        double t0 = now_ms(), t1;
        int n;

        /* the resolution alone (placement resolves again, as a job does) */
        if (cli_pool_resolve(&conf, &pool) == RG_OK)
            cli_pool_free(&pool);
        t1 = now_ms();
        n = cli_pool_place_gpus(&conf, 1, out, 8, why, sizeof(why));
        printf("resolve_ms=%.2f place_ms=%.2f placed=%d\n", t1 - t0, now_ms() - t1, n > 0);
        if (n == 0)
            fprintf(stderr, "not placed: %.300s\n", why);
    }
    return 0;
}
