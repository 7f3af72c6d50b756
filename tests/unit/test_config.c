/* Config parsing (common/config.c) and host:port splitting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"

struct seen {
    int n;
    char lines[16][128]; /* "section|key|value" */
    const char *fail_key; /* the callback rejects this key */
};

static rg_status_t record(void *arg, const char *section, const char *key, const char *value)
{
    struct seen *s = arg;

    if (s->fail_key != NULL && strcmp(key, s->fail_key) == 0)
        return RG_ERR_INVALID;
    assert_true(s->n < 16);
    snprintf(s->lines[s->n++], sizeof(s->lines[0]), "%s|%s|%s", section, key, value);
    return RG_OK;
}

static void test_sections_keys_comments(void **state)
{
    const char *text = "# leading comment\n"
                       "top = 1\n"
                       "\n"
                       "[server]\n"
                       "  listen   =  0.0.0.0:7070   # trailing comment\n"
                       "transport=auto\r\n"
                       "[tenant alice]\n"
                       "token = \"s3cret value\"\n"
                       "   # indented comment\n"
                       "quota=8G";
    struct seen s = {0};

    assert_int_equal(rg_config_parse_string(text, "test", record, &s), RG_OK);
    assert_int_equal(s.n, 5);
    assert_string_equal(s.lines[0], "|top|1");
    assert_string_equal(s.lines[1], "server|listen|0.0.0.0:7070");
    assert_string_equal(s.lines[2], "server|transport|auto");
    assert_string_equal(s.lines[3], "tenant alice|token|s3cret value");
    assert_string_equal(s.lines[4], "tenant alice|quota|8G");
}

/* '#' starts a comment only at the start of a line or after whitespace; inside double quotes
 * it is a character like any other (issue 15: "token = beta#secret" made the token "beta"). */
static void test_hash_inside_values(void **state)
{
    const char *text = "token = beta#secret\n"
                       "url = http://h/p#frag   # a comment\n"
                       "tab = x\t#comment\n"
                       "quoted = \"a # b\"  # comment\n"
                       "#comment = no\n"
                       "q2 = \"#\"\n"
                       "empty = # all comment\n";
    struct seen s = {0};

    (void)state;
    assert_int_equal(rg_config_parse_string(text, "test", record, &s), RG_OK);
    assert_int_equal(s.n, 6);
    assert_string_equal(s.lines[0], "|token|beta#secret");
    assert_string_equal(s.lines[1], "|url|http://h/p#frag");
    assert_string_equal(s.lines[2], "|tab|x");
    assert_string_equal(s.lines[3], "|quoted|a # b");
    assert_string_equal(s.lines[4], "|q2|#");
    assert_string_equal(s.lines[5], "|empty|");
    /* an opening quote never closed is an error, not a value running to the end of the line */
    assert_int_not_equal(rg_config_parse_string("k = \"open # x\n", "test", record, &s), RG_OK);
}

static void test_empty(void **state)
{
    struct seen s = {0};

    assert_int_equal(rg_config_parse_string("", "test", record, &s), RG_OK);
    assert_int_equal(rg_config_parse_string("\n\n# only comments\n", "test", record, &s), RG_OK);
    assert_int_equal(s.n, 0);
}

static void test_errors(void **state)
{
    struct seen s = {0};

    assert_int_equal(rg_config_parse_string("[server\nk = v\n", "test", record, &s),
                     RG_ERR_INVALID);
    assert_int_equal(rg_config_parse_string("a = 1\njust words\nb = 2\n", "test", record, &s),
                     RG_ERR_INVALID);
    assert_int_equal(s.n, 1); /* parsing stopped at the bad line */
    assert_string_equal(s.lines[0], "|a|1");
}

static void test_callback_error_stops(void **state)
{
    struct seen s = {.fail_key = "bad"};

    assert_int_equal(rg_config_parse_string("a = 1\nbad = x\nc = 3\n", "test", record, &s),
                     RG_ERR_INVALID);
    assert_int_equal(s.n, 1);
}

static void test_parse_file(void **state)
{
    char path[] = "/tmp/rgpu-config-XXXXXX";
    const char *text = "[pool]\nservers = a:1, b:2\n";
    struct seen s = {0};
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(rg_config_parse_file(path, record, &s), RG_OK);
    unlink(path);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.lines[0], "pool|servers|a:1, b:2");
    assert_int_equal(rg_config_parse_file(path, record, &s), RG_ERR_IO);
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
    assert_int_equal(rg_split_hostport("longhost:1", small, sizeof(small), port, sizeof(port),
                                       NULL),
                     RG_ERR_INVALID);
    assert_int_equal(rg_split_hostport("h:12345", host, sizeof(host), small, sizeof(small),
                                       NULL),
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
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_hash_inside_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_callback_error_stops),
        cmocka_unit_test(test_parse_file),
        cmocka_unit_test(test_split_hostport),
        cmocka_unit_test(test_split_hostport_errors),
    };
    return cmocka_run_group_tests_name("common config", tests, NULL, NULL);
}
