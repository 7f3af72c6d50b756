/* Where a process spends its CPU, for hosts without perf (the GPU host has no perf, gdb or
 * py-spy). Preloaded (LD_PRELOAD=librgpu-stack-sampler.so) with RGPU_SAMPLE_OUT=FILE, it takes a
 * stack every RGPU_SAMPLE_US (default 1000) microseconds of the process's CPU time (a timer on
 * the process's CPU clock: whichever thread is running gets the signal) and, at exit, writes
 * FILE.<pid>:
 * samples per thread, per shared object (the innermost frame's: self; any frame: inclusive),
 * and the innermost and inclusive symbols (dladdr: exported names; a static function shows as
 * the exported one before it). The same for a native and an rgpu run of one program shows
 * where rgpu costs CPU that the native driver does not. A diagnostic for bench/, never
 * installed. */
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEPTH       48
#define SAMPLES_MAX 100000
#define HASH_SLOTS  (1u << 18)
#define TOP         40

struct sample {
    pid_t tid;
    int depth;
    int weight; /* periods it stands for: the kernel checks CPU timers at its tick */
    void *pc[DEPTH];
};

static struct sample *samples;
static atomic_uint nsamples;
static char out_path[4096];
static timer_t timer;
static pid_t owner; /* a child forked without exec inherits the samples, not the timer */

static void on_prof(int sig, siginfo_t *si, void *uc)
{
    unsigned i = atomic_fetch_add(&nsamples, 1);

    (void)sig, (void)si, (void)uc;
    if (i >= SAMPLES_MAX)
        return;
    samples[i].tid = gettid();
    samples[i].weight = 1 + timer_getoverrun(timer);
    samples[i].depth = backtrace(samples[i].pc, DEPTH);
}

struct count {
    char *key;
    unsigned n;
};

struct table { /* open addressing by key */
    struct count *c;
    size_t n;
};

static size_t hash_str(const char *k)
{
    size_t h = 1469598103934665603ull;

    while (*k != '\0')
        h = (h ^ (unsigned char)*k++) * 1099511628211ull;
    return h;
}

static void count_add(struct table *t, const char *key, unsigned w)
{
    size_t i;

    if (t->c == NULL && (t->c = calloc(HASH_SLOTS, sizeof(*t->c))) == NULL)
        abort();
    for (i = hash_str(key) % HASH_SLOTS; t->c[i].key != NULL; i = (i + 1) % HASH_SLOTS)
        if (strcmp(t->c[i].key, key) == 0) {
            t->c[i].n += w;
            return;
        }
    if (t->n + 1 >= HASH_SLOTS / 2)
        return; /* full enough: the rest go uncounted */
    t->c[i] = (struct count){strdup(key), w};
    t->n++;
}

static int by_count(const void *a, const void *b)
{
    return (int)((const struct count *)b)->n - (int)((const struct count *)a)->n;
}

static void table_print(FILE *f, const char *title, struct table *t, unsigned total)
{
    size_t n = 0;

    for (size_t i = 0; t->c != NULL && i < HASH_SLOTS; i++) /* packed, then sorted */
        if (t->c[i].key != NULL)
            t->c[n++] = t->c[i];
    t->n = n;
    qsort(t->c, t->n, sizeof(*t->c), by_count);
    fprintf(f, "\n== %s (of %u periods)\n", title, total);
    for (size_t i = 0; i < t->n && i < TOP; i++)
        fprintf(f, "%7u %5.1f%%  %s\n", t->c[i].n, 100.0 * t->c[i].n / total, t->c[i].key);
}

static const char *base_name(const char *path)
{
    const char *s = path != NULL ? strrchr(path, '/') : NULL;

    return s != NULL ? s + 1 : path != NULL ? path : "?";
}

/* "object" and "object!symbol" of a return address. */
static void where_uncached(void *pc, char *obj, size_t olen, char *sym, size_t slen)
{
    Dl_info info;

    if (dladdr((char *)pc - 1, &info) == 0) {
        snprintf(obj, olen, "?");
        snprintf(sym, slen, "?!%p", pc);
        return;
    }
    snprintf(obj, olen, "%s", base_name(info.dli_fname));
    snprintf(sym, slen, "%.100s!%.150s", obj, info.dli_sname != NULL ? info.dli_sname : "?");
}

/* The same, remembered by address (dladdr walks the loaded objects). */
static void where(void *pc, char *obj, size_t olen, char *sym, size_t slen)
{
    static struct {
        void *pc;
        char *obj, *sym;
    } * memo;
    size_t i = ((uintptr_t)pc >> 2) % HASH_SLOTS;

    if (memo == NULL && (memo = calloc(HASH_SLOTS, sizeof(*memo))) == NULL)
        abort();
    for (; memo[i].pc != NULL && memo[i].pc != pc; i = (i + 1) % HASH_SLOTS)
        ;
    if (memo[i].pc == pc) {
        snprintf(obj, olen, "%s", memo[i].obj);
        snprintf(sym, slen, "%s", memo[i].sym);
        return;
    }
    where_uncached(pc, obj, olen, sym, slen);
    memo[i].pc = pc;
    memo[i].obj = strdup(obj);
    memo[i].sym = strdup(sym);
}

/* Counts a key once per sample however often it recurs in the stack. */
static void count_once(struct table *t, char seen[][256], int *nseen, const char *key, unsigned w)
{
    for (int i = 0; i < *nseen; i++)
        if (strcmp(seen[i], key) == 0)
            return;
    snprintf(seen[(*nseen)++], 256, "%s", key);
    count_add(t, key, w);
}

static void report(void)
{
    struct itimerspec off = {{0, 0}, {0, 0}};
    struct table threads = {0}, self_obj = {0}, incl_obj = {0}, self_sym = {0}, incl_sym = {0};
    static char seen_obj[DEPTH][256], seen_sym[DEPTH][256];
    unsigned n = atomic_load(&nsamples), total = 0;
    FILE *f;

    if (getpid() != owner)
        return;
    timer_settime(timer, 0, &off, NULL);
    n = n < SAMPLES_MAX ? n : SAMPLES_MAX;
    if (n == 0 || (f = fopen(out_path, "w")) == NULL)
        return;
    for (unsigned i = 0; i < n; i++) {
        const struct sample *s = &samples[i];
        int nobj = 0, nsym = 0;
        unsigned w = s->weight > 0 ? (unsigned)s->weight : 1;
        char key[64], obj[256], sym[256];

        total += w;
        snprintf(key, sizeof(key), "tid %d", s->tid);
        count_add(&threads, key, w);
        /* frames 0-1 are this handler and the signal trampoline */
        for (int d = 2; d < s->depth; d++) {
            where(s->pc[d], obj, sizeof(obj), sym, sizeof(sym));
            if (d == 2) {
                count_add(&self_obj, obj, w);
                count_add(&self_sym, sym, w);
            }
            count_once(&incl_obj, seen_obj, &nobj, obj, w);
            count_once(&incl_sym, seen_sym, &nsym, sym, w);
        }
    }
    fprintf(f, "stack sampler: %u periods of %s us of CPU in %u samples\n", total,
            getenv("RGPU_SAMPLE_US") ? getenv("RGPU_SAMPLE_US") : "1000", n);
    table_print(f, "threads", &threads, total);
    table_print(f, "objects, innermost frame", &self_obj, total);
    table_print(f, "objects, anywhere in the stack", &incl_obj, total);
    table_print(f, "symbols, innermost frame", &self_sym, total);
    table_print(f, "symbols, anywhere in the stack", &incl_sym, total);
    fclose(f);
}

__attribute__((constructor)) static void sampler_start(void)
{
    const char *out = getenv("RGPU_SAMPLE_OUT"), *us = getenv("RGPU_SAMPLE_US");
    long period = us != NULL ? atol(us) : 1000;
    struct sigaction sa = {.sa_sigaction = on_prof, .sa_flags = SA_SIGINFO | SA_RESTART};
    struct sigevent sev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGPROF};
    struct itimerspec it = {{0, period * 1000}, {0, period * 1000}};
    void *prime[4];

    if (out == NULL || period <= 0 || period >= 1000000)
        return;
    owner = getpid();
    snprintf(out_path, sizeof(out_path), "%s.%d", out, owner);
    samples = calloc(SAMPLES_MAX, sizeof(*samples));
    if (samples == NULL)
        return;
    (void)backtrace(prime, 4); /* loads the unwinder now, not in the handler */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    atexit(report);
    /* A POSIX timer on the process's CPU clock: unlike setitimer's, it does not outlive an
     * execve (python3 may be a launcher that execs the interpreter). */
    if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &timer) == 0)
        timer_settime(timer, 0, &it, NULL);
}
