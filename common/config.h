/* Config files, line by line:
 *   [section]  or  [section name]     a header; the keys below belong to it
 *   key = value                       leading and trailing blanks of both are dropped
 *   key = "value"                     the quotes are dropped; blanks and '#' inside are kept
 *   # comment                         '#' starts a comment at the start of a line or after a
 *                                     blank, outside quotes: "token = beta#secret" is the
 *                                     token beta#secret, "token = beta #secret" is beta
 * A quote opened and not closed, a header without ']' or a line without '=' is an error.
 * The parser calls back once per key; the callback validates and returns RG_OK or an error
 * (which stops parsing; the parser logs file:line, and the value unless the key names a
 * token). */
#ifndef RGPU_COMMON_CONFIG_H
#define RGPU_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef rg_status_t (*rg_config_cb)(void *arg, const char *section, const char *key,
                                    const char *value);

rg_status_t rg_config_parse_file(const char *path, rg_config_cb cb, void *arg);
rg_status_t rg_config_parse_string(const char *text, const char *origin, rg_config_cb cb,
                                   void *arg);

/* A size: a number, optionally followed (spaces allowed) by KiB, MiB, GiB or TiB, in any case
 * ("4GiB", "512 MiB", "4096"). false when malformed or too large for 64 bits. The one grammar
 * of sizes in every config file and RGPU_* variable. */
bool rg_parse_size(const char *text, uint64_t *bytes_p);

/* Split "host:port" (or "[v6]:port") into host and port; default_port when absent. */
rg_status_t rg_split_hostport(const char *addr, char *host, size_t host_len, char *port,
                              size_t port_len, const char *default_port);

#endif
