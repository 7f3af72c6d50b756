/* client/api/image_hash.c: a large image inside a library file is hashed once and its hash
 * remembered on disk for later processes; an image in anonymous memory is not remembered; a
 * library replaced on disk while mapped is not trusted to the memo; RGPU_IMAGE_HASH_MEMO=0
 * turns it off. Each case in a child process (the memo reads its settings once). */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/sha256.h"

void cli_image_hash(const void *image, size_t len, uint8_t out[32]);

#define LEN (2u << 20)
static char home[128], lib[256];

static int memo_files(void)
{
    char dir[300];
    DIR *d;
    struct dirent *e;
    int n = 0;

    snprintf(dir, sizeof(dir), "%s/rgpu/image-hashes", home);
    if ((d = opendir(dir)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* In a child: hash the library's image (or a heap copy); 0 when the result is the image's true
 * hash, 1 when it is not, 2 on a setup failure. */
static int hash_in_child(const char *env, bool heap, const char *after_map)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        void *h = dlopen(lib, RTLD_NOW);
        const unsigned char *img = h ? dlsym(h, "rgpu_test_image") : NULL;
        uint8_t want[32], got[32];

        if (after_map != NULL && system(after_map) != 0)
            _exit(2);
        setenv("XDG_CACHE_HOME", home, 1);
        if (env != NULL)
            putenv((char *)env);
        if (img == NULL)
            _exit(2);
        if (heap) {
            unsigned char *copy = malloc(LEN);
            memcpy(copy, img, LEN);
            img = copy;
        }
        rg_sha256(img, LEN, want);
        cli_image_hash(img, LEN, got);
        _exit(memcmp(want, got, 32) == 0 ? 0 : 1);
    }
    assert_true(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* Every memo file gets 32 wrong bytes: a later hash that is right did not come from the memo. */
static void spoil_memos(void)
{
    char cmd[400];

    snprintf(cmd, sizeof(cmd), "for f in %s/rgpu/image-hashes/*; do head -c 32 /dev/zero >$f; done",
             home);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    char cmd[600];

    (void)state;
    snprintf(home, sizeof(home), "/tmp/rgpu-imghash.XXXXXX");
    assert_non_null(mkdtemp(home));
    snprintf(lib, sizeof(lib), "%s/libimage.so", home);
    snprintf(cmd, sizeof(cmd), "cp %s %s", RGPU_IMAGE_LIB, lib);
    return system(cmd);
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
    return system(cmd);
}

static void test_library_image_remembered(void **state)
{
    (void)state;
    assert_int_equal(hash_in_child(NULL, false, NULL), 0);
    assert_int_equal(memo_files(), 1);
    spoil_memos();
    assert_int_equal(hash_in_child(NULL, false, NULL),
                     1); /* the memo's (spoiled) answer was used */
}

static void test_heap_image_not_remembered(void **state)
{
    (void)state;
    assert_int_equal(hash_in_child(NULL, true, NULL), 0);
    assert_int_equal(memo_files(), 0);
}

static void test_off(void **state)
{
    (void)state;
    assert_int_equal(hash_in_child("RGPU_IMAGE_HASH_MEMO=0", false, NULL), 0);
    assert_int_equal(memo_files(), 0);
}

/* A library replaced on disk (renamed over, other bytes) after the process mapped it: its path
 * names another file than the mapping, so nothing is remembered for it; else the old bytes'
 * hash would be filed under the new file's key and a later process would load the old image. */
static void test_replaced_library(void **state)
{
    char cmd[1200];

    (void)state;
    snprintf(cmd, sizeof(cmd),
             "python3 -c \"import sys; b = open(sys.argv[1], 'rb').read(); "
             "i = b.index(bytes([0x7f, 69, 76, 70, 1, 2, 3, 4])); "
             "open(sys.argv[1] + '.new', 'wb').write(b[:i + 4] + bytes([9]) + b[i + 5:])\" %s && "
             "mv %s.new %s",
             lib, lib, lib);
    assert_int_equal(hash_in_child(NULL, false, cmd), 0);
    assert_int_equal(memo_files(), 0);
    assert_int_equal(hash_in_child(NULL, false, NULL), 0); /* the new file's own hash */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_library_image_remembered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heap_image_not_remembered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_library, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
