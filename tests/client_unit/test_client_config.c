/* The client's configuration (client/session/config.c) and pool resolution (client/session/pool.c):
 * the search order, every key and its errors, the environment over the file, listed servers
 * (RGPU_SERVER) against a placed pool (RGPU_POOL), the token file's permission check, and a
 * pool entry resolving to servers. */
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

#include "client/session/config.h"
#include "client/session/pool.h"

static char dir[64];
static char path_a[128], path_home[128], token_path[128];

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static void clear_env(void)
{
    static const char *const vars[] = {"RGPU_CONFIG",
                                       "RGPU_SERVER",
                                       "RGPU_POOL",
                                       "RGPU_TENANT",
                                       "RGPU_TOKEN",
                                       "RGPU_TOKEN_FILE",
                                       "RGPU_MEM_QUOTA",
                                       "RGPU_POLICY",
                                       "RGPU_CONNECT_TIMEOUT_MS",
                                       "RGPU_PROBE_TIMEOUT_MS",
                                       "RGPU_TRANSPORT",
                                       "RGPU_LANES",
                                       "RGPU_GPUS"};

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static int setup(void **state)
{
    char sub[160];

    snprintf(dir, sizeof(dir), "/tmp/rgpu-conf-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/.config", dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof(sub), "%s/.config/rgpu", dir);
    mkdir(sub, 0700);
    snprintf(path_a, sizeof(path_a), "%s/a.conf", dir);
    snprintf(path_home, sizeof(path_home), "%s/.config/rgpu/client.conf", dir);
    snprintf(token_path, sizeof(token_path), "%s/token", dir);
    setenv("HOME", dir, 1);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_pick_first_existing(void **state)
{
    const char *paths[] = {NULL, "/nonexistent/x.conf", path_a, path_home};

    write_file(path_a, "", 0600);
    write_file(path_home, "", 0600);
    assert_string_equal(cli_conf_pick(paths, 4), path_a);
    assert_string_equal(cli_conf_pick(paths + 3, 1), path_home);
    assert_null(cli_conf_pick(paths, 2));
    unlink(path_a);
    unlink(path_home);
}

/* RGPU_CONFIG first, else ~/.config/rgpu/client.conf; the first found is read alone. */
static void test_search_order(void **state)
{
    struct cli_conf conf;
    char why[512];

    clear_env();
    write_file(path_home, "pool = home:1\ntenant = from-home\n", 0600);
    write_file(path_a, "[client]\npool = a:2\n", 0600);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_string_equal(conf.source, path_home);
    assert_string_equal(conf.pool[0], "home:1");
    assert_string_equal(conf.tenant, "from-home");
    setenv("RGPU_CONFIG", path_a, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_string_equal(conf.source, path_a);
    assert_int_equal(conf.npool, 1);
    assert_string_equal(conf.pool[0], "a:2");
    assert_string_equal(conf.tenant, "");                /* not merged with the home file */
    setenv("RGPU_CONFIG", "/nonexistent/named.conf", 1); /* named and missing: an error */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "/nonexistent/named.conf"));
    unlink(path_home);
    unsetenv("RGPU_CONFIG");
    /* nothing found (no /etc/rgpu/client.conf in CI): the default server */
    if (access("/etc/rgpu/client.conf", F_OK) != 0) {
        assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
        assert_string_equal(conf.source, "");
        assert_int_equal(conf.npool, 1);
        assert_string_equal(conf.pool[0], CLI_DEFAULT_SERVER);
    }
    unlink(path_a);
}

static void test_every_key(void **state)
{
    struct cli_conf conf;
    char why[512];

    clear_env();
    write_file(token_path, "tok-from-file\n", 0600);
    char text[1024];
    snprintf(text, sizeof(text),
             "# a pool of three entries on two lines, and a server\n"
             "[client]\n"
             "pool = gpu-a:7070, gpu-b:7071\n"
             "pool = gpu-pool.example.svc\n"
             "server = 10.0.0.9:7000\n"
             "tenant = alpha\n"
             "token_file = %s\n"
             "mem_quota = 4GiB\n"
             "policy = pack\n"
             "connect_timeout_ms = 1500\n"
             "probe_timeout_ms = 800\n"
             "transport = tcp\n"
             "lanes = 2\n",
             token_path);
    write_file(path_a, text, 0600);
    setenv("RGPU_CONFIG", path_a, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 4);
    assert_string_equal(conf.pool[0], "gpu-a:7070");
    assert_string_equal(conf.pool[1], "gpu-b:7071");
    assert_string_equal(conf.pool[2], "gpu-pool.example.svc");
    assert_string_equal(conf.pool[3], "10.0.0.9:7000");
    assert_string_equal(conf.tenant, "alpha");
    assert_string_equal(conf.token, "tok-from-file");
    assert_int_equal(conf.mem_quota, 4ull << 30);
    assert_int_equal(conf.policy, SCHED_PACK);
    assert_int_equal(conf.connect_timeout_ms, 1500);
    assert_int_equal(conf.probe_timeout_ms, 800);
    assert_string_equal(conf.transport, "tcp");
    assert_int_equal(conf.lanes, 2);

    /* the environment over the file; RGPU_SERVER (listed servers) wins over RGPU_POOL */
    setenv("RGPU_POOL", "x:1 y:2", 1);
    setenv("RGPU_POLICY", "first", 1);
    setenv("RGPU_MEM_QUOTA", "512MiB", 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 2);
    assert_string_equal(conf.pool[1], "y:2");
    assert_int_equal(conf.policy, SCHED_FIRST);
    assert_int_equal(conf.mem_quota, 512ull << 20);
    setenv("RGPU_MEM_QUOTA", "2 TiB", 1); /* the one size grammar (rg_parse_size) */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.mem_quota, 2ull << 40);
    setenv("RGPU_TOKEN", "tok-from-env", 1); /* over the file's token_file */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_string_equal(conf.token, "tok-from-env");
    assert_string_equal(conf.token_file, "");
    setenv("RGPU_SERVER", "only:9", 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 1);
    assert_string_equal(conf.pool[0], "only:9");
    clear_env();
    unlink(path_a);
    unlink(token_path);
}

/* Listed servers (`server`, RGPU_SERVER=a,b) are the servers of the process, one session each;
 * a pool (`pool`, RGPU_POOL) is placed: its placement picks one server for the job. */
static void test_servers_or_pool(void **state)
{
    struct cli_conf conf;
    char why[512];

    clear_env();
    write_file(path_a, "server = a:1\nserver = b:2\n", 0600);
    setenv("RGPU_CONFIG", path_a, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 2);
    assert_false(conf.placed);
    write_file(path_a, "pool = a:1, b:2\n", 0600);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 2);
    assert_true(conf.placed);
    setenv("RGPU_SERVER", "c:3,d:4", 1); /* over the file's pool: listed servers */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 2);
    assert_string_equal(conf.pool[1], "d:4");
    assert_false(conf.placed);
    unsetenv("RGPU_SERVER");
    write_file(path_a, "server = a:1, b:2\n", 0600);
    setenv("RGPU_POOL", "e:5,f:6", 1); /* over the file's servers: a pool */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.npool, 2);
    assert_true(conf.placed);
    clear_env();
    unlink(path_a);
}

static void test_bad_values_named(void **state)
{
    static const char *const bad[][2] = {{"policy = binpack\n", "policy = binpack"},
                                         {"mem_quota = lots\n", "mem_quota = lots"},
                                         {"mem_quota = 99999999TiB\n", "mem_quota = 99999999TiB"},
                                         {"connect_timeout_ms = -5\n", "connect_timeout_ms = -5"},
                                         {"probe_timeout_ms = soon\n", "probe_timeout_ms = soon"}};
    struct cli_conf conf;
    char why[512];

    clear_env();
    setenv("RGPU_CONFIG", path_a, 1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(path_a, bad[i][0], 0600);
        assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
        assert_non_null(strstr(why, bad[i][1]));
    }
    write_file(path_a, "", 0600);
    setenv("RGPU_POLICY", "random", 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(
        strstr(why, "environment: RGPU_POLICY = random: expected spread, pack or first"));
    clear_env();
    unlink(path_a);
}

/* A token file open to its group or to others is refused, with the reason and the fix. */
static void test_token_file_permissions(void **state)
{
    struct cli_conf conf;
    char token[64], why[512];

    clear_env();
    write_file(token_path, "s3cret\n", 0600);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_OK);
    assert_string_equal(token, "s3cret");
    write_file(token_path, "s3cret\n", 0400);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_OK);
    write_file(token_path, "s3cret\n", 0644);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    assert_non_null(strstr(why, "mode 0644"));
    assert_non_null(strstr(why, "readable only by its owner"));
    write_file(token_path, "s3cret\n", 0640);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    assert_int_equal(cli_token_file_read(dir, token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    assert_non_null(strstr(why, "not a regular file"));
    assert_int_equal(cli_token_file_read("/nonexistent/t", token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    /* through the configuration: the load fails with that reason */
    write_file(token_path, "s3cret\n", 0604);
    setenv("RGPU_TOKEN_FILE", token_path, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "open to its group or others (mode 0604)"));
    clear_env();
    unlink(token_path);
}

/* Issue 27 item 2: a misspelled section or key, a bad value: each an error naming the file and
 * line (they were ignored, falling back to 127.0.0.1:7070, even at debug level). */
static void test_mistakes_refused(void **state)
{
    static const char *const bad[][2] = {
        {"[clinet]\npool = a:1\n", ":1: unknown section '[clinet]' (did you mean 'client'?)"},
        {"[client]\npolcy = pack\n", ":2: unknown key 'polcy' in [client] (did you mean "
                                     "'policy'?)"},
        {"lanes = -3\n", ":1: invalid setting 'lanes = -3': expected a whole number from 0 to "
                         "16"},
        {"lanes = 4x\n", ":1: invalid setting 'lanes = 4x'"},
        {"gpus = 0\n", ":1: invalid setting 'gpus = 0'"},
        {"transport = rmda\n",
         ":1: invalid setting 'transport = rmda': expected auto, rdma or tcp"},
        {"pool = a:70000\n", ":1: invalid setting 'pool = a:70000'"},
        {"pool =\n", ":1: invalid setting 'pool = '"},
        {"tenant = a\ntenant = b\n", ":2: 'tenant' is already set at line 1"},
        {"[client]\n[nvml]\npool = x:1\n", ":2: unknown section '[nvml]'"},
        {"connect_timeout_ms = 5 sec\n", ":1: invalid setting"},
    };
    struct cli_conf conf;
    char why[512], want[256];

    clear_env();
    setenv("RGPU_CONFIG", path_a, 1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(path_a, bad[i][0], 0600);
        assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
        snprintf(want, sizeof(want), "%s%s", path_a, bad[i][1]);
        if (strstr(why, want) == NULL)
            fail_msg("%s: '%s' wanted '%s'", bad[i][0], why, want);
    }
    /* several errors: the first, and how many more */
    write_file(path_a, "polcy = x\nlanes = -3\n[clinet]\n", 0600);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "(and 2 more error(s)"));
    /* the environment through the same rows */
    write_file(path_a, "", 0600);
    setenv("RGPU_LANES", "-3", 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "environment: RGPU_LANES = -3: expected a whole number"));
    unsetenv("RGPU_LANES");
    setenv("RGPU_CONNECT_TIMEOUT_MS", "2s", 1); /* a unit where it fits */
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_int_equal(conf.connect_timeout_ms, 2000);
    assert_int_equal(conf.lanes, 4);
    assert_string_equal(conf.transport, "auto");
    clear_env();
    unlink(path_a);
}

/* Issue 27 item 7: a FIFO as RGPU_CONFIG or RGPU_TOKEN_FILE was opened before its type was
 * checked, and the open waited for a writer forever (cuInit and rgpu status hung). */
static void test_fifos_refused(void **state)
{
    struct cli_conf conf;
    char why[512], token[256];

    clear_env();
    assert_int_equal(mkfifo(path_a, 0600), 0);
    setenv("RGPU_CONFIG", path_a, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "is not a regular file (a FIFO)"));
    unsetenv("RGPU_CONFIG");
    assert_int_equal(cli_token_file_read(path_a, token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    assert_non_null(strstr(why, "not a regular file"));
    setenv("RGPU_TOKEN_FILE", path_a, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    clear_env();
    unlink(path_a);
}

/* Issue 27 item 7: a token over 255 characters was cut to 255 without a word; a client.conf
 * open to others that holds a token was taken (a token_file so open is refused). */
static void test_tokens(void **state)
{
    struct cli_conf conf;
    char why[512], token[256], text[400], long_token[300];

    clear_env();
    memset(long_token, 'k', 256);
    long_token[256] = '\0';
    setenv("RGPU_CONFIG", path_a, 1);
    snprintf(text, sizeof(text), "token = %s\n", long_token);
    write_file(path_a, text, 0600);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, ":1: invalid setting 'token': expected a token of at most 255"));
    assert_null(strstr(why, "kkkk")); /* never shown */
    write_file(path_a, "", 0600);
    setenv("RGPU_TOKEN", long_token, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "environment: RGPU_TOKEN: expected a token of at most 255"));
    unsetenv("RGPU_TOKEN");
    snprintf(text, sizeof(text), "%s\n", long_token);
    write_file(token_path, text, 0600);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_ERR_REFUSED);
    assert_non_null(strstr(why, "longer than 255 characters"));
    long_token[255] = '\0'; /* 255: the most, kept whole */
    snprintf(text, sizeof(text), "%s\n", long_token);
    write_file(token_path, text, 0600);
    assert_int_equal(cli_token_file_read(token_path, token, sizeof(token), why, sizeof(why)),
                     RG_OK);
    assert_string_equal(token, long_token);
    setenv("RGPU_TOKEN", long_token, 1);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_string_equal(conf.token, long_token);
    unsetenv("RGPU_TOKEN");

    /* a token in a file others can read: refused as a token_file is */
    write_file(path_a, "tenant = a\ntoken = s3cret\n", 0644);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    assert_non_null(strstr(why, "holds a token and is open to its group or others (mode 0644)"));
    write_file(path_a, "tenant = a\ntoken = s3cret\n", 0640);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_ERR_INVALID);
    write_file(path_a, "tenant = a\ntoken = s3cret\n", 0600);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    assert_string_equal(conf.token, "s3cret");
    /* a readable file without a token (the packaged /etc/rgpu/client.conf) is fine */
    write_file(path_a, "tenant = a\n# token = s3cret\n", 0644);
    assert_int_equal(cli_conf_load(&conf, why, sizeof(why)), RG_OK);
    clear_env();
    unlink(path_a);
    unlink(token_path);
}

/* Entries resolve to addresses: literal ones as they are, a port by default, names through
 * the resolver (localhost: one server per address, no duplicates), unresolvable ones kept with
 * the reason. */
static void test_pool_resolution(void **state)
{
    struct cli_conf conf = {.npool = 0};
    struct cli_pool pool;
    char why[128];

    assert_int_equal(cli_conf_add_pool(&conf,
                                       "127.0.0.1:9, 127.0.0.2 localhost:5 "
                                       "no-such-host.invalid:1 127.0.0.1:9",
                                       why, sizeof(why)),
                     RG_OK);
    assert_int_equal(cli_pool_resolve(&conf, &pool), RG_OK);
    assert_true(pool.n >= 4);
    assert_string_equal(pool.servers[0].addr, "127.0.0.1:9");
    assert_string_equal(pool.servers[1].addr, "127.0.0.2:" CLI_DEFAULT_PORT);
    int unresolved = 0, localhost = 0, nine = 0;
    for (int i = 0; i < pool.n; i++) {
        localhost += strcmp(pool.servers[i].name, "localhost:5") == 0;
        nine += strcmp(pool.servers[i].addr, "127.0.0.1:9") == 0;
        if (pool.servers[i].addr[0] == '\0') {
            unresolved++;
            assert_non_null(strstr(pool.servers[i].why, "cannot resolve no-such-host.invalid"));
        }
    }
    assert_int_equal(unresolved, 1);
    assert_true(localhost >= 1);
    assert_int_equal(nine, 1); /* listed twice, one server */
    cli_pool_free(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_first_existing), cmocka_unit_test(test_search_order),
        cmocka_unit_test(test_every_key),           cmocka_unit_test(test_servers_or_pool),
        cmocka_unit_test(test_bad_values_named),    cmocka_unit_test(test_token_file_permissions),
        cmocka_unit_test(test_pool_resolution),     cmocka_unit_test(test_mistakes_refused),
        cmocka_unit_test(test_fifos_refused),       cmocka_unit_test(test_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
