/* The rgpu command line: one file per command (tools/rgpu_*.c), the shared bits here. */
#ifndef RGPU_TOOLS_RGPU_H
#define RGPU_TOOLS_RGPU_H

#include <stdbool.h>
#include <stddef.h>

#include "client/session/config.h"
#include "client/session/pool.h"

/* Options every pool command takes. */
struct rgpu_opts {
    bool json;
    bool once;       /* top: one screen, no refresh */
    double interval; /* top: seconds between refreshes */
    int count;       /* ping: round trips per server */
};

int rgpu_cmd_run(int argc, char **argv);
int rgpu_cmd_status(int argc, char **argv);
int rgpu_cmd_top(int argc, char **argv);
int rgpu_cmd_ping(int argc, char **argv);

/* The pool commands' options: --config FILE, --pool LIST, --server HOST:PORT, --tenant NAME,
 * --token-file PATH, --policy P, --memory SIZE (into the environment the client configuration
 * reads), --json, --once, --interval S, --count N. Then the configuration itself. Returns 0, or
 * the exit status of a usage or configuration error (already reported). */
int rgpu_parse_opts(int argc, char **argv, struct rgpu_opts *opts, struct cli_conf *conf);

/* The directory holding libcuda.so.1: RGPU_LIBDIR, else <exe dir>/../lib/rgpu where the
 * client is there (as installed: /usr/bin/rgpu, /usr/lib/rgpu), else <exe dir>/../lib (the
 * build tree). */
int rgpu_find_libdir(char *buf, size_t len);

/* Resolve and probe the pool (the configuration's probe timeout); the caller frees it. */
void rgpu_probe_pool(const struct cli_conf *conf, struct cli_pool *pool);

/* Bytes as "79.6GiB", "512MiB" into buf. */
const char *rgpu_bytes(unsigned long long bytes, char *buf, size_t len);
/* A JSON string literal (quotes, escapes) of text to out. */
void rgpu_json_str(FILE *out, const char *text);

void rgpu_usage(FILE *out);

#endif
