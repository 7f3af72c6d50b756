/* The typed configuration mechanism (common/config.c): the file's grammar, every error once
 * with FILE:LINE and the accepted form, the types and their bounds, and host:port splitting.
 * A small schema of its own here; the server's and the client's tables are tested in
 * tests/server/test_server_config.c and tests/client_unit/test_client_config.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"

struct top {
    int port;
    int level;
    bool flag;
    int wait_ms;
    uint64_t size;
    char name[16];
    char addr[64];
    char secret[32];
    char list[128];
    char url[64];
};

struct item {
    char token[64];
    int weight;
};

struct doc {
    struct top top;
    struct item items[4];
    char item_names[4][64];
    int nitems;
};

static bool parse_list(void *obj, const char *value, char *why, size_t why_len)
{
    struct top *t = obj;
    size_t n = strlen(t->list);

    if (strcmp(value, "bad") == 0) {
        snprintf(why, why_len, "expected anything but bad");
        return false;
    }
    snprintf(t->list + n, sizeof(t->list) - n, "%s%s", n ? "," : "", value);
    return true;
}

static const char *const levels[] = {"error", "warn", "info", "debug", NULL};

#define F(member) RG_CONF_FIELD(struct top, member)
static const struct rg_conf_key top_keys[] = {
    {.name = "port", .type = RG_CONF_INT, F(port), .min = 0, .max = 65535, .def = "7070"},
    {.name = "level", .type = RG_CONF_ENUM, F(level), .names = levels, .def = "info"},
    {.name = "flag", .type = RG_CONF_BOOL, F(flag), .def = "no"},
    {.name = "wait_ms",
     .type = RG_CONF_DURATION,
     F(wait_ms),
     .unit = RG_CONF_MS,
     .min = 0,
     .max = 600000,
     .zero_word = "never",
     .def = "5000"},
    {.name = "size", .type = RG_CONF_SIZE, F(size), .min = 1},
    {.name = "name", .type = RG_CONF_STRING, F(name), .min = 1},
    {.name = "addr", .type = RG_CONF_ADDR, F(addr)},
    {.name = "secret", .type = RG_CONF_STRING, F(secret), .flags = RG_CONF_SECRET},
    {.name = "list",
     .type = RG_CONF_CUSTOM,
     F(list),
     .parse = parse_list,
     .flags = RG_CONF_LIST,
     .help = "anything"},
    {.name = "url", .type = RG_CONF_STRING, F(url)},
};
#undef F

static const struct rg_conf_key item_keys[] = {
    {.name = "token",
     .type = RG_CONF_STRING,
     RG_CONF_FIELD(struct item, token),
     .min = 1,
     .flags = RG_CONF_SECRET},
    {.name = "weight",
     .type = RG_CONF_INT,
     RG_CONF_FIELD(struct item, weight),
     .min = 1,
     .max = 100,
     .def = "1"},
};

static void *top_open(void *arg, const char *name, char *why, size_t why_len)
{
    return &((struct doc *)arg)->top;
}

static void *item_open(void *arg, const char *name, char *why, size_t why_len)
{
    struct doc *d = arg;

    if (d->nitems == 4) {
        snprintf(why, why_len, "more than 4 items");
        return NULL;
    }
    snprintf(d->item_names[d->nitems], sizeof(d->item_names[0]), "%s", name);
    return &d->items[d->nitems++];
}

static const struct rg_conf_section sections[] = {
    {.name = "server",
     .keys = top_keys,
     .nkeys = sizeof(top_keys) / sizeof(top_keys[0]),
     .open = top_open},
    {.name = "tenant",
     .named = true,
     .keys = item_keys,
     .nkeys = sizeof(item_keys) / sizeof(item_keys[0]),
     .open = item_open},
};
static const struct rg_conf_schema schema = {sections, 2, "server"};

struct errors {
    int n;
    char lines[32][512];
};

static void collect(void *arg, const char *message)
{
    struct errors *e = arg;

    if (e->n < 32)
        snprintf(e->lines[e->n], sizeof(e->lines[0]), "%s", message);
    e->n++;
}

static struct doc doc;
static struct errors errs;

/* Parse text (len bytes) into the global doc; errors in errs. */
static rg_status_t parse_n(const char *text, size_t len)
{
    struct rg_conf_parse p = {
        .schema = &schema, .arg = &doc, .origin = "t.conf", .report = collect, .report_arg = &errs};
    rg_status_t st;

    memset(&doc, 0, sizeof(doc));
    memset(&errs, 0, sizeof(errs));
    rg_conf_defaults(&sections[0], &doc.top);
    st = rg_conf_parse_text(&p, text, len);
    assert_int_equal(p.errors, errs.n);
    return st;
}

static rg_status_t parse(const char *text)
{
    return parse_n(text, strlen(text));
}

/* One error reported, naming this line and containing want. */
static void one_error(const char *text, int line, const char *want)
{
    char at[32];

    assert_int_equal(parse(text), RG_ERR_INVALID);
    if (errs.n != 1 || strstr(errs.lines[0], want) == NULL)
        fail_msg("%s: %d error(s), first '%s', wanted '%s'", text, errs.n, errs.lines[0], want);
    snprintf(at, sizeof(at), "t.conf:%d: ", line);
    if (strncmp(errs.lines[0], at, strlen(at)) != 0)
        fail_msg("'%s' does not start with '%s'", errs.lines[0], at);
}

static void test_sections_keys_comments(void **state)
{
    const char *text = "# leading comment\n"
                       "port = 1\n"
                       "\n"
                       "[server]\n"
                       "  addr   =  0.0.0.0:7070   # trailing comment\n"
                       "level=debug\r\n"
                       "[tenant alice]\n"
                       "token = \"s3cret value\"\n"
                       "   # indented comment\n"
                       "weight=8";

    (void)state;
    assert_int_equal(parse(text), RG_OK);
    assert_int_equal(doc.top.port, 1); /* before any header: the implicit [server] */
    assert_string_equal(doc.top.addr, "0.0.0.0:7070");
    assert_int_equal(doc.top.level, 2 + 1);
    assert_int_equal(doc.nitems, 1);
    assert_string_equal(doc.item_names[0], "alice");
    assert_string_equal(doc.items[0].token, "s3cret value");
    assert_int_equal(doc.items[0].weight, 8);
    assert_int_equal(doc.top.wait_ms, 5000); /* defaults stay where no key is given */
}

/* '#' starts a comment only at the start of a line or after whitespace; inside double quotes
 * it is a character like any other (issue 15: "token = beta#secret" made the token "beta"). */
static void test_hash_inside_values(void **state)
{
    (void)state;
    assert_int_equal(parse("[tenant a]\ntoken = beta#secret\n"), RG_OK);
    assert_string_equal(doc.items[0].token, "beta#secret");
    assert_int_equal(parse("url = http://h/p#frag   # a comment\n"), RG_OK);
    assert_string_equal(doc.top.url, "http://h/p#frag");
    assert_int_equal(parse("name = x\t#comment\n"), RG_OK);
    assert_string_equal(doc.top.name, "x");
    assert_int_equal(parse("url = \"a # b\"  # comment\n#comment = no\n"), RG_OK);
    assert_string_equal(doc.top.url, "a # b");
    assert_int_equal(parse("url = # all comment\n"), RG_OK);
    assert_string_equal(doc.top.url, "");
    /* an opening quote never closed is an error, not a value running to the end of the line */
    one_error("url = \"open # x\n", 1, "opens a quote it does not close");
}

static void test_empty(void **state)
{
    (void)state;
    assert_int_equal(parse(""), RG_OK);
    assert_int_equal(parse("\n\n# only comments\n"), RG_OK);
    assert_int_equal(doc.top.port, 7070);
}

/* Issue 27 item 1: a misspelled section was skipped without a word. Each is an error naming
 * its line and the accepted form, once, and the keys under it add no second error. */
static void test_unknown_sections(void **state)
{
    static const struct {
        const char *header, *want;
    } bad[] = {
        {"[Tenant a]", "unknown section '[Tenant a]' (did you mean 'tenant'?)"},
        {"[tenants a]", "unknown section '[tenants a]' (did you mean 'tenant'?)"},
        {"[tenant\ta]", "section header '[tenant\\x09a]': expected [tenant NAME]: one space"},
        {"[tenant ]", "section header '[tenant ]': expected [tenant NAME]"},
        {"[tenant  a]", "expected [tenant NAME]"},
        {"[tenant a b]", "expected [tenant NAME]"},
        {"[tenant]", "expected [tenant NAME]"},
        {"[sever]", "unknown section '[sever]' (did you mean 'server'?)"},
        {"[server x]", "expected [server], with no name"},
        {"[server", "does not end with ']'"},
        {"[]", "unknown section '[]'"},
    };
    char text[128];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "port = 1\n%s\ntoken = t\nweight = 2\nzzz = 3\n",
                 bad[i].header);
        one_error(text, 2, bad[i].want);
        assert_non_null(strstr(errs.lines[0], "expected [server] or [tenant NAME]") ||
                        strstr(errs.lines[0], "expected [tenant NAME]") ||
                        strstr(errs.lines[0], "expected [server]"));
    }
    /* a name of 64 characters is refused; 63 is the most */
    snprintf(text, sizeof(text), "[tenant %064d]\n", 0);
    one_error(text, 1, "expected [tenant NAME]");
    snprintf(text, sizeof(text), "[tenant %063d]\n", 0);
    assert_int_equal(parse(text), RG_OK);
}

/* A NUL byte anywhere is an error at its line (the file was read as a C string: a NUL before
 * the tenant sections cut them off and left the server open). */
static void test_nul_byte(void **state)
{
    static const char text[] = "port = 1\n# x\0y\n[tenant a]\ntoken = t\n";

    (void)state;
    assert_int_equal(parse_n(text, sizeof(text) - 1), RG_ERR_INVALID);
    assert_int_equal(errs.n, 1);
    assert_non_null(strstr(errs.lines[0], "t.conf:2: a NUL byte"));
    assert_int_equal(doc.nitems, 1); /* the rest was read, and checked */
    /* a NUL inside a header: one error, not one more for each key under it */
    static const char head[] = "port = 1\n[tenant \0b]\ntoken = t\nweight = 2\n";
    assert_int_equal(parse_n(head, sizeof(head) - 1), RG_ERR_INVALID);
    assert_int_equal(errs.n, 1);
}

static void test_unknown_and_repeated_keys(void **state)
{
    (void)state;
    one_error("[server]\nlevle = info\n", 2,
              "unknown key 'levle' in [server] (did you mean "
              "'level'?)");
    one_error("[server]\nwait-ms = 5\n", 2, "(did you mean 'wait_ms'?)");
    one_error("[tenant a]\nport = 1\n", 2, "unknown key 'port' in [tenant]");
    one_error("port = 1\n[server]\nport = 2\n", 3, "'port' is already set at line 1");
    one_error("[tenant a]\ntoken = x\n[tenant b]\n[tenant a]\ntoken = y\n", 4,
              "[tenant a] is already at line 1: a section is written once");
    one_error("[server]\n[server]\n", 2, "[server] is already at line 1");
    one_error("just words\n", 1, "expected 'key = value'");
    /* a list key may repeat; every value is kept */
    assert_int_equal(parse("list = a\nlist = b\n"), RG_OK);
    assert_string_equal(doc.top.list, "a,b");
    one_error("list = bad\n", 1, "invalid setting 'list = bad': expected anything but bad");
    /* open() refusing a header: its reason, once */
    one_error("[tenant a]\n[tenant b]\n[tenant c]\n[tenant d]\n[tenant e]\n", 5,
              "[tenant e]: more than 4 items");
}

/* Every error of a file, each once, and parsing goes on after each. */
static void test_every_error_once(void **state)
{
    (void)state;
    assert_int_equal(parse("port = 70000\nlevel = verbose\n[clinet]\nx = 1\nflag = maybe\n"
                           "[server]\nwait_ms = ten\n"),
                     RG_ERR_INVALID);
    assert_int_equal(errs.n, 4);
    assert_string_equal(errs.lines[0], "t.conf:1: invalid setting 'port = 70000': expected a "
                                       "whole number from 0 to 65535");
    assert_string_equal(errs.lines[1], "t.conf:2: invalid setting 'level = verbose': expected "
                                       "one of error, warn, info, debug");
    assert_non_null(strstr(errs.lines[2], "t.conf:3: unknown section '[clinet]'"));
    assert_non_null(strstr(errs.lines[3], "t.conf:7: invalid setting 'wait_ms = ten'"));
}

/* Issue 27 item 2: values atoi took. */
static void test_int_values(void **state)
{
    static const char *const bad[] = {"70000",
                                      "99999",
                                      "52O90",
                                      "seventy",
                                      "+5",
                                      "5 ",
                                      "0x10",
                                      "-1",
                                      "",
                                      "1e3",
                                      "99999999999999999999"};
    char text[64];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "port = \"%s\"\n", bad[i]);
        one_error(text, 1, "expected a whole number from 0 to 65535");
    }
    assert_int_equal(parse("port = 65535\n"), RG_OK);
    assert_int_equal(doc.top.port, 65535);
    assert_int_equal(parse("port = 0\n"), RG_OK);
    assert_int_equal(doc.top.port, 0);
}

static void test_durations(void **state)
{
    static const struct {
        const char *text;
        int ms;
    } good[] = {{"250", 250},  {"500ms", 500}, {"30s", 30000}, {"2 s", 2000}, {"1min", 60000},
                {"3000us", 3}, {"never", 0},   {"0", 0},       {"0s", 0}};
    static const char *const bad[] = {"ten",   "1500us", "11min", "1h", "-5",
                                      "5 sec", "5m",     "1.5s",  "s",  "ms"};
    char text[64];

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(text, sizeof(text), "wait_ms = %s\n", good[i].text);
        assert_int_equal(parse(text), RG_OK);
        assert_int_equal(doc.top.wait_ms, good[i].ms);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "wait_ms = %s\n", bad[i]);
        one_error(text, 1, "expected a duration of 0 to 600000 milliseconds, or never");
    }
}

static void test_other_types(void **state)
{
    static const char *const yes[] = {"yes", "on", "true", "YES"}, *const no[] = {"no", "off",
                                                                                  "false"};
    char text[64];

    (void)state;
    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof(text), "flag = %s\n", yes[i]);
        assert_int_equal(parse(text), RG_OK);
        assert_true(doc.top.flag);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof(text), "flag = %s\n", no[i]);
        assert_int_equal(parse(text), RG_OK);
        assert_false(doc.top.flag);
    }
    one_error("flag = 1\n", 1, "expected yes or no");
    one_error("level = Debug\n", 1, "expected one of error, warn, info, debug");
    assert_int_equal(parse("size = 4GiB\n"), RG_OK);
    assert_int_equal(doc.top.size, 4ull << 30);
    one_error("size = 0\n", 1, "expected a size");
    one_error("size = 4 GB\n", 1, "expected a size");
    one_error("name = 0123456789abcdef\n", 1, "expected text of 1 to 15 characters");
    one_error("name =\n", 1, "expected text of 1 to 15 characters");
    one_error("name = \"a\tb\"\n", 1, "invalid setting 'name = a\\x09b'");
    assert_int_equal(parse("addr = [::1]:9400\n"), RG_OK);
    assert_int_equal(parse("addr = 0.0.0.0:0\n"), RG_OK);
    one_error("addr = 0.0.0.0\n", 1, "expected ADDR:PORT");
    one_error("addr = :9400\n", 1, "expected ADDR:PORT");
    one_error("addr = h:65536\n", 1, "expected ADDR:PORT");
    one_error("addr = h:http\n", 1, "expected ADDR:PORT");
}

/* A secret's value is never in a message. */
static void test_secret_not_shown(void **state)
{
    char text[128];

    (void)state;
    memset(text, 0, sizeof(text));
    snprintf(text, sizeof(text), "secret = %040d\n", 7);
    one_error(text, 1, "invalid setting 'secret': expected text of 0 to 31 characters");
    assert_null(strstr(errs.lines[0], "0000007"));
    one_error("[tenant a]\ntoken =\n", 2, "invalid setting 'token'");
}

static void test_set_format_defaults(void **state)
{
    struct top t;
    char why[256], buf[64];

    (void)state;
    memset(&t, 0, sizeof(t));
    rg_conf_defaults(&sections[0], &t);
    assert_int_equal(t.port, 7070);
    assert_int_equal(t.level, 2);
    assert_int_equal(t.wait_ms, 5000);
    assert_int_equal(rg_conf_set(&sections[0], &t, "port", "70000", why, sizeof(why)),
                     RG_ERR_INVALID);
    assert_string_equal(why, "expected a whole number from 0 to 65535");
    assert_int_equal(t.port, 7070); /* untouched */
    assert_int_equal(rg_conf_set(&sections[0], &t, "nope", "1", why, sizeof(why)),
                     RG_ERR_NOT_FOUND);
    assert_int_equal(rg_conf_set(&sections[0], &t, "wait_ms", "2s", why, sizeof(why)), RG_OK);
    /* format gives text the parser takes back */
    for (size_t i = 0; i < 4; i++) {
        struct top u;
        memset(&u, 0, sizeof(u));
        rg_conf_format(&top_keys[i], &t, buf, sizeof(buf));
        assert_int_equal(rg_conf_set(&sections[0], &u, top_keys[i].name, buf, why, sizeof(why)),
                         RG_OK);
        assert_memory_equal((char *)&u + top_keys[i].offset, (char *)&t + top_keys[i].offset,
                            top_keys[i].size);
    }
    rg_conf_format(&top_keys[3], &t, buf, sizeof(buf));
    assert_string_equal(buf, "2000ms");
}

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

/* Regular files only, never blocking on a FIFO (issue 27 item 7); size bounded. */
static void test_read_file(void **state)
{
    char dir[] = "/tmp/rgpu-config-XXXXXX", path[128], why[256], *text;
    struct rg_conf_parse p = {
        .schema = &schema, .arg = &doc, .origin = "x", .report = collect, .report_arg = &errs};
    struct stat st;
    size_t len;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/a.conf", dir);
    write_file(path, "[tenant a]\ntoken = x\n", 21);
    memset(&doc, 0, sizeof(doc));
    memset(&errs, 0, sizeof(errs));
    assert_int_equal(rg_conf_parse_file(&p, path), RG_OK);
    assert_int_equal(doc.nitems, 1);
    assert_int_equal(rg_conf_read_file(path, &text, &len, &st, why, sizeof(why)), RG_OK);
    assert_int_equal(len, 21);
    assert_true(S_ISREG(st.st_mode));
    free(text);
    unlink(path);
    assert_int_equal(rg_conf_parse_file(&p, path), RG_ERR_IO);
    assert_non_null(strstr(errs.lines[0], "cannot open"));
    assert_int_equal(mkfifo(path, 0600), 0); /* no writer: opening it used to wait forever */
    assert_int_equal(rg_conf_read_file(path, &text, &len, NULL, why, sizeof(why)), RG_ERR_IO);
    assert_non_null(strstr(why, "is not a regular file (a FIFO)"));
    unlink(path);
    assert_int_equal(rg_conf_read_file(dir, &text, &len, NULL, why, sizeof(why)), RG_ERR_IO);
    assert_non_null(strstr(why, "a directory"));
    char *big = calloc(1, RG_CONF_FILE_MAX + 1);
    assert_non_null(big);
    memset(big, '#', RG_CONF_FILE_MAX + 1);
    write_file(path, big, RG_CONF_FILE_MAX + 1);
    free(big);
    assert_int_equal(rg_conf_read_file(path, &text, &len, NULL, why, sizeof(why)), RG_ERR_IO);
    assert_non_null(strstr(why, "larger than"));
    unlink(path);
    rmdir(dir);
}

static rg_status_t split(const char *addr, const char *def, char *host, char *port)
{
    return rg_split_hostport(addr, host, 64, port, 16, def);
}

static void test_split_hostport(void **state)
{
    char host[64], port[16];

    assert_int_equal(split("gpu1.example:7070", NULL, host, port), RG_OK);
    assert_string_equal(host, "gpu1.example");
    assert_string_equal(port, "7070");
    assert_int_equal(split("gpu1", "9000", host, port), RG_OK);
    assert_string_equal(host, "gpu1");
    assert_string_equal(port, "9000");
    assert_int_equal(split("[::1]:8080", NULL, host, port), RG_OK);
    assert_string_equal(host, "::1");
    assert_string_equal(port, "8080");
    assert_int_equal(split("[fe80::1]", "7", host, port), RG_OK);
    assert_string_equal(host, "fe80::1");
    assert_string_equal(port, "7");
    assert_int_equal(split(":0", NULL, host, port), RG_OK);
    assert_string_equal(host, "");
    assert_string_equal(port, "0");
}

static void test_split_hostport_errors(void **state)
{
    char host[64], port[16], small[4];

    assert_int_equal(split("gpu1", NULL, host, port), RG_ERR_INVALID);  /* no port at all */
    assert_int_equal(split("gpu1:", NULL, host, port), RG_ERR_INVALID); /* empty port */
    assert_int_equal(split("[::1:80", NULL, host, port), RG_ERR_INVALID);
    assert_int_equal(split("", "1", host, port), RG_ERR_INVALID);
    assert_int_equal(split(NULL, "1", host, port), RG_ERR_INVALID);
    assert_int_equal(
        rg_split_hostport("longhost:1", small, sizeof(small), port, sizeof(port), NULL),
        RG_ERR_INVALID);
    assert_int_equal(rg_split_hostport("h:12345", host, sizeof(host), small, sizeof(small), NULL),
                     RG_ERR_INVALID);
}

/* The one size grammar of the server's and the client's config (rg_parse_size). */
static void test_parse_size(void **state)
{
    uint64_t v = 7;

    assert_true(rg_parse_size("4GiB", &v) && v == 4ull << 30);
    assert_true(rg_parse_size("512 MiB", &v) && v == 512ull << 20);
    assert_true(rg_parse_size("64kib", &v) && v == 64ull << 10);
    assert_true(rg_parse_size("2TiB", &v) && v == 2ull << 40);
    assert_true(rg_parse_size("4096", &v) && v == 4096);
    v = 7;
    assert_false(rg_parse_size("lots", &v));
    assert_false(rg_parse_size("4 GB", &v));
    assert_false(rg_parse_size("", &v));
    assert_false(rg_parse_size("-1", &v));
    assert_false(rg_parse_size("16777216TiB", &v)); /* 2^64: too large */
    assert_false(rg_parse_size("99999999999999999999", &v));
    assert_int_equal(v, 7); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sections_keys_comments),
        cmocka_unit_test(test_hash_inside_values),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_unknown_sections),
        cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_unknown_and_repeated_keys),
        cmocka_unit_test(test_every_error_once),
        cmocka_unit_test(test_int_values),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_other_types),
        cmocka_unit_test(test_secret_not_shown),
        cmocka_unit_test(test_set_format_defaults),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_split_hostport),
        cmocka_unit_test(test_split_hostport_errors),
    };
    return cmocka_run_group_tests_name("common config", tests, NULL, NULL);
}
