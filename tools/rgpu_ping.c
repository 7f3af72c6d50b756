/* rgpu ping: per server, round-trip percentiles of small Echo frames on an authenticated probe
 * connection (light: --count of 64 bytes each way, 10 by default). With --bandwidth also the
 * raw TCP ceiling (bulk Echo frames the server reads and drops: what the network and the
 * server's socket can take) and the copy bandwidth a job gets (pinned cuMemcpyHtoD / DtoH
 * through rgpu's own libcuda.so.1, in a child process with a session on that server alone):
 * 128 MiB per stream plus 4 x 64 MiB each way per server, so only when asked. The copy figure
 * next to the ceiling shows what rgpu's path costs. */
#include <dlfcn.h>
#include <pthread.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu.h"

#define SMALL       64         /* bytes of each round-trip Echo */
#define SINK_FRAME  (4u << 20) /* bytes of each ceiling Echo */
#define SINK_FRAMES 32         /* 128 MiB per stream */
#define COPY_BYTES  (64u << 20)
#define COPY_REPS   4

struct ping_result {
    bool ok;
    bool bandwidth; /* ceiling and copies measured (or tried: copy_why) */
    char why[256];
    char server_name[64];
    double p50, p90, p99, min; /* round trip, microseconds */
    double ceiling;            /* GiB/s */
    int streams;               /* TCP connections it used */
    double htod, dtoh;         /* GiB/s; < 0: no figure */
    char copy_why[200];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static rg_status_t echo_once(struct transport_conn *conn, const void *data, size_t len,
                             unsigned flags, void *back)
{
    struct proto_frame_hdr hdr;
    uint8_t msg[64];
    rg_status_t st = proto_send_flags(conn, PROTO_ECHO, flags, NULL, data, len);

    if (st == RG_OK)
        st = proto_recv(conn, &hdr, msg, sizeof(msg));
    if (st == RG_OK && (hdr.type != PROTO_ECHO || hdr.bulk_len > len))
        return RG_ERR_PROTO;
    if (st == RG_OK && hdr.bulk_len > 0)
        st = transport_recv(conn, back, hdr.bulk_len);
    return st;
}

static rg_status_t round_trips(struct transport_conn *conn, int count, struct ping_result *r)
{
    double *us = calloc((size_t)count, sizeof(*us));
    uint8_t data[SMALL] = {0}, back[SMALL];
    rg_status_t st = us ? RG_OK : RG_ERR_NOMEM;

    for (int i = 0; i < count && st == RG_OK; i++) {
        double t0 = now_s();
        st = echo_once(conn, data, sizeof(data), 0, back);
        us[i] = (now_s() - t0) * 1e6;
    }
    if (st == RG_OK) {
        qsort(us, (size_t)count, sizeof(*us), cmp_double);
        r->min = us[0];
        r->p50 = us[(count - 1) * 50 / 100];
        r->p90 = us[(count - 1) * 90 / 100];
        r->p99 = us[(count - 1) * 99 / 100];
    }
    free(us);
    return st;
}

/* One stream of the ceiling: bulk frames sent back to back, then their short answers. */
struct sink_job {
    const char *addr;
    const struct cli_conf *conf;
    pthread_barrier_t *go;
    rg_status_t st;
    double seconds;
};

static void *sink_stream(void *arg)
{
    struct sink_job *job = arg;
    struct transport_conn *conn = NULL;
    Rgpu__ProbeReply *reply = NULL;
    struct proto_frame_hdr hdr;
    uint8_t *buf = calloc(1, SINK_FRAME), msg[64];
    char why[256];
    double t0;

    job->st = buf ? cli_probe_open(job->addr, job->conf, job->conf->probe_timeout_ms, &conn, &reply,
                                   why, sizeof(why))
                  : RG_ERR_NOMEM;
    if (reply != NULL)
        rgpu__probe_reply__free_unpacked(reply, NULL);
    pthread_barrier_wait(job->go);
    t0 = now_s();
    for (int i = 0; i < SINK_FRAMES && job->st == RG_OK; i++)
        job->st = proto_send_flags(conn, PROTO_ECHO, PROTO_ECHO_SINK, NULL, buf, SINK_FRAME);
    for (int i = 0; i < SINK_FRAMES && job->st == RG_OK; i++)
        job->st = proto_recv(conn, &hdr, msg, sizeof(msg));
    job->seconds = now_s() - t0;
    if (conn != NULL)
        transport_close(conn);
    free(buf);
    return NULL;
}

/* The raw TCP ceiling: as many parallel streams as a session's copies use (its data lanes),
 * each streaming SINK_FRAMES frames that the server reads and drops; all bytes over the time
 * of the slowest stream. */
static rg_status_t ceiling(const char *addr, const struct cli_conf *conf, int streams,
                           struct ping_result *r)
{
    pthread_t threads[streams];
    struct sink_job jobs[streams];
    pthread_barrier_t go;
    double slowest = 0;
    rg_status_t st = RG_OK;

    pthread_barrier_init(&go, NULL, (unsigned)streams);
    for (int i = 0; i < streams; i++) {
        jobs[i] = (struct sink_job){.addr = addr, .conf = conf, .go = &go};
        if (i > 0 && pthread_create(&threads[i], NULL, sink_stream, &jobs[i]) != 0) {
            fprintf(stderr, "rgpu: cannot start a thread\n");
            exit(1);
        }
    }
    sink_stream(&jobs[0]);
    for (int i = 1; i < streams; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < streams; i++) {
        if (jobs[i].st != RG_OK)
            st = jobs[i].st;
        if (jobs[i].seconds > slowest)
            slowest = jobs[i].seconds;
    }
    if (st == RG_OK)
        r->ceiling = (double)SINK_FRAME * SINK_FRAMES * streams / slowest / (1u << 30);
    r->streams = streams;
    return st;
}

/* The driver API entry points the copy measurement uses (CUresult, CUdevice and CUdeviceptr as
 * the integers they are, so that the tool needs no cuda.h). */
struct cu_api {
    int (*init)(unsigned);
    int (*device_get)(int *, int);
    int (*ctx_retain)(void **, int);
    int (*ctx_set)(void *);
    int (*mem_alloc)(unsigned long long *, size_t);
    int (*host_alloc)(void **, size_t);
    int (*htod)(unsigned long long, const void *, size_t);
    int (*dtoh)(void *, unsigned long long, size_t);
};

static bool cu_load(void *lib, struct cu_api *cu)
{
    bool ok = true;

    /* POSIX's way of storing dlsym's answer in a function pointer */
#define CU_LOAD(slot, name) ok = ok && (*(void **)&cu->slot = dlsym(lib, name)) != NULL
    CU_LOAD(init, "cuInit");
    CU_LOAD(device_get, "cuDeviceGet");
    CU_LOAD(ctx_retain, "cuDevicePrimaryCtxRetain");
    CU_LOAD(ctx_set, "cuCtxSetCurrent");
    CU_LOAD(mem_alloc, "cuMemAlloc_v2");
    CU_LOAD(host_alloc, "cuMemAllocHost_v2");
    CU_LOAD(htod, "cuMemcpyHtoD_v2");
    CU_LOAD(dtoh, "cuMemcpyDtoH_v2");
#undef CU_LOAD
    return ok;
}

static int failed(const char **step_p, const char *step, int rc)
{
    *step_p = step;
    return rc;
}

/* A session, 64 MiB each side, then the copies; 0 or the failing call's result (*step_p). */
static int copy_measure(const struct cu_api *cu, double best[2], const char **step_p)
{
    unsigned long long dev_ptr = 0;
    void *ctx = NULL, *host = NULL;
    int dev = 0, rc;

    if ((rc = cu->init(0)) != 0 || (rc = cu->device_get(&dev, 0)) != 0)
        return failed(step_p, "cuInit", rc);
    if ((rc = cu->ctx_retain(&ctx, dev)) != 0 || (rc = cu->ctx_set(ctx)) != 0)
        return failed(step_p, "a context", rc);
    if ((rc = cu->mem_alloc(&dev_ptr, COPY_BYTES)) != 0 ||
        (rc = cu->host_alloc(&host, COPY_BYTES)) != 0)
        return failed(step_p, "allocating", rc);
    memset(host, 1, COPY_BYTES);
    for (int i = 0; i < 2 * COPY_REPS; i++) {
        double t0 = now_s(), gibs;
        rc = i % 2 ? cu->dtoh(host, dev_ptr, COPY_BYTES) : cu->htod(dev_ptr, host, COPY_BYTES);
        if (rc != 0)
            return failed(step_p, i % 2 ? "cuMemcpyDtoH" : "cuMemcpyHtoD", rc);
        gibs = COPY_BYTES / (now_s() - t0) / (1u << 30);
        if (gibs > best[i % 2])
            best[i % 2] = gibs;
    }
    return 0;
}

/* In the child: a session on RGPU_SERVER through libcuda.so.1 in libdir; the best of
 * COPY_REPS pinned copies each way, written as "htod dtoh" (GiB/s) or "- why" to fd. */
static void copy_child(const char *libdir, int fd)
{
    char path[PATH_MAX + 16], line[256];
    double best[2] = {0, 0};
    const char *step = "";
    struct cu_api cu;
    void *lib;
    int rc;

    snprintf(path, sizeof(path), "%s/libcuda.so.1", libdir);
    if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
        snprintf(line, sizeof(line), "- %.200s", dlerror());
    else if (!cu_load(lib, &cu))
        snprintf(line, sizeof(line), "- %.200s lacks a driver entry point", path);
    else if ((rc = copy_measure(&cu, best, &step)) != 0)
        snprintf(line, sizeof(line), "- %s failed (CUresult %d)", step, rc);
    else
        snprintf(line, sizeof(line), "%.3f %.3f", best[0], best[1]);
    if (write(fd, line, strlen(line)) < 0)
        _exit(1);
    _exit(0);
}

static void copy_bandwidth(const char *addr, struct ping_result *r)
{
    char libdir[PATH_MAX], line[256] = "";
    int fds[2];
    ssize_t n;
    pid_t pid;

    r->htod = r->dtoh = -1;
    if (rgpu_find_libdir(libdir, sizeof(libdir)) != 0 || pipe(fds) != 0) {
        snprintf(r->copy_why, sizeof(r->copy_why), "cannot locate libcuda.so.1");
        return;
    }
    fflush(NULL);
    if ((pid = fork()) == 0) {
        close(fds[0]);
        setenv("RGPU_SERVER", addr, 1);
        copy_child(libdir, fds[1]);
    }
    close(fds[1]);
    n = pid > 0 ? read(fds[0], line, sizeof(line) - 1) : -1;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    line[n > 0 ? n : 0] = '\0';
    if (n > 0 && line[0] != '-' && sscanf(line, "%lf %lf", &r->htod, &r->dtoh) == 2)
        return;
    r->htod = r->dtoh = -1;
    snprintf(r->copy_why, sizeof(r->copy_why), "%.190s", n > 0 ? line + 2 : "the session failed");
}

static int ceiling_streams(const struct cli_conf *conf)
{
    return conf->lanes > 0 ? (conf->lanes < 16 ? conf->lanes : 16) : 1;
}

static void ping_one(const struct cli_server *s, const struct cli_conf *conf,
                     const struct rgpu_opts *opts, struct ping_result *r)
{
    struct transport_conn *conn;
    Rgpu__ProbeReply *reply;
    rg_status_t st;

    memset(r, 0, sizeof(*r));
    if (s->addr[0] == '\0') {
        snprintf(r->why, sizeof(r->why), "%s", s->why);
        return;
    }
    st = cli_probe_open(s->addr, conf, conf->probe_timeout_ms, &conn, &reply, r->why,
                        sizeof(r->why));
    if (st != RG_OK)
        return;
    snprintf(r->server_name, sizeof(r->server_name), "%s",
             reply->server_name ? reply->server_name : "");
    rgpu__probe_reply__free_unpacked(reply, NULL);
    st = round_trips(conn, (int)opts->count, r);
    transport_close(conn);
    if (st == RG_OK && opts->bandwidth)
        st = ceiling(s->addr, conf, ceiling_streams(conf), r);
    if (st != RG_OK) {
        snprintf(r->why, sizeof(r->why), "echo failed: %s", rg_status_str(st));
        return;
    }
    r->ok = true;
    r->bandwidth = opts->bandwidth;
    if (opts->bandwidth)
        copy_bandwidth(s->addr, r);
}

static void print_table(const struct rgpu_opts *opts, const struct cli_pool *pool,
                        const struct ping_result *res, int streams)
{
    enum {
        P_SERVER,
        P_MIN,
        P_P50,
        P_P90,
        P_P99,
        P_HTOD,
        P_DTOH,
        P_TCP,
        P_NAME,
        P_STREAMS,
        P_COPY_ERROR,
        P_N
    };
    static const char *const heads[P_N] = {"SERVER",      "MIN",     "P50",       "P90",
                                           "P99",         "HTOD",    "DTOH",      "TCP-MAX",
                                           "SERVER-NAME", "STREAMS", "COPY-ERROR"};
    static const bool right[P_N] = {false, true, true,  true, true, true,
                                    true,  true, false, true, false};
    bool wide = opts->output == RGPU_OUT_WIDE;
    int cols[P_N], ncols = 0;
    const char *head[P_N], *cells[P_N];
    bool rt[P_N];
    char f[P_N][96];
    struct rgpu_table t;

    for (int c = 0; c < P_N; c++) /* the columns shown: bandwidth ones only if measured */
        if ((c <= P_P99 || (c <= P_TCP && opts->bandwidth) || (c == P_NAME && wide) ||
             (c > P_NAME && wide && opts->bandwidth))) {
            head[ncols] = heads[c];
            rt[ncols] = right[c];
            cols[ncols++] = c;
        }
    rgpu_table_init(&t, ncols, head, rt);
    for (int i = 0; i < pool->n; i++) {
        const struct cli_server *s = &pool->servers[i];
        const struct ping_result *r = &res[i];
        if (!r->ok) {
            const char *name = s->addr[0] ? s->addr : s->name;
            rgpu_table_row(&t, &name, r->why);
            continue;
        }
        snprintf(f[P_SERVER], sizeof(f[0]), "%s", s->addr);
        snprintf(f[P_MIN], sizeof(f[0]), "%.0fus", r->min);
        snprintf(f[P_P50], sizeof(f[0]), "%.0fus", r->p50);
        snprintf(f[P_P90], sizeof(f[0]), "%.0fus", r->p90);
        snprintf(f[P_P99], sizeof(f[0]), "%.0fus", r->p99);
        snprintf(f[P_HTOD], sizeof(f[0]), r->htod < 0 ? "-" : "%.2fGiB/s", r->htod);
        snprintf(f[P_DTOH], sizeof(f[0]), r->dtoh < 0 ? "-" : "%.2fGiB/s", r->dtoh);
        snprintf(f[P_TCP], sizeof(f[0]), "%.2fGiB/s", r->ceiling);
        snprintf(f[P_NAME], sizeof(f[0]), "%s", r->server_name);
        snprintf(f[P_STREAMS], sizeof(f[0]), "%d", r->streams);
        snprintf(f[P_COPY_ERROR], sizeof(f[0]), "%.60s", r->htod < 0 ? r->copy_why : "");
        for (int k = 0; k < ncols; k++)
            cells[k] = f[cols[k]];
        rgpu_table_row(&t, cells, NULL);
        if (opts->bandwidth && r->htod < 0 && !wide && !opts->no_headers) {
            char note[256];
            const char *blank = "";
            snprintf(note, sizeof(note), "(no copy figure: %s)", r->copy_why);
            rgpu_table_row(&t, &blank, note);
        }
    }
    rgpu_table_print(&t, stdout, !opts->no_headers);
    rgpu_table_free(&t);
    if (opts->no_headers)
        return;
    printf("round trips: %ld echoes of %d bytes each", opts->count, SMALL);
    if (opts->bandwidth)
        printf("; HTOD/DTOH: best of %d pinned %u MiB copies through rgpu;\nTCP-MAX: %u MiB per "
               "stream streamed to the server and dropped, over as many streams as a session's "
               "data lanes (%d)\n",
               COPY_REPS, COPY_BYTES >> 20, (SINK_FRAME * SINK_FRAMES) >> 20, streams);
    else
        printf(" (--bandwidth: copies and the TCP ceiling too)\n");
}

/* docs/status-schema.md */
static void print_json(const struct rgpu_opts *opts, const struct cli_pool *pool,
                       const struct ping_result *res)
{
    const double gib = 1073741824.0;

    rgpu_json_begin(stdout, "ping");
    printf(",\"round_trips\":%ld,\"echo_bytes\":%d,\"servers\":[", opts->count, SMALL);
    for (int i = 0; i < pool->n; i++) {
        const struct ping_result *r = &res[i];
        printf("%s{\"entry\":", i ? "," : "");
        rgpu_json_str(stdout, pool->servers[i].name);
        printf(",\"address\":");
        rgpu_json_str(stdout, pool->servers[i].addr);
        printf(",\"answered\":%s", r->ok ? "true" : "false");
        if (!r->ok) {
            printf(",\"error\":");
            rgpu_json_str(stdout, r->why);
            printf("}");
            continue;
        }
        printf(",\"server_name\":");
        rgpu_json_str(stdout, r->server_name);
        printf(",\"rtt_us\":{\"min\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f},\"bandwidth\":",
               r->min, r->p50, r->p90, r->p99);
        if (!r->bandwidth) {
            printf("null}");
            continue;
        }
        printf("{\"tcp_ceiling_bytes_per_second\":%.0f,\"tcp_streams\":%d,"
               "\"htod_bytes_per_second\":",
               r->ceiling * gib, r->streams);
        printf(r->htod < 0 ? "null" : "%.0f", r->htod * gib);
        printf(",\"dtoh_bytes_per_second\":");
        printf(r->dtoh < 0 ? "null" : "%.0f", r->dtoh * gib);
        printf(",\"copy_error\":");
        rgpu_json_str(stdout, r->htod < 0 ? r->copy_why : "");
        printf("}}");
    }
    printf("]}\n");
}

int rgpu_cmd_ping(int argc, char **argv)
{
    struct rgpu_opts opts;
    struct cli_conf conf;
    struct cli_pool pool;
    struct ping_result *res;
    int first, rc = rgpu_parse_opts(RGPU_PING, argc, argv, &opts, &conf, &first), answered = 0;

    if (rc >= 0)
        return rc;
    if (cli_pool_resolve(&conf, &pool) != RG_OK ||
        (res = calloc((size_t)(pool.n > 0 ? pool.n : 1), sizeof(*res))) == NULL)
        return 1;
    for (int i = 0; i < pool.n; i++) {
        ping_one(&pool.servers[i], &conf, &opts, &res[i]);
        answered += res[i].ok;
    }
    if (opts.output == RGPU_OUT_JSON)
        print_json(&opts, &pool, res);
    else
        print_table(&opts, &pool, res, ceiling_streams(&conf));
    free(res);
    cli_pool_free(&pool);
    return answered > 0 ? 0 : 1;
}
