/* rgpu-bench-pool-place: the pool's probe and placement alone, repeated (bench/pool_scale.sh):
 * cli_pool_place_gpus as a job of one GPU calls it at cuInit, over the pool of the client
 * configuration (RGPU_POOL...), ITER times; prints each time in ms and whether it placed:
 *   place_ms=3.21 placed=1 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "client/config.h"
#include "client/pool.h"

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
        double t0 = now_ms();
        int n = cli_pool_place_gpus(&conf, 1, out, 8, why, sizeof(why));
        printf("place_ms=%.2f placed=%d\n", now_ms() - t0, n > 0);
        if (n == 0)
            fprintf(stderr, "not placed: %.300s\n", why);
    }
    return 0;
}
