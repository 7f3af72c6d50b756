/* The rgpu command line: one file per command (tools/rgpu_*.c), the shared bits here
 * (tools/rgpu_common.c): one option table for every command (getopt_long, `--opt=value`), strict
 * numbers, the table printer and the JSON schema version (docs/status-schema.md). */
#ifndef RGPU_TOOLS_RGPU_H
#define RGPU_TOOLS_RGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client/session/config.h"
#include "client/session/pool.h"

/* The version of the JSON documents (`rgpu status -o json`, `rgpu ping -o json`, the server's
 * /status): raised when a field changes meaning or goes; new fields may appear within one. */
#define RGPU_SCHEMA 1

/* The commands, as bits: which command an option belongs to. */
enum rgpu_cmd { RGPU_RUN = 1, RGPU_STATUS = 2, RGPU_TOP = 4, RGPU_PING = 8 };

enum rgpu_output { RGPU_OUT_TABLE, RGPU_OUT_WIDE, RGPU_OUT_JSON, RGPU_OUT_CSV };

#define RGPU_INTERVAL_MIN 0.1 /* seconds: top never probes the pool more often */
#define RGPU_INTERVAL_MAX 86400
#define RGPU_COUNT_MAX    100000 /* ping's round trips per server */

struct rgpu_opts {
    enum rgpu_output output;
    bool no_headers;
    bool once;         /* top: one screen, no refresh */
    double interval;   /* top: seconds between refreshes */
    long count;        /* ping: round trips per server */
    bool bandwidth;    /* ping: copies and the TCP ceiling too */
    char query[512];   /* status/top --query-gpu: comma-separated fields */
    bool csv_noheader; /* --format=csv,noheader */
    bool csv_nounits;  /* --format=csv,nounits */
};

int rgpu_cmd_run(int argc, char **argv);
int rgpu_cmd_status(int argc, char **argv);
int rgpu_cmd_top(int argc, char **argv);
int rgpu_cmd_ping(int argc, char **argv);

/* The options of command cmd (argv[0] is its name) with getopt_long ("+": parsing stops at the
 * first argument that is not an option, and after "--"). Pool options go into the environment
 * the client configuration reads (RGPU_SERVER, RGPU_POOL, RGPU_MEM_QUOTA, ...); every value is
 * checked first (a number with trailing text, NaN, out of range: an error naming the option and
 * the accepted form). Then the configuration is loaded into conf (conf NULL: not loaded).
 * Returns -1 to go on with the arguments from *first_p, or the exit status (0 after --help or
 * --version; 2 for a usage or configuration error, reported). */
int rgpu_parse_opts(enum rgpu_cmd cmd, int argc, char **argv, struct rgpu_opts *opts,
                    struct cli_conf *conf, int *first_p);

/* `rgpu CMD --help` (cmd 0: every command). */
void rgpu_usage(FILE *out, unsigned cmd);
void rgpu_version(FILE *out);

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
/* What every JSON document starts with: {"schema":N,"kind":"KIND" (no closing brace). */
void rgpu_json_begin(FILE *out, const char *kind);

/* A table as kubectl prints one: columns as wide as their widest cell (nothing cut), two
 * spaces apart; numbers right-aligned. A row may be a note: its first cell, then text to the
 * end of the line (a server that did not answer). */
#define RGPU_TABLE_COLS 16
struct rgpu_table {
    int ncols;
    const char *head[RGPU_TABLE_COLS];
    bool right[RGPU_TABLE_COLS];
    int nrows;
    char *(*rows)[RGPU_TABLE_COLS + 1]; /* cells; [RGPU_TABLE_COLS]: the note, or NULL */
};
void rgpu_table_init(struct rgpu_table *t, int ncols, const char *const *head, const bool *right);
/* A row of t->ncols cells (copied), or a note row: cells[0] and note. */
void rgpu_table_row(struct rgpu_table *t, const char *const *cells, const char *note);
void rgpu_table_print(const struct rgpu_table *t, FILE *out, bool headers);
void rgpu_table_free(struct rgpu_table *t);

#endif
