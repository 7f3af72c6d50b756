/* Typed configuration, checked whole: the one mechanism behind the server's config file (its
 * [server] and [tenant NAME] sections), the client's ([client]), their command-line flags and
 * RGPU_* variables. Like redis' CONFIG table, every key is one row of a table: its name, type,
 * bounds, default and the field of a struct it is parsed into; nothing reads the text again.
 *
 * The file, line by line:
 *   [section]  or  [section NAME]     a header; the keys below belong to it. Exactly one space
 *                                     before NAME; NAME is 1 to 63 of A-Z a-z 0-9 . _ -
 *   key = value                       leading and trailing blanks of both are dropped
 *   key = "value"                     the quotes are dropped; blanks and '#' inside are kept
 *   # comment                         '#' starts a comment at the start of a line or after a
 *                                     blank, outside quotes: "token = beta#secret" is the
 *                                     token beta#secret, "token = beta #secret" is beta
 * Errors, each reported once as "FILE:LINE: what is wrong: the accepted form", and all of
 * them (the parse goes on to the end, so one run lists every mistake): a section no table
 * has, a header of another shape, a section named twice, a key its section does not have, a
 * key given twice (unless its row allows a list), a value its type refuses, a quote opened and
 * not closed, a line without '=', a NUL byte, a line over RG_CONF_LINE_MAX. A value is never
 * shown for a key flagged secret. */
#ifndef RGPU_COMMON_CONFIG_H
#define RGPU_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/status.h"

#define RG_CONF_FILE_MAX (1u << 20) /* bytes of a config file */
#define RG_CONF_LINE_MAX 4096
#define RG_CONF_KEYS_MAX 64 /* keys of one section */
#define RG_CONF_NAME_MAX 63 /* characters of a section's NAME */

enum rg_conf_type {
    RG_CONF_INT,      /* a whole decimal number in [min, max]; zero_word also means 0 */
    RG_CONF_SIZE,     /* rg_parse_size, in bytes, in [min, max] (max 0: no bound); uint64_t */
    RG_CONF_DURATION, /* a whole number with an optional unit (us, ms, s, min, h), converted
                       * exactly to the key's unit; a plain number is in that unit. Bounds and
                       * the stored value are in the unit; zero_word also means 0 */
    RG_CONF_BOOL,     /* yes|no, on|off, true|false; bool */
    RG_CONF_ENUM,     /* one of names[]; its index is stored */
    RG_CONF_STRING,   /* text of [min, size - 1] characters into char[size] */
    RG_CONF_ADDR,     /* HOST:PORT or [V6]:PORT with a port 0..65535, into char[size] */
    RG_CONF_CUSTOM,   /* parse() decides; help says what it takes */
};

enum rg_conf_unit { RG_CONF_US = 1, RG_CONF_MS, RG_CONF_S };

enum {
    RG_CONF_SECRET = 1 << 0, /* its value never appears in a message */
    RG_CONF_LIST = 1 << 1,   /* may be given more than once (each adds) */
};

struct rg_conf_key {
    const char *name;
    enum rg_conf_type type;
    size_t offset, size;      /* the field in the section's struct (RG_CONF_FIELD) */
    int64_t min, max;         /* INT, DURATION (in unit), SIZE (bytes), STRING (min length) */
    enum rg_conf_unit unit;   /* DURATION */
    const char *const *names; /* ENUM: NULL-terminated */
    const char *zero_word;    /* INT, DURATION: a word that also means 0 ("unlimited") */
    /* CUSTOM: parse value into the struct obj; false with the reason in why (no value in it) */
    bool (*parse)(void *obj, const char *value, char *why, size_t why_len);
    const char *def;  /* the default as text, set by rg_conf_defaults; NULL: the zeroed field */
    unsigned flags;   /* RG_CONF_SECRET, RG_CONF_LIST */
    const char *help; /* the accepted form; NULL: made from the type and bounds */
};

#define RG_CONF_FIELD(type, member)                                                                \
    .offset = offsetof(type, member), .size = sizeof(((type *)0)->member)

/* One section: its keys, and where a section's keys are written. */
struct rg_conf_section {
    const char *name; /* "server", "tenant", "client" */
    bool named;       /* "[tenant NAME]" */
    const struct rg_conf_key *keys;
    size_t nkeys;
    /* The struct the keys of one header go to; NULL with the reason in why refuses the header
     * (too many, a name too long). name is "" for an unnamed section. The parser itself refuses
     * a second header of the same section and name. */
    void *(*open)(void *arg, const char *name, char *why, size_t why_len);
};

struct rg_conf_schema {
    const struct rg_conf_section *sections;
    size_t nsections;
    const char *implicit; /* the section of keys before any header; NULL: none allowed */
};

/* Where each error goes, once, as one line without a newline. NULL: rg_error. */
typedef void (*rg_conf_report_fn)(void *report_arg, const char *message);

struct rg_conf_parse {
    const struct rg_conf_schema *schema;
    void *arg;          /* for the sections' open() */
    const char *origin; /* the file name in messages */
    rg_conf_report_fn report;
    void *report_arg;
    int errors; /* out: how many were reported */
};

/* Parse len bytes of text (NULs included: an error, not the end). RG_OK when no error. */
rg_status_t rg_conf_parse_text(struct rg_conf_parse *p, const char *text, size_t len);

/* Read a whole config file: opened without blocking (a FIFO is refused, never waited on) and
 * checked to be a regular file of at most RG_CONF_FILE_MAX bytes. *text_p (NUL-terminated,
 * free() it) and *len_p on success; st_p (may be NULL) gets its stat. On failure the reason is
 * in why: RG_ERR_IO (missing, unreadable, not a regular file, too large). */
rg_status_t rg_conf_read_file(const char *path, char **text_p, size_t *len_p, struct stat *st_p,
                              char *why, size_t why_len);

/* rg_conf_read_file then rg_conf_parse_text, origin = path; a file that cannot be read is one
 * error reported. */
rg_status_t rg_conf_parse_file(struct rg_conf_parse *p, const char *path);

/* Set one key from text: the same check as in a file (flags and environment variables use
 * it). RG_ERR_INVALID with the accepted form in why (RG_ERR_NOT_FOUND: no such key). */
rg_status_t rg_conf_set(const struct rg_conf_section *s, void *obj, const char *key,
                        const char *value, char *why, size_t why_len);
/* Every key's default (def) into obj. */
void rg_conf_defaults(const struct rg_conf_section *s, void *obj);
/* The key's value in obj as text its parser takes back (CUSTOM: its field as a string). */
void rg_conf_format(const struct rg_conf_key *k, const void *obj, char *buf, size_t len);
/* The accepted form of a key ("a whole number from 1 to 1024"), for messages and usage. */
void rg_conf_describe(const struct rg_conf_key *k, char *buf, size_t len);
const struct rg_conf_key *rg_conf_key_find(const struct rg_conf_section *s, const char *key);

/* A size: a number, optionally followed (spaces allowed) by KiB, MiB, GiB or TiB, in any case
 * ("4GiB", "512 MiB", "4096"). false when malformed or too large for 64 bits. The one grammar
 * of sizes in every config file and RGPU_* variable. */
bool rg_parse_size(const char *text, uint64_t *bytes_p);

/* A yes/no word: yes|no, on|off, true|false (any case). */
bool rg_parse_bool(const char *text, bool *v_p);

/* Split "host:port" (or "[v6]:port") into host and port; default_port when absent. */
rg_status_t rg_split_hostport(const char *addr, char *host, size_t host_len, char *port,
                              size_t port_len, const char *default_port);

#endif
