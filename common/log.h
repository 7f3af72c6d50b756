/* Logging: one macro family that checks the level before formatting and keeps errno.
 * Libraries never print on their own: the embedding program may install a callback. */
#ifndef RGPU_COMMON_LOG_H
#define RGPU_COMMON_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum rg_log_level { RG_LOG_ERROR = 0, RG_LOG_WARN, RG_LOG_INFO, RG_LOG_DEBUG, RG_LOG_TRACE };

typedef void (*rg_log_cb)(enum rg_log_level level, const char *line);

extern int rg_log_level_current;

/* Set the level; from the string "error|warn|info|debug|trace" (NULL keeps the current one). */
void rg_log_set_level(enum rg_log_level level);
void rg_log_set_level_str(const char *name);
/* Prefix written before every line, e.g. "gpu-server[123] tenant=a session=7". */
void rg_log_set_prefix(const char *prefix);
/* Install a sink; NULL restores the default: stderr, each line prefixed with its syslog
 * priority ("<3>" for errors ... "<7>" for debug) when stderr is the journal ($JOURNAL_STREAM). */
void rg_log_set_callback(rg_log_cb cb);
void rg_log_write(enum rg_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define RG_LOG(level, ...)                                                                         \
    do {                                                                                           \
        if ((int)(level) <= rg_log_level_current)                                                  \
            rg_log_write((level), __VA_ARGS__);                                                    \
    } while (0)
/* A string a peer sent (a tenant, client or host name, a probe's field: anything that did not
 * come from this host's own configuration) made safe for a log line, the one escaping function
 * every such string goes through: bytes outside printable ASCII (a newline, a terminal escape)
 * and backslashes become \xNN, so that a peer cannot start a forged line or rewrite what a
 * terminal shows; a string too long for dst is cut and ends in "...". NULL is written as "".
 * Returns dst. */
const char *rg_log_escape(char *dst, size_t len, const char *src);
/* The same into a buffer that lives until the end of the enclosing block, for an argument of a
 * log call: rg_warn("tenant '%s'", RG_PEER_STR(name)). At most RG_PEER_STR_MAX bytes. */
#define RG_PEER_STR_MAX  96
#define RG_PEER_STR(src) rg_log_escape((char[RG_PEER_STR_MAX]){0}, RG_PEER_STR_MAX, (src))

#define rg_error(...) RG_LOG(RG_LOG_ERROR, __VA_ARGS__)
#define rg_warn(...)  RG_LOG(RG_LOG_WARN, __VA_ARGS__)
#define rg_info(...)  RG_LOG(RG_LOG_INFO, __VA_ARGS__)
#define rg_debug(...) RG_LOG(RG_LOG_DEBUG, __VA_ARGS__)
/* Hot-path tracing compiles away unless RGPU_TRACE is defined. */
#ifdef RGPU_TRACE
#define rg_trace(...) RG_LOG(RG_LOG_TRACE, __VA_ARGS__)
#else
#define rg_trace(...) ((void)0)
#endif

#endif
