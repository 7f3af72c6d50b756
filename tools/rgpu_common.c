/* What the rgpu commands share: options, the library directory, formatting. */
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu.h"

int rgpu_find_libdir(char *buf, size_t len)
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
    if (snprintf(buf, len, "%s/../lib/rgpu/libcuda.so.1", dir) < (int)len && access(buf, R_OK) == 0)
        return snprintf(buf, len, "%s/../lib/rgpu", dir) < (int)len ? 0 : -1;
    return snprintf(buf, len, "%s/../lib", dir) < (int)len ? 0 : -1;
}

int rgpu_parse_opts(int argc, char **argv, struct rgpu_opts *opts, struct cli_conf *conf)
{
    static const struct option longs[] = {{"config", 1, 0, 'c'},
                                          {"pool", 1, 0, 'p'},
                                          {"server", 1, 0, 's'},
                                          {"tenant", 1, 0, 't'},
                                          {"token-file", 1, 0, 'k'},
                                          {"policy", 1, 0, 'P'},
                                          {"memory", 1, 0, 'm'},
                                          {"json", 0, 0, 'j'},
                                          {"once", 0, 0, 'o'},
                                          {"interval", 1, 0, 'i'},
                                          {"count", 1, 0, 'n'},
                                          {"help", 0, 0, 'h'},
                                          {0, 0, 0, 0}};
    char why[512];
    int c;

    *opts = (struct rgpu_opts){.interval = 2, .count = 100};
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'c':
            setenv("RGPU_CONFIG", optarg, 1);
            break;
        case 'p':
            setenv("RGPU_POOL", optarg, 1);
            unsetenv("RGPU_SERVER");
            break;
        case 's':
            setenv("RGPU_SERVER", optarg, 1);
            break;
        case 't':
            setenv("RGPU_TENANT", optarg, 1);
            break;
        case 'k':
            setenv("RGPU_TOKEN_FILE", optarg, 1);
            break;
        case 'P':
            setenv("RGPU_POLICY", optarg, 1);
            break;
        case 'm':
            setenv("RGPU_MEM_QUOTA", optarg, 1);
            break;
        case 'j':
            opts->json = true;
            break;
        case 'o':
            opts->once = true;
            break;
        case 'i':
            opts->interval = atof(optarg);
            break;
        case 'n':
            opts->count = atoi(optarg);
            break;
        case 'h':
            rgpu_usage(stdout);
            exit(0);
        default:
            rgpu_usage(stderr);
            return 2;
        }
    }
    if (optind < argc || opts->interval <= 0 || opts->count <= 0) {
        rgpu_usage(stderr);
        return 2;
    }
    if (cli_conf_load(conf, why, sizeof(why)) != RG_OK) {
        fprintf(stderr, "rgpu: client configuration: %s\n", why);
        return 2;
    }
    return 0;
}

void rgpu_probe_pool(const struct cli_conf *conf, struct cli_pool *pool)
{
    if (cli_pool_resolve(conf, pool) == RG_OK)
        cli_pool_probe(pool, conf, conf->probe_timeout_ms);
}

const char *rgpu_bytes(unsigned long long bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 || v >= 100 ? "%.0f%s" : v < 10 ? "%.2f%s" : "%.1f%s", v, units[u]);
    return buf;
}

void rgpu_json_str(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}
