/* RGPU_BACKTRACE=1: print a backtrace when the process crashes (a debugging aid for finding
 * which driver call a library was in when it fell over). */
#include <execinfo.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "client/api/api.h"

static void crash_handler(int sig)
{
    void *frames[64];
    int n = backtrace(frames, 64);

    (void)!write(2, "rgpu: crash; backtrace:\n", 24);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void debug_init(void)
{
    const char *env = getenv("RGPU_BACKTRACE");

    if (env != NULL && env[0] == '1') {
        signal(SIGSEGV, crash_handler);
        signal(SIGBUS, crash_handler);
        signal(SIGABRT, crash_handler);
    }
}
