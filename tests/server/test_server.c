/* gpu-server end to end: the built binary (supervisor + one exec'd worker per session) on the
 * fake driver, spoken to directly with the wire protocol over TCP. Checks the handshake
 * snapshot, the version refusal, copies inline and as 32 MiB bulk, a module's kernel launched
 * (plain and with attributes) between events, bulk copies across context destruction and
 * reset, asynchronous errors, bad handles and ops, malformed and oversized frames that end
 * only their own session while another session keeps working, a client vanishing
 * mid-session, a port probe, the config file, and the refusal to start without a driver.
 * The supervisor's log is read back from a file (RGPU_TEST_KEEP_LOG=1 keeps it). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "proto/frame.h"
#include "proto/ops.h"
#include "tests/wire/wire_client.h"

#define BIG     (32u << 20)
#define WAIT_MS 10000

struct server {
    pid_t pid;
    char dir[64];
    char log[160];
    char addr[64];
};

struct client {
    struct transport_conn *conn;
    uint64_t session;
    char local[64]; /* our host:port, as the supervisor names the peer */
    uint64_t next_id;
    uint64_t ctx; /* Call.ctx of the calls we send */
    uint8_t buf[1 << 16];
};

static struct server srv;

/* ---- the server process and its log -------------------------------------------------- */

static char *read_log(void)
{
    static char text[1 << 20];
    int fd = open(srv.log, O_RDONLY);
    ssize_t n = fd < 0 ? 0 : read(fd, text, sizeof(text) - 1);

    if (fd >= 0)
        close(fd);
    text[n > 0 ? n : 0] = '\0';
    return text;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The log line containing needle (copied into line), waiting up to WAIT_MS for it. */
static bool wait_log(const char *needle, char *line, size_t len)
{
    for (int waited = 0; waited < WAIT_MS; waited += 20, sleep_ms(20)) {
        const char *text = read_log(), *hit = strstr(text, needle), *start, *end;
        if (hit == NULL)
            continue;
        for (start = hit; start > text && start[-1] != '\n'; start--)
            ;
        end = strchr(hit, '\n');
        if (end == NULL)
            continue; /* the line is still being written */
        if (line != NULL)
            snprintf(line, len, "%.*s", (int)(end - start), start);
        return true;
    }
    print_error("log line '%s' not found in:\n%s\n", needle, read_log());
    return false;
}

static void write_config(const char *path)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fprintf(f, "# test config\n[server]\nname = from-config\nport = 1\nlisten = 10.255.255.1\n"
               "log_level = info\n");
    fclose(f);
}

static pid_t spawn(const char *log, char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(GPU_SERVER_PATH, argv);
        _exit(127);
    }
    return pid;
}

/* The config file says port 1 and an unreachable address: the flags must override both. */
static int start_server(void **state)
{
    char conf[128], line[256];
    char *argv[] = {GPU_SERVER_PATH, "--config", conf,       "--listen",    "127.0.0.1",
                    "--port",        "0",        "--driver", FAKECUDA_PATH, NULL};
    const char *at;

    snprintf(srv.dir, sizeof(srv.dir), "/tmp/rgpu-test-server.XXXXXX");
    if (mkdtemp(srv.dir) == NULL)
        return -1;
    snprintf(conf, sizeof(conf), "%s/server.conf", srv.dir);
    snprintf(srv.log, sizeof(srv.log), "%s/server.log", srv.dir);
    write_config(conf);
    srv.pid = spawn(srv.log, argv);
    if (srv.pid < 0 || !wait_log("listening on ", line, sizeof(line)))
        return -1;
    at = strstr(line, "listening on ") + strlen("listening on ");
    snprintf(srv.addr, sizeof(srv.addr), "%s", at);
    return 0;
}

/* SIGTERM: the supervisor stops accepting, ends its workers and exits 0. */
static int stop_server(void **state)
{
    int status = -1;
    char path[160];

    kill(srv.pid, SIGTERM);
    waitpid(srv.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        print_error("gpu-server exited with status 0x%x; log:\n%s\n", status, read_log());
        return -1;
    }
    if (getenv("RGPU_TEST_KEEP_LOG") == NULL) {
        unlink(srv.log);
        snprintf(path, sizeof(path), "%s/server.conf", srv.dir);
        unlink(path);
        rmdir(srv.dir);
    }
    return 0;
}

/* ---- protocol helpers ---------------------------------------------------------------- */

static void local_name(int fd, char *buf, size_t len)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    char host[INET_ADDRSTRLEN] = "?";

    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    inet_ntop(AF_INET, &sin.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%d", host, ntohs(sin.sin_port));
}

static Rgpu__Welcome *connect_hello(struct client *c, uint32_t version)
{
    Rgpu__Hello h = RGPU__HELLO__INIT;
    Rgpu__Welcome *w;

    memset(c, 0, sizeof(*c));
    c->next_id = 1;
    c->ctx = PROTO_PRIMARY_CTX_ID(0);
    assert_int_equal(transport_tcp_ops.connect(srv.addr, NULL, &c->conn), RG_OK);
    local_name(transport_fd(c->conn), c->local, sizeof(c->local));
    h.proto_version = version;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.client_name = "test_server";
    w = wire_hello(c->conn, &h, c->buf, sizeof(c->buf));
    c->session = w->session_id;
    return w;
}

static void start_session(struct client *c)
{
    Rgpu__Welcome *w = connect_hello(c, PROTO_VERSION);

    assert_int_equal(w->status, 0);
    rgpu__welcome__free_unpacked(w, NULL);
}

/* One Call: its op and arguments (WIRE_OP), frame flags, inline data and bulk. */
static void send_call(struct client *c, unsigned op, const uint64_t *args, size_t nargs,
                      unsigned flags, const void *data, size_t len, const void *bulk,
                      size_t bulk_len)
{
    wire_call(c->conn, c->next_id++, c->ctx, op, args, nargs, flags, data, len, bulk, bulk_len);
}

/* The next frame must be a Reply; its bulk (if any) lands in bulk. */
static Rgpu__Reply *get_reply(struct client *c, void *bulk, size_t cap)
{
    Rgpu__Reply *r = wire_reply(c->conn, c->buf, sizeof(c->buf), bulk, cap);

    assert_int_equal(r->id, c->next_id - 1);
    return r;
}

/* A synchronous call; returns its result and copies up to 4 outputs. */
static int call_sync(struct client *c, unsigned op, const uint64_t *args, size_t nargs,
                     uint64_t *out)
{
    Rgpu__Reply *r;
    int res;

    send_call(c, op, args, nargs, 0, NULL, 0, NULL, 0);
    r = get_reply(c, NULL, 0);
    res = r->result;
    for (size_t i = 0; out != NULL && i < r->n_out && i < 4; i++)
        out[i] = r->out[i];
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

static uint64_t mem_alloc(struct client *c, uint64_t size)
{
    uint64_t out[4] = {0};

    assert_int_equal(call_sync(c, WIRE_OP(MEM_ALLOC, .size = size), out), CUDA_SUCCESS);
    assert_int_not_equal(out[0], 0);
    return out[0];
}

static void bye(struct client *c)
{
    assert_int_equal(proto_send(c->conn, PROTO_BYE, NULL, NULL, 0), RG_OK);
    transport_close(c->conn);
}

/* The supervisor's line for the end of c's session; it must contain want. */
static void expect_ended(const struct client *c, const char *want)
{
    char needle[160], line[512];

    snprintf(needle, sizeof(needle),
             "session %llu (peer %s) ended: ", (unsigned long long)c->session, c->local);
    assert_true(wait_log(needle, line, sizeof(line)));
    if (strstr(line, want) == NULL)
        fail_msg("expected '%s' in: %s", want, line);
}

/* The server closes its end: our next receive sees the close. */
static void expect_closed(struct client *c)
{
    struct proto_frame_hdr hdr;

    assert_int_not_equal(proto_recv(c->conn, &hdr, c->buf, sizeof(c->buf)), RG_OK);
}

/* The server closed a connection that carries no frames: a receive ends. */
static void expect_closed_conn(struct transport_conn *conn)
{
    uint8_t byte;

    assert_int_not_equal(transport_recv(conn, &byte, 1), RG_OK);
    transport_close(conn);
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_handshake(void **state)
{
    struct client c;
    Rgpu__Welcome *w = connect_hello(&c, PROTO_VERSION);

    assert_int_equal(w->status, 0);
    assert_int_equal(w->proto_version, PROTO_VERSION);
    assert_string_equal(w->server_name, "from-config");
    assert_true(w->session_id > 0);
    assert_int_equal(w->n_devices, 1);
    assert_string_equal(w->devices[0]->name, "rgpu fake device");
    assert_int_equal(w->devices[0]->n_attrs, CU_DEVICE_ATTRIBUTE_MAX);
    assert_int_equal(w->devices[0]->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR], 9);
    assert_int_equal(w->devices[0]->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], 132);
    assert_int_equal(w->devices[0]->uuid.len, 16);
    assert_true(w->devices[0]->total_mem > 0);
    assert_int_equal(w->devices[0]->ordinal, 0);
    rgpu__welcome__free_unpacked(w, NULL);
    bye(&c);
    expect_ended(&c, "worker exited with status 0");
}

static void test_version_mismatch(void **state)
{
    struct client c;
    Rgpu__Welcome *w = connect_hello(&c, 7);

    assert_int_not_equal(w->status, 0);
    assert_non_null(strstr(w->reason, "client speaks 7"));
    assert_non_null(strstr(w->reason, "server speaks 1"));
    /* the supervisor refuses it before any fork, by the worker's rule (proto_version_accept) */
    assert_non_null(strstr(w->reason, "a server serves its own major only"));
    assert_int_equal(w->proto_minor, PROTO_VERSION_MINOR);
    rgpu__welcome__free_unpacked(w, NULL);
    expect_closed(&c);
    transport_close(c.conn);
}

static void fill(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 29 + (i >> 12));
}

static void test_copies(void **state)
{
    struct client c;
    static uint8_t src[BIG], dst[BIG];
    uint64_t d;
    Rgpu__Reply *r;

    fill(src, BIG);
    start_session(&c);
    d = mem_alloc(&c, BIG);
    send_call(&c, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = BIG, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, src, BIG); /* bulk */
    r = get_reply(&c, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    rgpu__reply__free_unpacked(r, NULL);
    memset(src + 1000, 0xa5, 3000);
    send_call(&c,
              WIRE_OP(MEMCPY_HTOD, .dst = d + 1000, .size = 3000, .stream = PROTO_STREAM_NULL,
                      .async = 1),
              PROTO_FLAG_NOREPLY, src + 1000, 3000, NULL, 0);
    send_call(&c, WIRE_OP(MEMCPY_DTOH, .src = d, .size = BIG, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, NULL, 0); /* streamed back */
    r = get_reply(&c, dst, BIG);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_memory_equal(src, dst, BIG);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(&c, WIRE_OP(MEMCPY_DTOH, .src = d + 900, .size = 300, .stream = PROTO_STREAM_NULL), 0,
              NULL, 0, NULL, 0); /* inline */
    r = get_reply(&c, NULL, 0);
    assert_int_equal(r->data.len, 300);
    assert_memory_equal(r->data.data, src + 900, 300);
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(call_sync(&c, WIRE_OP(MEM_FREE, .dptr = d), NULL), CUDA_SUCCESS);
    bye(&c);
    expect_ended(&c, "status 0");
}

static void test_async_error_and_bad_calls(void **state)
{
    struct client c;
    struct proto_frame_hdr hdr;
    uint64_t d;
    Rgpu__AsyncError *e;

    start_session(&c);
    d = mem_alloc(&c, 4096);
    send_call(&c, WIRE_OP(MEMCPY_DTOD, .dst = d + (1ull << 40), .src = d, .size = 64, .async = 1),
              PROTO_FLAG_NOREPLY, NULL, 0, NULL, 0);
    send_call(&c, WIRE_OP(NOP), 0, NULL, 0, NULL, 0);
    assert_int_equal(proto_recv(c.conn, &hdr, c.buf, sizeof(c.buf)), RG_OK);
    assert_int_equal(hdr.type, PROTO_ASYNC_ERROR); /* before the NOP's reply */
    e = rgpu__async_error__unpack(NULL, hdr.msg_len, c.buf);
    assert_non_null(e);
    assert_int_equal(e->id, c.next_id - 2);
    assert_int_equal(e->op, PROTO_OP_MEMCPY_DTOD);
    assert_int_not_equal(e->result, CUDA_SUCCESS);
    assert_non_null(strstr(e->message, "CUDA_ERROR_"));
    rgpu__async_error__free_unpacked(e, NULL);
    rgpu__reply__free_unpacked(get_reply(&c, NULL, 0), NULL);
    assert_int_equal(/* never created */
                     call_sync(&c,
                               WIRE_OP(EVENT_SYNCHRONIZE, .event = (5000ull << 4) | PROTO_H_EVENT),
                               NULL),
                     CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(
        call_sync(&c, WIRE_OP(STREAM_QUERY, .stream = (5001ull << 4) | PROTO_H_STREAM), NULL),
        CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(call_sync(&c, PROTO_OP_COUNT + 40, NULL, 0, NULL), /* positional: no op */
                     CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(call_sync(&c, WIRE_OP(NOP), NULL), CUDA_SUCCESS);
    bye(&c);
    expect_ended(&c, "status 0");
}

#define MOD_ID    ((1024ull << 4) | PROTO_H_MODULE)
#define FUNC_ID   ((1025ull << 4) | PROTO_H_FUNCTION)
#define STREAM_ID ((1026ull << 4) | PROTO_H_STREAM)
#define EV0_ID    ((1027ull << 4) | PROTO_H_EVENT)
#define EV1_ID    ((1028ull << 4) | PROTO_H_EVENT)

static void load_scale_kernel(struct client *c)
{
    static const char ptx[] = ".version 8.0\n.target sm_90\n.entry _Z5scalePffi()\n";
    static const uint32_t want[] = {3, 0, 8, 8, 4, 12, 4};
    Rgpu__Reply *r;

    /* the image as data, without image_flags and image_len (optional: the image sent whole) */
    send_call(c, WIRE_OP_N(MODULE_LOAD, 1, .id = MOD_ID), 0, ptx, sizeof(ptx), NULL, 0);
    r = get_reply(c, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(c, WIRE_OP(MODULE_GET_FUNCTION, .id = FUNC_ID, .parent = MOD_ID), PROTO_FLAG_NOREPLY,
              "_Z5scalePffi", 12, NULL, 0);
    send_call(c, WIRE_OP(FUNC_GET_PARAM_LAYOUT, .func = FUNC_ID), 0, NULL, 0, NULL, 0);
    r = get_reply(c, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->n_out, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(r->out[i], want[i]);
    rgpu__reply__free_unpacked(r, NULL);
}

/* scale(x, s, n) on STREAM_ID with the layout above; nattr launch attributes follow. */
static void launch_scale(struct client *c, uint64_t x, float s, int n, size_t params_len,
                         unsigned nattr)
{
    uint8_t data[16 + sizeof(CUlaunchAttribute)] = {0};
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PRIORITY};
    memcpy(data, &x, 8);
    memcpy(data + 8, &s, 4);
    memcpy(data + 12, &n, 4);
    memcpy(data + params_len, &attr, sizeof(attr));
    send_call(c,
              WIRE_OP(LAUNCH, .func = FUNC_ID, .gx = 1, .gy = 1, .gz = 1, .bx = 64, .by = 1,
                      .bz = 1, .stream = STREAM_ID, .params_len = params_len, .nattr = nattr),
              PROTO_FLAG_NOREPLY, data, params_len + nattr * sizeof(attr), NULL, 0);
}

static void check_floats(struct client *c, uint64_t d, const float *want, int n)
{
    Rgpu__Reply *r;

    send_call(c,
              WIRE_OP(MEMCPY_DTOH, .src = d, .size = (uint64_t)n * 4, .stream = PROTO_STREAM_NULL),
              0, NULL, 0, NULL, 0);
    r = get_reply(c, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->data.len, (size_t)n * 4);
    assert_memory_equal(r->data.data, want, (size_t)n * 4);
    rgpu__reply__free_unpacked(r, NULL);
}

/* Module, function, layout, stream, events and launches (plain and with attributes); a launch
 * whose parameters do not cover the layout fails asynchronously. */
static void test_module_launch(void **state)
{
    struct client c;
    struct proto_frame_hdr hdr;
    float host[64], ms;
    uint64_t d, out[4];
    Rgpu__AsyncError *e;

    start_session(&c);
    load_scale_kernel(&c);
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    d = mem_alloc(&c, sizeof(host));
    send_call(&c, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = sizeof(host), .stream = PROTO_STREAM_NULL),
              0, host, sizeof(host), NULL, 0);
    rgpu__reply__free_unpacked(get_reply(&c, NULL, 0), NULL);
    send_call(&c, WIRE_OP(STREAM_CREATE, .id = STREAM_ID), PROTO_FLAG_NOREPLY, NULL, 0, NULL, 0);
    send_call(&c, WIRE_OP(EVENT_CREATE, .id = EV0_ID), PROTO_FLAG_NOREPLY, NULL, 0, NULL, 0);
    send_call(&c, WIRE_OP(EVENT_CREATE, .id = EV1_ID), PROTO_FLAG_NOREPLY, NULL, 0, NULL, 0);
    send_call(&c, WIRE_OP(EVENT_RECORD, .event = EV0_ID, .stream = STREAM_ID), PROTO_FLAG_NOREPLY,
              NULL, 0, NULL, 0);
    launch_scale(&c, d, 2.0f, 64, 16, 0);
    launch_scale(&c, d, 3.0f, 64, 16, 1); /* through cuLaunchKernelEx */
    send_call(&c, WIRE_OP(EVENT_RECORD, .event = EV1_ID, .stream = STREAM_ID), PROTO_FLAG_NOREPLY,
              NULL, 0, NULL, 0);
    assert_int_equal(call_sync(&c, WIRE_OP(EVENT_SYNCHRONIZE, .event = EV1_ID), NULL),
                     CUDA_SUCCESS);
    assert_int_equal(call_sync(&c, WIRE_OP(EVENT_ELAPSED, .start = EV0_ID, .end = EV1_ID), out),
                     CUDA_SUCCESS);
    memcpy(&ms, &out[0], sizeof(ms));
    assert_true(ms >= 0.0f);
    for (int i = 0; i < 64; i++)
        host[i] *= 6.0f;
    check_floats(&c, d, host, 64);
    launch_scale(&c, d, 2.0f, 64, 12, 0); /* n not covered */
    send_call(&c, WIRE_OP(NOP), 0, NULL, 0, NULL, 0);
    assert_int_equal(proto_recv(c.conn, &hdr, c.buf, sizeof(c.buf)), RG_OK);
    assert_int_equal(hdr.type, PROTO_ASYNC_ERROR);
    e = rgpu__async_error__unpack(NULL, hdr.msg_len, c.buf);
    assert_int_equal(e->op, PROTO_OP_LAUNCH);
    assert_int_equal(e->result, CUDA_ERROR_INVALID_VALUE);
    rgpu__async_error__free_unpacked(e, NULL);
    rgpu__reply__free_unpacked(get_reply(&c, NULL, 0), NULL);
    check_floats(&c, d, host, 64); /* untouched */
    send_call(&c, WIRE_OP(STREAM_DESTROY, .handle = STREAM_ID), PROTO_FLAG_NOREPLY, NULL, 0, NULL,
              0);
    assert_int_equal(call_sync(&c, WIRE_OP(MODULE_UNLOAD, .handle = MOD_ID), NULL), CUDA_SUCCESS);
    transport_close(c.conn); /* the two events and the allocation are left to the worker */
    expect_ended(&c, "status 0");
}

/* A bulk round trip of len bytes through d. */
static void bulk_round_trip(struct client *c, uint64_t d, size_t len, uint8_t seed)
{
    static uint8_t src[1 << 20], dst[1 << 20];
    Rgpu__Reply *r;

    assert_true(len <= sizeof(src));
    for (size_t i = 0; i < len; i++)
        src[i] = (uint8_t)(i * 7 + seed);
    send_call(c, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = len, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, src, len);
    r = get_reply(c, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    rgpu__reply__free_unpacked(r, NULL);
    send_call(c, WIRE_OP(MEMCPY_DTOH, .src = d, .size = len, .stream = PROTO_STREAM_NULL), 0, NULL,
              0, NULL, 0);
    r = get_reply(c, dst, len);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_memory_equal(src, dst, len);
    rgpu__reply__free_unpacked(r, NULL);
}

/* Bulk copies before and after the context that holds the staging buffers goes away: an
 * explicit context destroyed, then the primary context reset. */
static void test_contexts_and_staging(void **state)
{
    struct client c;
    const uint64_t ctx = (2000ull << 4) | PROTO_H_CTX;
    uint64_t d;

    start_session(&c);
    d = mem_alloc(&c, 1 << 20);
    assert_int_equal(call_sync(&c, WIRE_OP(CTX_CREATE, .id = ctx), NULL), CUDA_SUCCESS);
    c.ctx = ctx;
    bulk_round_trip(&c, d, 1 << 20, 1);
    assert_int_equal(call_sync(&c, WIRE_OP(CTX_DESTROY, .ctx = ctx), NULL), CUDA_SUCCESS);
    c.ctx = PROTO_PRIMARY_CTX_ID(0);
    bulk_round_trip(&c, d, 1 << 20, 2);
    assert_int_equal(call_sync(&c, WIRE_OP(PRIMARY_CTX_RESET, .dev = 0), NULL), CUDA_SUCCESS);
    d = mem_alloc(&c, 1 << 20);
    bulk_round_trip(&c, d, 1 << 20, 3);
    assert_int_equal(call_sync(&c, WIRE_OP(CTX_DESTROY, .ctx = ctx), NULL),
                     CUDA_ERROR_INVALID_CONTEXT);
    bye(&c);
    expect_ended(&c, "status 0");
}

static void send_raw_header(struct client *c, uint32_t magic, uint32_t msg_len)
{
    struct proto_frame_hdr hdr = {.magic = magic, .type = PROTO_CALL, .msg_len = msg_len};
    struct iovec iov = {&hdr, sizeof(hdr)};

    assert_int_equal(transport_sendv(c->conn, &iov, 1), RG_OK);
}

/* A bad magic and an oversized message each end their own session; a third session, open
 * all along, keeps its memory and goes on working. */
static void test_malformed_ends_only_its_session(void **state)
{
    struct client good, bad_magic, oversized;
    uint64_t d, out[4];
    static const uint8_t bytes[8] = "rgpu-ok";
    Rgpu__Reply *r;

    start_session(&good);
    d = mem_alloc(&good, 1 << 20);
    start_session(&bad_magic);
    start_session(&oversized);
    send_raw_header(&bad_magic, 0xdeadbeef, 16);
    send_raw_header(&oversized, PROTO_MAGIC, PROTO_MSG_MAX + 1);
    expect_closed(&bad_magic);
    expect_closed(&oversized);
    expect_ended(&bad_magic, "status 2");
    expect_ended(&oversized, "status 2");
    assert_true(wait_log("malformed message from", NULL, 0));
    send_call(&good, WIRE_OP(MEMCPY_HTOD, .dst = d, .size = 8, .stream = PROTO_STREAM_NULL), 0,
              bytes, 8, NULL, 0);
    rgpu__reply__free_unpacked(get_reply(&good, NULL, 0), NULL);
    send_call(&good, WIRE_OP(MEMCPY_DTOH, .src = d, .size = 8, .stream = PROTO_STREAM_NULL), 0,
              NULL, 0, NULL, 0);
    r = get_reply(&good, NULL, 0);
    assert_int_equal(r->result, CUDA_SUCCESS);
    assert_int_equal(r->data.len, 8);
    assert_memory_equal(r->data.data, bytes, 8);
    rgpu__reply__free_unpacked(r, NULL);
    assert_int_equal(call_sync(&good, WIRE_OP(MEM_GET_INFO), out), CUDA_SUCCESS);
    transport_close(bad_magic.conn);
    transport_close(oversized.conn);
    bye(&good);
    expect_ended(&good, "status 0");
}

/* Data lanes: a connection to the lane listener without the secret is closed; two lanes carry
 * a 12 MiB copy's 4 MiB stripes (0 and 2 on lane 0, 1 on lane 1) both ways; a lane that closes
 * mid-copy ends that session only. */
#define LANE_STRIPE (4u << 20)
#define LANE_COPY   (12u << 20)
/* The lane copy of LANE_COPY bytes at device address d, in stripes over two lanes. */
#define HTOD_LANES(d)                                                                              \
    WIRE_OP(MEMCPY_HTOD_LANES, .dptr = (d), .size = LANE_COPY, .stream = PROTO_STREAM_NULL,        \
            .nlanes = 2, .stripe = LANE_STRIPE)
#define DTOH_LANES(d)                                                                              \
    WIRE_OP(MEMCPY_DTOH_LANES, .dptr = (d), .size = LANE_COPY, .stream = PROTO_STREAM_NULL,        \
            .nlanes = 2, .stripe = LANE_STRIPE)

static struct transport_conn *lane_open(const Rgpu__Welcome *w, uint32_t index, bool secret)
{
    struct {
        uint8_t secret[32];
        uint32_t index;
    } hello = {.index = index};
    struct iovec iov = {&hello, sizeof(hello)};
    struct transport_conn *conn;

    assert_int_equal(w->lane_secret.len, sizeof(hello.secret));
    if (secret)
        memcpy(hello.secret, w->lane_secret.data, sizeof(hello.secret));
    assert_int_equal(transport_tcp_ops.connect(w->lane_addr, NULL, &conn), RG_OK);
    assert_int_equal(transport_sendv(conn, &iov, 1), RG_OK);
    return conn;
}

static void lanes_move(struct transport_conn *lane[2], uint8_t *buf, bool send)
{
    for (size_t u = 0; u < LANE_COPY / LANE_STRIPE; u++) {
        struct iovec iov = {buf + u * LANE_STRIPE, LANE_STRIPE};
        assert_int_equal(send ? transport_sendv(lane[u % 2], &iov, 1)
                              : transport_recv(lane[u % 2], buf + u * LANE_STRIPE, LANE_STRIPE),
                         RG_OK);
    }
}

/* One lane copy at d whose lanes move their bytes; its answer must be want. */
static void lanes_copy(struct client *c, struct transport_conn *lane[2], bool htod, uint64_t d,
                       uint8_t *buf, int want)
{
    Rgpu__Reply *r;

    if (htod)
        send_call(c, HTOD_LANES(d), 0, NULL, 0, NULL, 0);
    else
        send_call(c, DTOH_LANES(d), 0, NULL, 0, NULL, 0);
    lanes_move(lane, buf, htod);
    r = get_reply(c, NULL, 0);
    assert_int_equal(r->result, want);
    rgpu__reply__free_unpacked(r, NULL);
}

static void test_lanes(void **state)
{
    static uint8_t src[LANE_COPY], dst[LANE_COPY];
    struct client c, other;
    struct transport_conn *stranger, *lane[2];
    Rgpu__Welcome *w = connect_hello(&c, PROTO_VERSION);
    uint64_t d, ctx;
    Rgpu__Reply *r;

    assert_non_null(w->lane_addr);
    fill(src, LANE_COPY);
    d = mem_alloc(&c, LANE_COPY);
    stranger = lane_open(w, 0, false);
    lane[0] = lane_open(w, 0, true);
    lane[1] = lane_open(w, 1, true);
    lanes_copy(&c, lane, true, d, src, CUDA_SUCCESS);
    assert_true(wait_log("a data lane connection without the session's secret", NULL, 0));
    expect_closed_conn(stranger);
    lanes_copy(&c, lane, false, d, dst, CUDA_SUCCESS);
    assert_memory_equal(src, dst, LANE_COPY);
    /* In a context the worker does not know, the copies fail and still move their bytes (a
     * DtoH sends zeros), so the lanes stay in step for the next copy. */
    ctx = c.ctx;
    c.ctx = 0x5151;
    lanes_copy(&c, lane, true, d, src, CUDA_ERROR_INVALID_CONTEXT);
    lanes_copy(&c, lane, false, d, dst, CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(dst[0] | dst[LANE_COPY / 2] | dst[LANE_COPY - 1], 0);
    c.ctx = ctx;
    lanes_copy(&c, lane, false, d, dst, CUDA_SUCCESS);
    assert_memory_equal(src, dst, LANE_COPY);
    /* Lane 1 goes away before its stripe: the session ends; another goes on. */
    start_session(&other);
    send_call(&c, HTOD_LANES(d), 0, NULL, 0, NULL, 0);
    transport_close(lane[1]);
    r = get_reply(&c, NULL, 0); /* the call's answer, then the end */
    assert_int_equal(r->result, CUDA_ERROR_DEVICE_UNAVAILABLE);
    rgpu__reply__free_unpacked(r, NULL);
    expect_closed(&c);
    expect_ended(&c, "status 2");
    assert_true(wait_log("a data lane failed", NULL, 0));
    assert_int_not_equal(mem_alloc(&other, 4096), 0);
    bye(&other);
    expect_ended(&other, "status 0");
    transport_close(lane[0]);
    transport_close(c.conn);
    rgpu__welcome__free_unpacked(w, NULL);
}

/* One byte sent to the lane listener by someone else, who then stays silent, does not stall
 * the session's copy: the worker reads every lane's hello at once, and closes the silent one
 * after its 2 s. */
static void test_lane_silent_peer(void **state)
{
    static uint8_t src[LANE_COPY], dst[LANE_COPY];
    struct client c;
    struct transport_conn *silent, *lane[2];
    Rgpu__Welcome *w = connect_hello(&c, PROTO_VERSION);
    uint64_t d;
    uint8_t one = 0x42;
    struct iovec iov = {&one, 1};

    fill(src, LANE_COPY);
    d = mem_alloc(&c, LANE_COPY);
    assert_int_equal(transport_tcp_ops.connect(w->lane_addr, NULL, &silent), RG_OK);
    assert_int_equal(transport_sendv(silent, &iov, 1), RG_OK);
    lane[0] = lane_open(w, 0, true);
    lane[1] = lane_open(w, 1, true);
    lanes_copy(&c, lane, true, d, src, CUDA_SUCCESS);
    lanes_copy(&c, lane, false, d, dst, CUDA_SUCCESS);
    assert_memory_equal(src, dst, LANE_COPY);
    expect_closed_conn(silent);
    bye(&c);
    expect_ended(&c, "status 0");
    transport_close(lane[0]);
    transport_close(lane[1]);
    rgpu__welcome__free_unpacked(w, NULL);
}

/* A lane copy asking for two lanes when only one connects: after the worker's wait for the
 * lanes (10 s), the call is answered and that session ends as malformed (status 2). */
static void test_lanes_missing(void **state)
{
    struct client c;
    struct transport_conn *lane;
    Rgpu__Welcome *w = connect_hello(&c, PROTO_VERSION);
    uint64_t d = mem_alloc(&c, LANE_COPY);

    lane = lane_open(w, 0, true);
    send_call(&c, HTOD_LANES(d), 0, NULL, 0, NULL, 0);
    rgpu__reply__free_unpacked(get_reply(&c, NULL, 0), NULL);
    expect_closed(&c);
    expect_ended(&c, "status 2");
    assert_true(wait_log("a lane copy without its lanes (2 asked)", NULL, 0));
    transport_close(lane);
    transport_close(c.conn);
    rgpu__welcome__free_unpacked(w, NULL);
}

/* The client vanishes without BYE, holding memory: the worker frees it and exits. */
static void test_disconnect_frees_session(void **state)
{
    struct client c;
    char needle[96];

    start_session(&c);
    mem_alloc(&c, 3u << 20);
    mem_alloc(&c, 1u << 20);
    transport_close(c.conn);
    snprintf(needle, sizeof(needle), "session %llu: freed 2 allocation(s), 4.0 MiB",
             (unsigned long long)c.session);
    assert_true(wait_log(needle, NULL, 0));
    expect_ended(&c, "status 0");
}

/* A connection that closes before its hello (a load balancer's port probe) is no error, and
 * no worker is forked for it: the supervisor reads the hello itself. */
static void test_port_probe(void **state)
{
    struct client c = {.session = 0}, after;
    struct transport_conn *conn;
    char needle[128];

    assert_int_equal(transport_tcp_ops.connect(srv.addr, NULL, &conn), RG_OK);
    local_name(transport_fd(conn), c.local, sizeof(c.local));
    transport_close(conn);
    start_session(&after); /* served after the probe, so the probe's close was seen first */
    transport_close(after.conn);
    expect_ended(&after, "status 0");
    snprintf(needle, sizeof(needle), "from %s: worker pid", c.local);
    assert_null(strstr(read_log(), needle));
}

/* Without a usable driver the server says why and exits non-zero. */
static void test_no_driver(void **state)
{
    char log[160], *argv[] = {GPU_SERVER_PATH,
                              "--listen",
                              "127.0.0.1",
                              "--port",
                              "0",
                              "--driver",
                              "/nonexistent/libcuda.so.1",
                              NULL};
    char saved[sizeof(srv.log)];
    int status = 0;
    pid_t pid;

    snprintf(log, sizeof(log), "%s/nodriver.log", srv.dir);
    pid = spawn(log, argv);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    memcpy(saved, srv.log, sizeof(saved));
    snprintf(srv.log, sizeof(srv.log), "%s", log);
    assert_true(wait_log("must run on a host with an NVIDIA GPU", NULL, 0));
    memcpy(srv.log, saved, sizeof(saved));
    unlink(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_async_error_and_bad_calls),
        cmocka_unit_test(test_module_launch),
        cmocka_unit_test(test_contexts_and_staging),
        cmocka_unit_test(test_malformed_ends_only_its_session),
        cmocka_unit_test(test_lanes),
        cmocka_unit_test(test_lanes_missing),
        cmocka_unit_test(test_lane_silent_peer),
        cmocka_unit_test(test_disconnect_frees_session),
        cmocka_unit_test(test_port_probe),
        cmocka_unit_test(test_no_driver),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
