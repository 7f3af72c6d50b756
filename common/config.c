/* Typed configuration (common/config.h). */
#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"

#define REPORTS_MAX   100 /* errors reported one by one; then one line says how many more */
#define INSTANCES_MAX 1024

/* ---- values ------------------------------------------------------------------------------ */

static const struct {
    const char *suffix;
    int64_t ns;
} duration_units[] = {{"us", 1000},
                      {"ms", 1000000},
                      {"s", 1000000000},
                      {"min", 60 * 1000000000LL},
                      {"h", 3600 * 1000000000LL}};

static int64_t unit_ns(enum rg_conf_unit u)
{
    return u == RG_CONF_US ? 1000 : u == RG_CONF_MS ? 1000000 : 1000000000;
}

static const char *unit_name(enum rg_conf_unit u)
{
    return u == RG_CONF_US ? "microseconds" : u == RG_CONF_MS ? "milliseconds" : "seconds";
}

static const char *unit_suffix(enum rg_conf_unit u)
{
    return u == RG_CONF_US ? "us" : u == RG_CONF_MS ? "ms" : "s";
}

/* Decimal digits, an optional leading '-', nothing else (no '+', blank, hex or trailing text). */
static bool parse_int64(const char *text, int64_t *v_p, const char **end_p)
{
    const char *p = text + (text[0] == '-');
    char *end;
    long long v;

    if (!isdigit((unsigned char)*p))
        return false;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0)
        return false;
    if (end_p != NULL)
        *end_p = end;
    else if (*end != '\0')
        return false;
    *v_p = v;
    return true;
}

static bool parse_duration(const struct rg_conf_key *k, const char *text, int64_t *v_p)
{
    const char *end;
    int64_t n, ns = unit_ns(k->unit), total;

    if (!parse_int64(text, &n, &end) || n < 0)
        return false;
    while (*end == ' ')
        end++;
    if (*end == '\0') {
        *v_p = n;
        return true;
    }
    for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
        if (strcmp(end, duration_units[i].suffix) != 0)
            continue;
        if (n > INT64_MAX / duration_units[i].ns)
            return false;
        total = n * duration_units[i].ns;
        if (total % ns != 0) /* 1500us for a key in milliseconds: not a whole number of them */
            return false;
        *v_p = total / ns;
        return true;
    }
    return false;
}

bool rg_parse_bool(const char *text, bool *v_p)
{
    static const char *const yes[] = {"yes", "on", "true"}, *const no[] = {"no", "off", "false"};

    for (int i = 0; i < 3; i++) {
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
            *v_p = strcasecmp(text, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

static void store_int(void *field, size_t size, int64_t v)
{
    if (size == sizeof(int8_t)) {
        int8_t x = (int8_t)v;
        memcpy(field, &x, size);
    } else if (size == sizeof(int16_t)) {
        int16_t x = (int16_t)v;
        memcpy(field, &x, size);
    } else if (size == sizeof(int32_t)) {
        int32_t x = (int32_t)v; /* the bounds keep v inside the field (signed or not) */
        memcpy(field, &x, size);
    } else {
        memcpy(field, &v, sizeof(v));
    }
}

static int64_t load_int(const void *field, size_t size, bool is_unsigned)
{
    if (size == sizeof(int8_t))
        return is_unsigned ? (int64_t)(*(const uint8_t *)field) : (int64_t)(*(const int8_t *)field);
    if (size == sizeof(int16_t)) {
        int16_t x;
        memcpy(&x, field, size);
        return is_unsigned ? (int64_t)(uint16_t)x : (int64_t)x;
    }
    if (size == sizeof(int32_t)) {
        int32_t x;
        memcpy(&x, field, size);
        return is_unsigned ? (int64_t)(uint32_t)x : (int64_t)x;
    }
    int64_t x;
    memcpy(&x, field, sizeof(x));
    return x;
}

static bool printable_text(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static bool valid_addr(const char *value)
{
    char host[256], port[16];
    int64_t p;

    return rg_split_hostport(value, host, sizeof(host), port, sizeof(port), NULL) == RG_OK &&
           host[0] != '\0' && printable_text(host) && parse_int64(port, &p, NULL) && p >= 0 &&
           p <= 65535;
}

void rg_conf_describe(const struct rg_conf_key *k, char *buf, size_t len)
{
    size_t n;

    if (k->help != NULL) {
        snprintf(buf, len, "%s", k->help);
        return;
    }
    switch (k->type) {
    case RG_CONF_INT:
        snprintf(buf, len, "a whole number from %" PRId64 " to %" PRId64 "%s%s", k->min, k->max,
                 k->zero_word ? ", or " : "", k->zero_word ? k->zero_word : "");
        break;
    case RG_CONF_SIZE:
        n = (size_t)snprintf(buf, len, "a size such as 4GiB (bytes, or KiB, MiB, GiB, TiB)");
        if (k->max > 0 && n < len)
            snprintf(buf + n, len - n, " from %" PRId64 " to %" PRId64 " bytes", k->min, k->max);
        break;
    case RG_CONF_DURATION:
        snprintf(buf, len,
                 "a duration of %" PRId64 " to %" PRId64 " %s%s%s, or with a unit (us, ms, s, "
                 "min, h) such as %s",
                 k->min, k->max, unit_name(k->unit), k->zero_word ? ", or " : "",
                 k->zero_word ? k->zero_word : "",
                 k->unit == RG_CONF_US   ? "50us or 1ms"
                 : k->unit == RG_CONF_MS ? "500ms or 30s"
                                         : "30s or 5min");
        break;
    case RG_CONF_BOOL:
        snprintf(buf, len, "yes or no (on/off, true/false)");
        break;
    case RG_CONF_ENUM:
        n = (size_t)snprintf(buf, len, "one of");
        for (int i = 0; k->names[i] != NULL && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s %s", i ? "," : "", k->names[i]);
        break;
    case RG_CONF_STRING:
        snprintf(buf, len, "text of %" PRId64 " to %zu characters", k->min, k->size - 1);
        break;
    case RG_CONF_ADDR:
        snprintf(buf, len,
                 "ADDR:PORT such as 127.0.0.1:9400 ([::1]:9400 for IPv6), a port "
                 "from 0 to 65535");
        break;
    case RG_CONF_CUSTOM:
        snprintf(buf, len, "a valid value");
        break;
    }
}

static rg_status_t set_value(const struct rg_conf_key *k, void *obj, const char *value, char *why,
                             size_t why_len)
{
    char *field = (char *)obj + k->offset, form[256];
    uint64_t bytes;
    int64_t v;
    bool b, ok = false;

    why[0] = '\0';
    switch (k->type) {
    case RG_CONF_INT:
    case RG_CONF_DURATION:
        if (k->zero_word != NULL && strcmp(value, k->zero_word) == 0) {
            v = 0;
            ok = true;
        } else if (k->type == RG_CONF_INT ? parse_int64(value, &v, NULL)
                                          : parse_duration(k, value, &v)) {
            ok = v >= k->min && v <= k->max;
        }
        if (ok)
            store_int(field, k->size, v);
        break;
    case RG_CONF_SIZE:
        ok = rg_parse_size(value, &bytes) && bytes >= (uint64_t)k->min &&
             (k->max == 0 || bytes <= (uint64_t)k->max);
        if (ok)
            memcpy(field, &bytes, sizeof(bytes));
        break;
    case RG_CONF_BOOL:
        if ((ok = rg_parse_bool(value, &b)))
            memcpy(field, &b, sizeof(b));
        break;
    case RG_CONF_ENUM:
        for (int i = 0; !ok && k->names[i] != NULL; i++)
            if (strcmp(value, k->names[i]) == 0) {
                store_int(field, k->size, i);
                ok = true;
            }
        break;
    case RG_CONF_STRING:
    case RG_CONF_ADDR:
        ok = strlen(value) < k->size && (int64_t)strlen(value) >= k->min && printable_text(value) &&
             (k->type == RG_CONF_STRING || valid_addr(value));
        if (ok)
            memcpy(field, value, strlen(value) + 1);
        break;
    case RG_CONF_CUSTOM:
        if (k->parse(obj, value, why, why_len))
            return RG_OK;
        if (why[0] != '\0')
            return RG_ERR_INVALID;
        break;
    }
    if (ok)
        return RG_OK;
    rg_conf_describe(k, form, sizeof(form));
    snprintf(why, why_len, "expected %s", form);
    return RG_ERR_INVALID;
}

const struct rg_conf_key *rg_conf_key_find(const struct rg_conf_section *s, const char *key)
{
    for (size_t i = 0; i < s->nkeys; i++)
        if (strcmp(s->keys[i].name, key) == 0)
            return &s->keys[i];
    return NULL;
}

rg_status_t rg_conf_set(const struct rg_conf_section *s, void *obj, const char *key,
                        const char *value, char *why, size_t why_len)
{
    const struct rg_conf_key *k = rg_conf_key_find(s, key);

    if (k == NULL) {
        snprintf(why, why_len, "unknown key '%s' in [%s]", key, s->name);
        return RG_ERR_NOT_FOUND;
    }
    return set_value(k, obj, value, why, why_len);
}

void rg_conf_defaults(const struct rg_conf_section *s, void *obj)
{
    char why[256];

    for (size_t i = 0; i < s->nkeys; i++)
        if (s->keys[i].def != NULL &&
            set_value(&s->keys[i], obj, s->keys[i].def, why, sizeof(why)) != RG_OK)
            rg_error("config table: the default of %s (%s) is refused: %s", s->keys[i].name,
                     s->keys[i].def, why); /* a table bug: tests/unit/test_config.c walks them */
}

void rg_conf_format(const struct rg_conf_key *k, const void *obj, char *buf, size_t len)
{
    const char *field = (const char *)obj + k->offset;
    bool b;

    switch (k->type) {
    case RG_CONF_INT:
        if (k->zero_word != NULL && load_int(field, k->size, k->min >= 0) == 0)
            snprintf(buf, len, "%s", k->zero_word);
        else
            snprintf(buf, len, "%" PRId64, load_int(field, k->size, k->min >= 0));
        break;
    case RG_CONF_DURATION:
        snprintf(buf, len, "%" PRId64 "%s", load_int(field, k->size, true), unit_suffix(k->unit));
        break;
    case RG_CONF_SIZE: {
        static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
        uint64_t v = (uint64_t)load_int(field, 8, true);
        int u = 0;
        while (u < 4 && (v == 0 || v % (1ull << (10 * (4 - u))) != 0))
            u++;
        if (u < 4)
            snprintf(buf, len, "%" PRIu64 "%s", v >> (10 * (4 - u)), units[u]);
        else
            snprintf(buf, len, "%" PRIu64, v);
        break;
    }
    case RG_CONF_BOOL:
        memcpy(&b, field, sizeof(b));
        snprintf(buf, len, "%s", b ? "yes" : "no");
        break;
    case RG_CONF_ENUM: {
        int64_t i = load_int(field, k->size, true), n = 0;
        while (k->names[n] != NULL)
            n++;
        snprintf(buf, len, "%s", i >= 0 && i < n ? k->names[i] : "?");
        break;
    }
    case RG_CONF_STRING:
    case RG_CONF_ADDR:
        snprintf(buf, len, "%.*s", (int)k->size, field);
        break;
    case RG_CONF_CUSTOM:
        snprintf(buf, len, "?");
        break;
    }
}

/* ---- the file ---------------------------------------------------------------------------- */

struct instance {
    int section; /* index into the schema's sections */
    char name[RG_CONF_NAME_MAX + 1];
    int line; /* of its header; 0 = the implicit section, no header yet */
    void *obj;
    int key_line[RG_CONF_KEYS_MAX]; /* where each key was set; 0 = not yet */
};

enum { CUR_NONE = -1, CUR_SKIP = -2 }; /* no header yet; after a refused header */

struct state {
    struct rg_conf_parse *p;
    struct instance *inst;
    int ninst, cap;
    int cur; /* index into inst, or CUR_* */
    int lineno;
};

/* Bytes outside printable ASCII as \xNN, so a message is one line that shows what is there. */
static void escape(char *dst, size_t len, const char *src, size_t n)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 5 < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c < 0x7f)
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, len - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

static void report(struct state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(struct state *st, const char *fmt, ...)
{
    char msg[1024];
    int n = st->lineno > 0 ? snprintf(msg, sizeof(msg), "%s:%d: ", st->p->origin, st->lineno)
                           : snprintf(msg, sizeof(msg), "%s: ", st->p->origin);
    va_list ap;

    if (++st->p->errors > REPORTS_MAX)
        return;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    if (st->p->report != NULL)
        st->p->report(st->p->report_arg, msg);
    else
        rg_error("%s", msg);
}

/* Edit distance, ignoring case and '-' against '_', for "did you mean". */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[64];

    if (la >= 63 || lb >= 63)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int same = ca == cb || (ca == '-' && cb == '_') || (ca == '_' && cb == '-');
            int best = diag + !same;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[lb];
}

/* " (did you mean 'x'?)" for the nearest of names within 2 edits, else "". */
static const char *suggest(char *buf, size_t len, const char *given, const char *const *names,
                           size_t n)
{
    int best = 3;

    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int d = distance(given, names[i]);
        if (d < best) {
            best = d;
            snprintf(buf, len, " (did you mean '%s'?)", names[i]);
        }
    }
    return buf;
}

/* "[server] or [tenant NAME]" */
static void section_forms(const struct rg_conf_schema *s, char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < s->nsections && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s[%s%s]",
                              i == 0                 ? ""
                              : i + 1 < s->nsections ? ", "
                                                     : " or ",
                              s->sections[i].name, s->sections[i].named ? " NAME" : "");
}

static int instance_add(struct state *st, int section, const char *name, void *obj)
{
    if (st->ninst == st->cap) {
        int cap = st->cap ? st->cap * 2 : 16;
        struct instance *n = cap <= INSTANCES_MAX ? realloc(st->inst, cap * sizeof(*n)) : NULL;
        if (n == NULL)
            return -1;
        st->inst = n;
        st->cap = cap;
    }
    struct instance *in = &st->inst[st->ninst];
    memset(in, 0, sizeof(*in));
    in->section = section;
    in->obj = obj;
    snprintf(in->name, sizeof(in->name), "%s", name);
    return st->ninst++;
}

static int instance_find(struct state *st, int section, const char *name)
{
    for (int i = 0; i < st->ninst; i++)
        if (st->inst[i].section == section && strcmp(st->inst[i].name, name) == 0)
            return i;
    return -1;
}

/* Open (section, name) for its header at this line (line 0: implicit); the instance or -1. */
static int section_open(struct state *st, int section, const char *name, int line)
{
    const struct rg_conf_section *s = &st->p->schema->sections[section];
    int i = instance_find(st, section, name);
    char why[256] = "";
    void *obj;

    if (i >= 0 && st->inst[i].line == 0 && line > 0) { /* keys before the header, then it */
        st->inst[i].line = line;
        return i;
    }
    if (i >= 0) {
        report(st,
               "[%s%s%s] is already at line %d: a section is written once (two are never "
               "merged)",
               s->name, s->named ? " " : "", name, st->inst[i].line);
        return -1;
    }
    obj = s->open(st->p->arg, name, why, sizeof(why));
    if (obj == NULL) {
        report(st, "[%s%s%s]: %s", s->name, s->named ? " " : "", name, why);
        return -1;
    }
    if ((i = instance_add(st, section, name, obj)) < 0) {
        report(st, "too many sections (more than %d)", INSTANCES_MAX);
        return -1;
    }
    st->inst[i].line = line;
    return i;
}

static void header(struct state *st, char *line)
{
    const struct rg_conf_schema *sc = st->p->schema;
    size_t n = strlen(line), w;
    char shown[160], forms[256], hint[96], word[32];
    const char *names[16];
    int section = -1;

    st->cur = CUR_SKIP;
    escape(shown, sizeof(shown), line, n);
    section_forms(sc, forms, sizeof(forms));
    if (line[n - 1] != ']') {
        report(st, "section header '%s' does not end with ']': expected %s", shown, forms);
        return;
    }
    line[n - 1] = '\0';
    w = strspn(line + 1, "abcdefghijklmnopqrstuvwxyz_");
    snprintf(word, sizeof(word), "%.*s", (int)(w < sizeof(word) ? w : sizeof(word) - 1), line + 1);
    for (size_t i = 0; i < sc->nsections && i < 16; i++) {
        names[i] = sc->sections[i].name;
        if (strcmp(word, names[i]) == 0 && w < sizeof(word))
            section = (int)i;
    }
    if (section < 0) {
        char given[64];
        size_t g = strcspn(line + 1, " \t");
        snprintf(given, sizeof(given), "%.*s", (int)(g < sizeof(given) ? g : sizeof(given) - 1),
                 line + 1);
        report(st, "unknown section '%s'%s: expected %s", shown,
               suggest(hint, sizeof(hint), given, names, sc->nsections < 16 ? sc->nsections : 16),
               forms);
        return;
    }
    const struct rg_conf_section *s = &sc->sections[section];
    const char *rest = line + 1 + w, *name = rest + 1;
    size_t nl = strlen(name);
    bool ok = s->named ? rest[0] == ' ' && nl >= 1 && nl <= RG_CONF_NAME_MAX &&
                             strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789._-") == nl
                       : rest[0] == '\0';
    if (!ok) {
        if (s->named)
            report(st,
                   "section header '%s': expected [%s NAME]: one space, then a NAME of 1 to "
                   "%d letters, digits, '.', '_' or '-'",
                   shown, s->name, RG_CONF_NAME_MAX);
        else
            report(st, "section header '%s': expected [%s], with no name", shown, s->name);
        return;
    }
    int i = section_open(st, section, s->named ? name : "", st->lineno);
    st->cur = i >= 0 ? i : CUR_SKIP;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Cut the line at its comment: a '#' at the start of the line or after whitespace, outside
 * double quotes. A '#' inside a word ("beta#secret", "http://h/p#frag") is part of it. */
static void cut_comment(char *line)
{
    bool quoted = false;

    for (char *p = line; *p != '\0'; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (*p == '#' && !quoted && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

static void key_line(struct state *st, char *line)
{
    const struct rg_conf_schema *sc = st->p->schema;
    char *eq = strchr(line, '='), *key, *value, why[512], shown[160], hint[96], forms[256];

    if (eq == NULL) {
        escape(shown, sizeof(shown), line, strlen(line));
        report(st, "'%s': expected 'key = value', a [section] header or a # comment", shown);
        return;
    }
    *eq = '\0';
    key = trim(line);
    value = trim(eq + 1);
    size_t vlen = strlen(value);
    if (vlen >= 1 && value[0] == '"') {
        if (vlen < 2 || value[vlen - 1] != '"') {
            report(st, "the value of '%s' opens a quote it does not close", key);
            return;
        }
        value[vlen - 1] = '\0';
        value++;
    }
    if (st->cur == CUR_SKIP) /* under a header already reported */
        return;
    if (st->cur == CUR_NONE) {
        int section = -1;
        for (size_t i = 0; sc->implicit != NULL && i < sc->nsections; i++)
            if (strcmp(sc->sections[i].name, sc->implicit) == 0 && !sc->sections[i].named)
                section = (int)i;
        if (section < 0) {
            section_forms(sc, forms, sizeof(forms));
            report(st, "'%s' before any section header: expected %s first", key, forms);
            st->cur = CUR_SKIP;
            return;
        }
        st->cur = section_open(st, section, "", 0);
        if (st->cur < 0) {
            st->cur = CUR_SKIP;
            return;
        }
    }
    struct instance *in = &st->inst[st->cur];
    const struct rg_conf_section *s = &sc->sections[in->section];
    const struct rg_conf_key *k = rg_conf_key_find(s, key);
    if (k == NULL) {
        const char *names[RG_CONF_KEYS_MAX];
        for (size_t i = 0; i < s->nkeys && i < RG_CONF_KEYS_MAX; i++)
            names[i] = s->keys[i].name;
        escape(shown, sizeof(shown), key, strlen(key));
        report(st, "unknown key '%s' in [%s]%s", shown, s->name,
               suggest(hint, sizeof(hint), key, names,
                       s->nkeys < RG_CONF_KEYS_MAX ? s->nkeys : RG_CONF_KEYS_MAX));
        return;
    }
    size_t idx = (size_t)(k - s->keys);
    if (idx < RG_CONF_KEYS_MAX && in->key_line[idx] != 0 && !(k->flags & RG_CONF_LIST)) {
        report(st, "'%s' is already set at line %d: each key once per section", key,
               in->key_line[idx]);
        return;
    }
    if (set_value(k, in->obj, value, why, sizeof(why)) != RG_OK) {
        escape(shown, sizeof(shown), value, strlen(value));
        if (k->flags & RG_CONF_SECRET)
            report(st, "invalid setting '%s': %s", key, why);
        else
            report(st, "invalid setting '%s = %s': %s", key, shown, why);
        return;
    }
    if (idx < RG_CONF_KEYS_MAX)
        in->key_line[idx] = st->lineno;
}

static void parse_line(struct state *st, const char *start, size_t n)
{
    char *line, *copy;

    if (memchr(start, '\0', n) != NULL) {
        report(st, "a NUL byte: a config file is text (the line is refused, and so is the file)");
        size_t lead = 0;
        while (lead < n && isspace((unsigned char)start[lead]))
            lead++;
        if (lead < n && start[lead] == '[') /* a header: its keys belong to no known section */
            st->cur = CUR_SKIP;
        return;
    }
    if (n > RG_CONF_LINE_MAX) {
        report(st, "a line of %zu bytes: at most %d", n, RG_CONF_LINE_MAX);
        return;
    }
    if ((copy = malloc(n + 1)) == NULL) {
        report(st, "out of memory");
        return;
    }
    memcpy(copy, start, n);
    copy[n] = '\0';
    cut_comment(copy);
    line = trim(copy);
    if (*line == '[')
        header(st, line);
    else if (*line != '\0')
        key_line(st, line);
    free(copy);
}

rg_status_t rg_conf_parse_text(struct rg_conf_parse *p, const char *text, size_t len)
{
    struct state st = {.p = p, .cur = CUR_NONE};
    size_t pos = 0;

    p->errors = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - (text + pos)) : len - pos;
        st.lineno++;
        parse_line(&st, text + pos, n);
        pos += n + 1;
    }
    if (p->errors > REPORTS_MAX) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %d more error(s) not shown", p->origin,
                 p->errors - REPORTS_MAX);
        if (p->report != NULL)
            p->report(p->report_arg, msg);
        else
            rg_error("%s", msg);
    }
    free(st.inst);
    return p->errors == 0 ? RG_OK : RG_ERR_INVALID;
}

rg_status_t rg_conf_read_file(const char *path, char **text_p, size_t *len_p, struct stat *st_p,
                              char *why, size_t why_len)
{
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer; a regular file ignores it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    ssize_t n;

    if (fd < 0) {
        snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
        return RG_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_len, "cannot stat %s: %s", path, strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s is not a regular file (%s): a config file must be one", path,
                 S_ISFIFO(st.st_mode)   ? "a FIFO"
                 : S_ISDIR(st.st_mode)  ? "a directory"
                 : S_ISSOCK(st.st_mode) ? "a socket"
                                        : "a device");
        goto err_close;
    }
    if (st.st_size > RG_CONF_FILE_MAX || (text = malloc((size_t)st.st_size + 2)) == NULL) {
        snprintf(why, why_len, "%s is larger than %u bytes", path, RG_CONF_FILE_MAX);
        goto err_close;
    }
    /* one byte more than stat said: a file that grew meanwhile is seen to be too large */
    while ((n = read(fd, text + len, (size_t)st.st_size + 1 - len)) > 0)
        len += (size_t)n;
    if (n < 0) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        goto err_free;
    }
    if (len > (size_t)st.st_size) {
        snprintf(why, why_len, "%s changed while it was read", path);
        goto err_free;
    }
    close(fd);
    text[len] = '\0';
    *text_p = text;
    *len_p = len;
    if (st_p != NULL)
        *st_p = st;
    return RG_OK;
err_free:
    free(text);
err_close:
    close(fd);
    return RG_ERR_IO;
}

rg_status_t rg_conf_parse_file(struct rg_conf_parse *p, const char *path)
{
    char why[512], *text;
    size_t len;
    rg_status_t status;

    if (rg_conf_read_file(path, &text, &len, NULL, why, sizeof(why)) != RG_OK) {
        p->errors = 1;
        if (p->report != NULL)
            p->report(p->report_arg, why);
        else
            rg_error("%s", why);
        return RG_ERR_IO;
    }
    status = rg_conf_parse_text(p, text, len);
    free(text);
    return status;
}

/* ---- shared grammars --------------------------------------------------------------------- */

rg_status_t rg_split_hostport(const char *addr, char *host, size_t host_len, char *port,
                              size_t port_len, const char *default_port)
{
    const char *colon;
    size_t hlen;

    if (addr == NULL || *addr == '\0')
        return RG_ERR_INVALID;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL)
            return RG_ERR_INVALID;
        hlen = (size_t)(close - addr - 1);
        addr++;
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(addr, ':');
        hlen = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    }
    if (hlen + 1 > host_len)
        return RG_ERR_INVALID;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    const char *p = colon != NULL ? colon + 1 : default_port;
    if (p == NULL || *p == '\0' || strlen(p) + 1 > port_len)
        return RG_ERR_INVALID;
    snprintf(port, port_len, "%s", p);
    return RG_OK;
}

bool rg_parse_size(const char *text, uint64_t *bytes_p)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    char *end;
    unsigned long long v;

    if (text == NULL || *text < '0' || *text > '9')
        return false;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0)
        return false;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (units[i].shift > 0 && v > (UINT64_MAX >> units[i].shift))
                return false;
            *bytes_p = (uint64_t)v << units[i].shift;
            return true;
        }
    }
    return false;
}
