#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int rg_log_level_current = RG_LOG_INFO;
static rg_log_cb log_cb;
static char log_prefix[128] = "rgpu";
static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
/* syslog priorities of the levels (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG) */
static const char *const journal_prio[] = {"<3>", "<4>", "<6>", "<7>", "<7>"};

/* Is stderr the journal's stream? systemd names it in $JOURNAL_STREAM as "DEVICE:INODE"; a
 * stderr redirected elsewhere since (a child's 2>file) is not, so it keeps plain lines. */
static int stderr_is_journal(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    return v != NULL && sscanf(v, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
           (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void rg_log_set_level(enum rg_log_level level)
{
    rg_log_level_current = (int)level;
}

void rg_log_set_level_str(const char *name)
{
    if (name == NULL)
        return;
    for (int i = 0; i <= RG_LOG_TRACE; i++)
        if (strcmp(name, level_names[i]) == 0)
            rg_log_level_current = i;
}

void rg_log_set_prefix(const char *prefix)
{
    snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

void rg_log_set_callback(rg_log_cb cb)
{
    log_cb = cb;
}

void rg_log_write(enum rg_log_level level, const char *fmt, ...)
{
    int saved_errno = errno;
    char line[1024];
    char stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    int n = snprintf(line, sizeof(line), "%s.%03ldZ %s %s: ", stamp, ts.tv_nsec / 1000000,
                     log_prefix, level_names[level]);
    va_start(ap, fmt);
    errno = saved_errno; /* keep %m meaningful */
    if (n >= 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (log_cb != NULL)
        log_cb(level, line);
    else
        fprintf(stderr, "%s%s\n", stderr_is_journal() ? journal_prio[level] : "", line);
    errno = saved_errno;
}

const char *rg_log_escape(char *dst, size_t len, const char *src)
{
    size_t o = 0;

    if (len == 0)
        return dst;
    for (; src != NULL && *src != '\0'; src++) {
        unsigned char ch = (unsigned char)*src;
        char esc[5];
        size_t n = 1;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", ch);
        else
            esc[0] = (char)ch;
        if (o + n >= len) { /* cut: end in "..." within len */
            size_t room = len - 1, keep = room >= 3 ? room - 3 : 0;
            o = o < keep ? o : keep;
            n = room - o < 3 ? room - o : 3;
            memcpy(dst + o, "...", n);
            o += n;
            break;
        }
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o] = '\0';
    return dst;
}
