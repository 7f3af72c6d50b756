/* How long srv_tenant_auth takes to refuse an unknown tenant, a known tenant with a wrong token
 * (hashed and plain), and to accept the right one, interleaved so that the machine's load falls
 * on all alike. A difference between the refusals tells a peer without a token which tenant
 * names exist (issue 27 item 5). Prints microseconds per call: the median of ROUNDS batches of
 * BATCH calls each.
 *   rgpu-bench-auth [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/tenant_config.h"

#define BATCH 200

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static struct srv_tenants tenants;
    char name[32], hex[65];
    const struct {
        const char *label, *tenant, *token;
    } cases[] = {
        {"unknown tenant", "nobody-here", "some-token-of-32-characters-long"},
        {"wrong token (token_sha256)", "tenant-5", "some-token-of-32-characters-long"},
        {"wrong token (plain token)", "tenant-6", "some-token-of-32-characters-long"},
        {"right token (token_sha256)", "tenant-5", "secret-of-tenant-5-32-characters"},
    };
    enum { NCASES = sizeof(cases) / sizeof(cases[0]) };
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    double *t[NCASES];
    volatile const void *sink;

    for (int i = 0; i < 8; i++) {
        char token[64];
        snprintf(name, sizeof(name), "tenant-%d", i);
        snprintf(token, sizeof(token), "secret-of-tenant-%d-32-characters", i);
        if (i % 2) {
            srv_token_hash_hex(token, hex);
            srv_tenant_key(&tenants, name, "token_sha256", hex);
        } else {
            srv_tenant_key(&tenants, name, "token", token);
        }
    }
    /* tenant-5 is hashed, tenant-6 plain (odd: token_sha256) */
    for (int c = 0; c < NCASES; c++)
        t[c] = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NCASES; c++) {
            const char *why = NULL;
            double t0 = now_us();
            for (int i = 0; i < BATCH; i++)
                sink = srv_tenant_auth(&tenants, cases[c].tenant, cases[c].token, &why);
            t[c][r] = (now_us() - t0) / BATCH;
        }
    (void)sink;
    for (int c = 0; c < NCASES; c++) {
        qsort(t[c], (size_t)rounds, sizeof(double), cmp);
        printf("%-28s median %.3f us  p10 %.3f us  p90 %.3f us\n", cases[c].label, t[c][rounds / 2],
               t[c][rounds / 10], t[c][rounds * 9 / 10]);
    }
    printf("refusal difference (wrong token - unknown tenant), medians: %.3f us (hashed), "
           "%.3f us (plain)\n",
           t[1][rounds / 2] - t[0][rounds / 2], t[2][rounds / 2] - t[0][rounds / 2]);
    return 0;
}
