/* NVRTC's compile cache (client/api/compute_cache.c), through the export table as NVRTC calls it:
 * a miss, a store, a hit in another process with the same bytes, keys that differ by any input,
 * a damaged entry read as a miss, CUDA_CACHE_DISABLE, and the CUDA_CACHE_MAXSIZE budget. Each
 * case runs in a child process, since the cache reads its settings once per process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

const void *cli_export_table(const CUuuid *id);

typedef int (*cc_open_fn)(void **, uint64_t, const void *, uint64_t, const char *, const char *);
typedef int (*cc_close_fn)(void *);
typedef int (*cc_lookup_fn)(void *, uint64_t, void **, uint32_t *);
typedef int (*cc_store_fn)(void *, uint64_t, const void *, uint64_t);
typedef int (*cc_release_fn)(void *);

static const CUuuid cc_uuid = {{(char)0xda, (char)0x91, 0x51, (char)0xd3, 0x3a, (char)0xe6,
                                (char)0xcc, 0x41, (char)0xa5, (char)0xc0, 0x4f, 0x26, (char)0xd5,
                                0x33, (char)0xe3, 0x28}};
static char dir[256];

static const void *const *table(void)
{
    const void *const *t = cli_export_table(&cc_uuid);

    assert_non_null(t);
    assert_int_equal((uintptr_t)t[0], 56); /* the driver's: its size and six entry points */
    return t;
}

/* One lookup of (kind, input, options) in a child: 0 hit (the bytes must be `want`), 500 miss;
 * on a miss, stores `store` when given. Returns the lookup's result. */
static int lookup_in_child(const char *env, int kind, const char *input, const char *options,
                           const char *want, const char *store)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        const void *const *t;
        void *h = NULL, *data = NULL;
        uint32_t len = 0;
        int r;

        setenv("CUDA_CACHE_PATH", dir, 1);
        if (env != NULL)
            putenv((char *)env);
        t = cli_export_table(&cc_uuid);
        if (((cc_open_fn)t[1])(&h, kind, input, strlen(input), options, "HOST64") != 0 || !h)
            _exit(90);
        r = ((cc_lookup_fn)t[3])(h, 0, &data, &len);
        if (r == 0 && (want == NULL || len != strlen(want) || memcmp(data, want, len) != 0))
            _exit(91);
        if (r == 0)
            ((cc_release_fn)t[6])(data);
        if (r != 0 && store != NULL && ((cc_store_fn)t[4])(h, 0, store, strlen(store)) != 0)
            _exit(92);
        ((cc_close_fn)t[2])(h);
        _exit(r == 0 ? 0 : r == 500 ? 5 : 93);
    }
    assert_true(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 5 ? 500 : -WEXITSTATUS(st);
}

static int entries(void)
{
    DIR *d;
    struct dirent *e;
    char sub[300];
    int n = 0;

    snprintf(sub, sizeof(sub), "%s/rgpu", dir);
    if ((d = opendir(sub)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += strlen(e->d_name) == 64;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/rgpu-cc-test.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

static void test_miss_store_hit(void **state)
{
    (void)state;
    (void)table();
    assert_int_equal(lookup_in_child(NULL, 2, "bitcode-A", "-arch=compute_90", NULL, "ptx-A"), 500);
    assert_int_equal(entries(), 1);
    assert_int_equal(lookup_in_child(NULL, 2, "bitcode-A", "-arch=compute_90", "ptx-A", NULL), 0);
    /* Any other input, options or kind is another key. */
    assert_int_equal(lookup_in_child(NULL, 2, "bitcode-B", "-arch=compute_90", NULL, NULL), 500);
    assert_int_equal(lookup_in_child(NULL, 2, "bitcode-A", "-arch=compute_80", NULL, NULL), 500);
    assert_int_equal(lookup_in_child(NULL, 1, "bitcode-A", "-arch=compute_90", NULL, NULL), 500);
    assert_int_equal(entries(), 1);
}

static void test_damaged_entry_misses(void **state)
{
    char cmd[400];

    (void)state;
    assert_int_equal(lookup_in_child(NULL, 1, "ptx-C", "-arch=sm_90", NULL, "cubin-C"), 500);
    snprintf(cmd, sizeof(cmd), "for f in %s/rgpu/*; do truncate -s 20 $f; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(lookup_in_child(NULL, 1, "ptx-C", "-arch=sm_90", NULL, "cubin-C2"), 500);
    assert_int_equal(lookup_in_child(NULL, 1, "ptx-C", "-arch=sm_90", "cubin-C2", NULL), 0);
}

static void test_disabled(void **state)
{
    (void)state;
    assert_int_equal(
        lookup_in_child("CUDA_CACHE_DISABLE=1", 1, "ptx-D", "-arch=sm_90", NULL, "cubin-D"), 500);
    assert_int_equal(entries(), 0);
    assert_int_equal(lookup_in_child("CUDA_CACHE_DISABLE=1", 1, "ptx-D", "-arch=sm_90", NULL, NULL),
                     500);
}

static void test_budget(void **state)
{
    char big[2000], name[32];

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "ptx-%d", i);
        assert_int_equal(
            lookup_in_child("CUDA_CACHE_MAXSIZE=8000", 1, name, "-arch=sm_90", NULL, big), 500);
    }
    /* Each entry is ~2 KiB: never more than 8000 bytes' worth stay. */
    assert_in_range(entries(), 1, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_miss_store_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_entry_misses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
