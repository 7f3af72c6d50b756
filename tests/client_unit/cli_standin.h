#ifndef RGPU_TEST_CLI_STANDIN_H
#define RGPU_TEST_CLI_STANDIN_H
#include "client/api/api.h"

extern struct cli_ctx standin_primary;
extern struct cli_ctx *standin_current;
extern int standin_ndev;
/* The context teardown hook export_tables.c registered (its context-local storage). */
extern void (*standin_teardown)(struct cli_ctx *ctx);
#endif
