/* Logging to the journal: when stderr is the stream named by $JOURNAL_STREAM each line starts
 * with its syslog priority (<3> error, <4> warn, <6> info, <7> debug); anywhere else (another
 * stream named, no variable, a malformed one) lines stay plain. */
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

#include "common/log.h"

/* Log one line of each level with stderr on a temporary file and JOURNAL_STREAM set to
 * journal (NULL: unset; "self": the file's own dev:ino); the file's text into out. */
static void log_lines(const char *journal, char *out, size_t len)
{
    char tmpl[] = "/tmp/rgpu-log-XXXXXX", stream[64];
    int fd = mkstemp(tmpl), saved = dup(STDERR_FILENO);
    struct stat st;
    ssize_t n;

    assert_true(fd >= 0 && saved >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    snprintf(stream, sizeof(stream), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    if (journal == NULL)
        unsetenv("JOURNAL_STREAM");
    else
        setenv("JOURNAL_STREAM", strcmp(journal, "self") == 0 ? stream : journal, 1);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    rg_log_set_level(RG_LOG_DEBUG);
    rg_error("e %d", 1);
    rg_warn("w");
    rg_info("i");
    rg_debug("d");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, out, len - 1, 0);
    assert_true(n > 0);
    out[n] = '\0';
    close(fd);
    unlink(tmpl);
    unsetenv("JOURNAL_STREAM");
}

static void test_priorities_on_journal(void **state)
{
    char text[4096], *line = text;
    const char *want[] = {"<3>", "<4>", "<6>", "<7>"};

    log_lines("self", text, sizeof(text));
    for (int i = 0; i < 4; i++) {
        assert_non_null(line);
        assert_memory_equal(line, want[i], 3);
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    assert_non_null(strstr(text, "error: e 1\n"));
}

static void test_plain_elsewhere(void **state)
{
    char text[4096];
    const char *cases[] = {NULL, "1:1", "junk"};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        log_lines(cases[i], text, sizeof(text));
        assert_null(strchr(text, '<'));
        assert_non_null(strstr(text, "error: e 1\n"));
        assert_non_null(strstr(text, "debug: d\n"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priorities_on_journal),
        cmocka_unit_test(test_plain_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
