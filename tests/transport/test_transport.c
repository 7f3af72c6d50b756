/* Transport conformance suite: the same cases over every backend named on the command line
 * (argv[1] = "tcp" | "loop" | "rdma"; rdma runs on tests/fakeverbs, found through
 * LD_LIBRARY_PATH, with FAKEVERBS_DIR set). Threads never call cmocka asserts; they record what
 * they saw and the main thread checks it. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "transport/rdma.h"
#include "transport/side_listener.h"
#include "transport/transport.h"

#define BIG_LEN (64u << 20)

static const struct transport_ops *ops;
static char last_log[1024];

struct pair {
    struct transport_listener *listener;
    struct transport_conn *client, *server;
    char addr[128];
};

static void capture_log(enum rg_log_level level, const char *line)
{
    snprintf(last_log, sizeof(last_log), "%s", line);
    fprintf(stderr, "%s\n", line);
}

static int is_tcp(void)
{
    return strcmp(ops->name, "tcp") == 0;
}
static int is_rdma(void)
{
    return strcmp(ops->name, "rdma") == 0;
}
/* Backends addressed by host:port. */
static int is_ip(void)
{
    return is_tcp() || is_rdma();
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct transport_listener *listen_any(char *addr, size_t len)
{
    static int counter;
    struct transport_listener *l = NULL;
    char want[64];

    if (is_ip())
        snprintf(want, sizeof(want), "127.0.0.1:0");
    else
        snprintf(want, sizeof(want), "conformance-%d", counter++);
    assert_int_equal(ops->listen(want, &l), RG_OK);
    assert_int_equal(ops->listener_addr(l, addr, len), RG_OK);
    return l;
}

struct connector {
    const char *addr;
    const struct transport_opts *opts;
    struct transport_conn *conn;
    rg_status_t status;
};

static void *connector_main(void *arg)
{
    struct connector *c = arg;
    c->status = ops->connect(c->addr, c->opts, &c->conn);
    return NULL;
}

/* Connect from another thread while this one accepts: an rdma connect completes only once the
 * listener accepts (tcp and loop would not need it). */
static void connect_accept(struct transport_listener *l, const char *addr,
                           const struct transport_opts *opts, struct transport_conn **client,
                           struct transport_conn **server)
{
    struct connector c = {.addr = addr, .opts = opts, .status = RG_ERR_IO};
    struct pollfd pfd = {.fd = ops->listener_fd(l), .events = POLLIN};
    pthread_t tid;

    assert_int_equal(pthread_create(&tid, NULL, connector_main, &c), 0);
    assert_int_equal(poll(&pfd, 1, 2000), 1);
    assert_int_equal(ops->accept(l, server), RG_OK);
    pthread_join(tid, NULL);
    assert_int_equal(c.status, RG_OK);
    *client = c.conn;
}

static int pair_setup(void **state)
{
    struct transport_opts opts = {.connect_timeout_ms = 2000};
    struct pair *p = calloc(1, sizeof(*p));

    assert_non_null(p);
    p->listener = listen_any(p->addr, sizeof(p->addr));
    connect_accept(p->listener, p->addr, &opts, &p->client, &p->server);
    *state = p;
    return 0;
}

static int pair_teardown(void **state)
{
    struct pair *p = *state;

    if (p->client != NULL)
        transport_close(p->client);
    if (p->server != NULL)
        transport_close(p->server);
    ops->listener_close(p->listener);
    free(p);
    return 0;
}

/* sendv from another thread, so the receiver can drain more than a socket buffer holds. */
struct sender {
    pthread_t tid;
    struct transport_conn *conn;
    const struct iovec *iov;
    int iovcnt;
    rg_status_t status;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    s->status = transport_sendv(s->conn, s->iov, s->iovcnt);
    return NULL;
}

static void sender_start(struct sender *s, struct transport_conn *conn, const struct iovec *iov,
                         int iovcnt)
{
    *s = (struct sender){.conn = conn, .iov = iov, .iovcnt = iovcnt, .status = RG_ERR_IO};
    assert_int_equal(pthread_create(&s->tid, NULL, sender_main, s), 0);
}

static rg_status_t sender_join(struct sender *s)
{
    pthread_join(s->tid, NULL);
    return s->status;
}

static void test_ops_complete(void **state)
{
    assert_ptr_equal(transport_find(ops->name), ops);
    assert_null(transport_find("no-such-backend"));
    assert_null(transport_find(NULL));
    void (*const slots[])(void) = {
        (void (*)(void))ops->connect,
        (void (*)(void))ops->listen,
        (void (*)(void))ops->accept,
        (void (*)(void))ops->listener_fd,
        (void (*)(void))ops->listener_addr,
        (void (*)(void))ops->listener_close,
        (void (*)(void))ops->sendv,
        (void (*)(void))ops->recv,
        (void (*)(void))ops->fd,
        (void (*)(void))ops->shutdown,
        (void (*)(void))ops->close,
        (void (*)(void))ops->mem_reg,
        (void (*)(void))ops->mem_dereg,
        (void (*)(void))ops->write,
        (void (*)(void))ops->read,
        (void (*)(void))ops->mem_reg_dmabuf,
        (void (*)(void))ops->accept_secret,
    };
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++)
        assert_non_null(slots[i]);
}

static void test_connect_accept(void **state)
{
    struct pair *p = *state;

    assert_true(transport_fd(p->client) >= 0);
    assert_true(transport_fd(p->server) >= 0);
    assert_true(transport_fd(p->client) != transport_fd(p->server));
    assert_true(ops->listener_fd(p->listener) >= 0);
    if (is_ip()) /* the bound port, not the requested 0 */
        assert_true(strncmp(p->addr, "127.0.0.1:", 10) == 0 && strcmp(p->addr + 10, "0") != 0);
}

static void test_ping_pong(void **state)
{
    struct pair *p = *state;
    char out[16], in[16];

    for (int i = 0; i < 200; i++) {
        snprintf(out, sizeof(out), "ping %d", i);
        struct iovec iov = {out, sizeof(out)};
        assert_int_equal(transport_sendv(p->client, &iov, 1), RG_OK);
        assert_int_equal(transport_recv(p->server, in, sizeof(in)), RG_OK);
        assert_string_equal(in, out);
        in[1] = 'o';
        iov = (struct iovec){in, sizeof(in)};
        assert_int_equal(transport_sendv(p->server, &iov, 1), RG_OK);
        assert_int_equal(transport_recv(p->client, out, sizeof(out)), RG_OK);
        assert_int_equal(strncmp(out, "pong ", 5), 0);
    }
}

static void test_sendv_many_iovecs(void **state)
{
    enum { N = 5000 };
    struct pair *p = *state;
    static struct iovec iov[N];
    static uint8_t data[N][29];
    size_t total = 0, pos = 0;
    struct sender s;
    uint8_t *in;

    for (int i = 0; i < N; i++) {
        size_t len = (size_t)(i % 29); /* includes empty entries */
        for (size_t j = 0; j < len; j++)
            data[i][j] = (uint8_t)(i * 7 + j);
        iov[i] = (struct iovec){data[i], len};
        total += len;
    }
    in = malloc(total);
    assert_non_null(in);
    sender_start(&s, p->client, iov, N);
    assert_int_equal(transport_recv(p->server, in, total), RG_OK);
    assert_int_equal(sender_join(&s), RG_OK);
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < iov[i].iov_len; j++)
            assert_int_equal(in[pos++], (uint8_t)(i * 7 + j));
    free(in);
}

static uint64_t checksum(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

struct big_sender {
    struct sender s;
    uint8_t *buf;
    uint64_t len, sum;
    struct iovec iov[3];
};

/* Thread: fill, checksum and send [len][bytes][checksum]. */
static void *big_sender_main(void *arg)
{
    struct big_sender *b = arg;
    uint64_t x = 88172645463325252ull;

    for (uint64_t i = 0; i < b->len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b->buf[i] = (uint8_t)x;
    }
    b->sum = checksum(0xcbf29ce484222325ull, b->buf, b->len);
    b->iov[0] = (struct iovec){&b->len, sizeof(b->len)};
    b->iov[1] = (struct iovec){b->buf, b->len};
    b->iov[2] = (struct iovec){&b->sum, sizeof(b->sum)};
    b->s.status = transport_sendv(b->s.conn, b->iov, 3);
    return NULL;
}

static void test_big_transfer(void **state)
{
    struct pair *p = *state;
    struct big_sender b = {.s.conn = p->client, .len = BIG_LEN};
    uint64_t len, sum = 0xcbf29ce484222325ull, their_sum;
    size_t chunk = 1u << 20;
    uint8_t *in = malloc(chunk);

    b.buf = malloc(BIG_LEN);
    assert_non_null(b.buf);
    assert_non_null(in);
    assert_int_equal(pthread_create(&b.s.tid, NULL, big_sender_main, &b), 0);
    assert_int_equal(transport_recv(p->server, &len, sizeof(len)), RG_OK);
    assert_int_equal(len, BIG_LEN);
    for (uint64_t got = 0; got < len; got += chunk) {
        assert_int_equal(transport_recv(p->server, in, chunk), RG_OK);
        sum = checksum(sum, in, chunk);
    }
    assert_int_equal(transport_recv(p->server, &their_sum, sizeof(their_sum)), RG_OK);
    assert_int_equal(sender_join(&b.s), RG_OK);
    assert_int_equal(sum, their_sum);
    free(in);
    free(b.buf);
}

/* Receive len bytes in chunks and checksum them (thread). */
struct summer {
    pthread_t tid;
    struct transport_conn *conn;
    uint64_t len, sum;
    rg_status_t status;
};

static void *summer_main(void *arg)
{
    struct summer *s = arg;
    static __thread uint8_t chunk[1u << 16];

    s->sum = 0xcbf29ce484222325ull;
    s->status = RG_OK;
    for (uint64_t got = 0; got < s->len && s->status == RG_OK; got += sizeof(chunk)) {
        s->status = transport_recv(s->conn, chunk, sizeof(chunk));
        s->sum = checksum(s->sum, chunk, sizeof(chunk));
    }
    return NULL;
}

/* Both sides send and receive at once, more than any window holds: flow control must let both
 * streams finish (over rdma: credits returned while the other direction is full). */
static void test_both_directions(void **state)
{
    enum { LEN = 16u << 20 };
    struct pair *p = *state;
    uint8_t *a = malloc(LEN), *b = malloc(LEN);
    struct iovec ia = {a, LEN}, ib = {b, LEN};
    struct summer ra = {.conn = p->server, .len = LEN}, rb = {.conn = p->client, .len = LEN};
    struct sender sa, sb;

    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < LEN; i++) {
        a[i] = (uint8_t)(i * 13);
        b[i] = (uint8_t)(i * 7 + 1);
    }
    assert_int_equal(pthread_create(&ra.tid, NULL, summer_main, &ra), 0);
    assert_int_equal(pthread_create(&rb.tid, NULL, summer_main, &rb), 0);
    sender_start(&sa, p->client, &ia, 1);
    sender_start(&sb, p->server, &ib, 1);
    assert_int_equal(sender_join(&sa), RG_OK);
    assert_int_equal(sender_join(&sb), RG_OK);
    pthread_join(ra.tid, NULL);
    pthread_join(rb.tid, NULL);
    assert_int_equal(ra.status, RG_OK);
    assert_int_equal(rb.status, RG_OK);
    assert_int_equal(ra.sum, checksum(0xcbf29ce484222325ull, a, LEN));
    assert_int_equal(rb.sum, checksum(0xcbf29ce484222325ull, b, LEN));
    free(a);
    free(b);
}

/* With busy polling on both ends the stream behaves the same. */
static void test_busy_poll_ping_pong(void **state)
{
    struct pair *p = *state;

    transport_set_busy_poll(p->client, 200);
    transport_set_busy_poll(p->server, 200);
    test_ping_pong(state);
}

static void test_orderly_close(void **state)
{
    struct pair *p = *state;
    struct iovec iov = {"abc", 3};
    char buf[8];

    assert_int_equal(transport_sendv(p->client, &iov, 1), RG_OK);
    transport_close(p->client);
    p->client = NULL;
    assert_int_equal(transport_recv(p->server, buf, 3), RG_OK);
    assert_memory_equal(buf, "abc", 3);
    assert_int_equal(transport_recv(p->server, buf, 1), RG_ERR_CLOSED);
}

static void test_close_mid_message(void **state)
{
    struct pair *p = *state;
    struct iovec iov = {"abc", 3};
    char buf[8];

    assert_int_equal(transport_sendv(p->client, &iov, 1), RG_OK);
    transport_close(p->client);
    p->client = NULL;
    assert_int_equal(transport_recv(p->server, buf, sizeof(buf)), RG_ERR_CLOSED);
}

struct blocked_recv {
    struct transport_conn *conn;
    volatile int done;
    rg_status_t status;
};

static void *blocked_recv_main(void *arg)
{
    struct blocked_recv *b = arg;
    char buf[4];

    b->status = transport_recv(b->conn, buf, sizeof(buf));
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_shutdown_unblocks_recv(void **state)
{
    struct pair *p = *state;
    struct blocked_recv b = {.conn = p->server, .status = RG_OK};
    struct iovec iov = {"x", 1};
    pthread_t tid;
    char c;

    assert_int_equal(pthread_create(&tid, NULL, blocked_recv_main, &b), 0);
    usleep(100 * 1000);
    assert_int_equal(__atomic_load_n(&b.done, __ATOMIC_ACQUIRE), 0);
    transport_shutdown(p->server);
    pthread_join(tid, NULL);
    assert_int_equal(b.status, RG_ERR_CLOSED);
    /* The peer sees the end of stream, and nothing more can be sent on the shut connection. */
    assert_int_equal(transport_recv(p->client, &c, 1), RG_ERR_CLOSED);
    assert_int_not_equal(transport_sendv(p->server, &iov, 1), RG_OK);
}

static void test_connect_fails_fast(void **state)
{
    struct transport_opts opts = {.connect_timeout_ms = 3000};
    struct transport_conn *conn = NULL;
    char addr[128];
    int64_t start;

    if (is_ip()) { /* a port that was just bound and released: nobody listens on it */
        struct transport_listener *l = listen_any(addr, sizeof(addr));
        ops->listener_close(l);
    } else {
        snprintf(addr, sizeof(addr), "no-such-listener");
    }
    last_log[0] = '\0';
    start = now_ms();
    assert_int_equal(ops->connect(addr, &opts, &conn), RG_ERR_REFUSED);
    assert_true(now_ms() - start < 1000);
    assert_null(conn);
    assert_non_null(strstr(last_log, "connect to"));
    assert_non_null(strstr(last_log, addr));
}

static void test_connect_bad_address(void **state)
{
    struct transport_conn *conn = NULL;

    assert_int_not_equal(ops->connect(NULL, NULL, &conn), RG_OK);
    assert_int_not_equal(ops->connect("", NULL, &conn), RG_OK);
    if (is_ip())
        assert_int_not_equal(ops->connect("127.0.0.1", NULL, &conn), RG_OK); /* no port */
    assert_null(conn);
}

static void test_io_timeout(void **state)
{
    struct transport_opts opts = {.connect_timeout_ms = 2000, .io_timeout_ms = 150};
    struct transport_listener *l;
    struct transport_conn *c, *s;
    char addr[128], buf[4];
    int64_t start;

    l = listen_any(addr, sizeof(addr));
    connect_accept(l, addr, &opts, &c, &s);
    start = now_ms();
    assert_int_equal(transport_recv(c, buf, sizeof(buf)), RG_ERR_TIMEOUT);
    assert_true(now_ms() - start >= 100 && now_ms() - start < 2000);
    transport_close(c);
    transport_close(s);
    ops->listener_close(l);
}

/* One-sided slots over a backend without them: exactly RG_ERR_UNSUPPORTED, then skip. */
static int one_sided_unsupported(struct pair *p)
{
    struct transport_mr *mr = NULL;
    char buf[64];

    if (!is_tcp())
        return 0;
    assert_int_equal(ops->mem_reg(p->client, buf, sizeof(buf), TRANSPORT_ACCESS_LOCAL_WRITE, &mr),
                     RG_ERR_UNSUPPORTED);
    assert_null(mr);
    ops->mem_dereg(NULL); /* a no-op */
    assert_int_equal(ops->write(p->client, NULL, buf, 0, 1, sizeof(buf)), RG_ERR_UNSUPPORTED);
    assert_int_equal(ops->read(p->client, NULL, buf, 0, 1, sizeof(buf)), RG_ERR_UNSUPPORTED);
    print_message("%s has no one-sided memory (RG_ERR_UNSUPPORTED); skipping\n", ops->name);
    return 1;
}

static void test_one_sided_round_trip(void **state)
{
    struct pair *p = *state;
    static uint8_t local[4096], remote[8192];
    struct transport_mr *lmr, *rmr;
    uint64_t rbase = (uint64_t)(uintptr_t)remote;

    if (one_sided_unsupported(p))
        skip();
    for (size_t i = 0; i < sizeof(local); i++)
        local[i] = (uint8_t)(i * 3);
    memset(remote, 0, sizeof(remote));
    assert_int_equal(
        ops->mem_reg(p->client, local, sizeof(local), TRANSPORT_ACCESS_LOCAL_WRITE, &lmr), RG_OK);
    assert_int_equal(ops->mem_reg(p->server, remote, sizeof(remote),
                                  TRANSPORT_ACCESS_REMOTE_READ | TRANSPORT_ACCESS_REMOTE_WRITE,
                                  &rmr),
                     RG_OK);
    assert_int_not_equal(lmr->key, rmr->key);
    assert_int_equal(ops->write(p->client, lmr, local, rbase + 100, rmr->key, 1000), RG_OK);
    assert_memory_equal(remote + 100, local, 1000);
    assert_int_equal(remote[99] | remote[1100], 0);
    memset(remote + 5000, 0xab, 3000);
    assert_int_equal(ops->read(p->client, lmr, local + 1000, rbase + 5000, rmr->key, 3000), RG_OK);
    for (size_t i = 1000; i < 4000; i++)
        assert_int_equal(local[i], 0xab);
    ops->mem_dereg(lmr);
    ops->mem_dereg(rmr);
}

/* Memory registered as a dmabuf (GPUDirect RDMA's device memory; on tests/fakeverbs any fd that
 * maps: a memfd) is named by the iova it was given, at an offset into the fd: READ lands in the
 * fd's pages and WRITE sends them. tcp and loop refuse with RG_ERR_UNSUPPORTED. */
static void test_one_sided_dmabuf(void **state)
{
    struct pair *p = *state;
    static uint8_t remote[8192];
    const uint64_t iova = 0x7e0000001000ull, off = 4096 + 100; /* not a page: the iova's too */
    struct transport_mr *dmr = NULL, *rmr;
    int fd = memfd_create("dmabuf", 0);
    uint8_t *view;

    assert_true(fd >= 0 && ftruncate(fd, 3 * 4096) == 0);
    if (!is_rdma()) {
        assert_int_equal(
            ops->mem_reg_dmabuf(p->client, fd, 0, 4096, iova, TRANSPORT_ACCESS_LOCAL_WRITE, &dmr),
            RG_ERR_UNSUPPORTED);
        assert_null(dmr);
        close(fd);
        skip();
    }
    view = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(view != MAP_FAILED);
    assert_int_equal(
        ops->mem_reg_dmabuf(p->client, fd, off, 8000, iova, TRANSPORT_ACCESS_LOCAL_WRITE, &dmr),
        RG_OK);
    close(fd); /* the registration holds it */
    assert_int_equal((uintptr_t)dmr->addr, iova);
    assert_int_equal(ops->mem_reg(p->server, remote, sizeof(remote),
                                  TRANSPORT_ACCESS_REMOTE_READ | TRANSPORT_ACCESS_REMOTE_WRITE,
                                  &rmr),
                     RG_OK);
    for (size_t i = 0; i < sizeof(remote); i++)
        remote[i] = (uint8_t)(i * 5 + 1);
    assert_int_equal(ops->read(p->client, dmr, (void *)(uintptr_t)(iova + 10), (uintptr_t)remote,
                               rmr->key, 7000),
                     RG_OK);
    assert_memory_equal(view + off + 10, remote, 7000);
    assert_int_equal(view[off + 9] | view[off + 7010], 0);
    memset(view + off, 0xcd, 8000);
    assert_int_equal(ops->write(p->client, dmr, (void *)(uintptr_t)iova, (uintptr_t)remote + 100,
                                rmr->key, 8000),
                     RG_OK);
    for (size_t i = 100; i < 8100; i++)
        assert_int_equal(remote[i], 0xcd);
    /* Outside the region (iova + 8000 on): refused locally, the connection stays up. */
    assert_int_equal(ops->read(p->client, dmr, (void *)(uintptr_t)(iova + 4000), (uintptr_t)remote,
                               rmr->key, 4001),
                     RG_ERR_INVALID);
    ops->mem_dereg(dmr);
    ops->mem_dereg(rmr);
    munmap(view, 3 * 4096);
}

/* A refusal by the peer (key, range, access): RG_ERR_INVALID. Over rdma it also ends the
 * connection, as a remote access error does on hardware: later calls fail, nothing hangs. */
static void expect_remote_refusal(struct pair *p, rg_status_t got)
{
    struct iovec iov = {"x", 1};
    char c;

    assert_int_equal(got, RG_ERR_INVALID);
    if (!is_rdma())
        return;
    assert_non_null(strstr(last_log, "remote access error"));
    assert_int_not_equal(transport_sendv(p->client, &iov, 1), RG_OK);
    assert_int_not_equal(transport_recv(p->server, &c, 1), RG_OK);
}

static void test_one_sided_refused(void **state)
{
    struct pair *p = *state;
    static uint8_t local[8192], remote[4096];
    struct transport_mr *lmr, *rmr;
    uint64_t rb = (uint64_t)(uintptr_t)remote;
    uint32_t key;

    if (one_sided_unsupported(p))
        skip();
    assert_int_equal(ops->mem_reg(p->client, local, sizeof(local), 0, &lmr), RG_OK);
    assert_int_equal(
        ops->mem_reg(p->server, remote, sizeof(remote), TRANSPORT_ACCESS_REMOTE_WRITE, &rmr),
        RG_OK);
    key = rmr->key;
    assert_int_equal(ops->write(p->client, lmr, local, rb, key, 4096), RG_OK);
    /* Refused locally, before anything reaches the peer: the connection goes on. */
    assert_int_equal(ops->write(p->client, lmr, local, UINT64_MAX - 8, key, 64), RG_ERR_INVALID);
    /* No local-write access on the local buffer for a read. */
    assert_int_equal(ops->read(p->client, lmr, local, rb, key, 10), RG_ERR_INVALID);
    /* The local side must lie inside its registration too. */
    assert_int_equal(ops->write(p->client, lmr, local + 8190, rb, key, 10), RG_ERR_INVALID);
    assert_int_equal(ops->mem_reg(p->client, NULL, 10, 0, &lmr), RG_ERR_INVALID);
    if (!is_rdma()) {
        assert_int_equal(ops->write(p->client, lmr, local, rb, key, 4097), RG_ERR_INVALID);
        assert_int_equal(ops->write(p->client, lmr, local, rb + 4000, key, 97), RG_ERR_INVALID);
        assert_int_equal(ops->write(p->client, lmr, local, rb - 1, key, 10), RG_ERR_INVALID);
        assert_int_equal(ops->write(p->client, lmr, local, rb, key + 1000, 10), RG_ERR_INVALID);
    }
    ops->mem_dereg(rmr);
    /* A region deregistered: its key is refused by the peer. */
    expect_remote_refusal(p, ops->write(p->client, lmr, local, rb, key, 10));
    ops->mem_dereg(lmr);
}

/* Each refusal by the peer on a connection of its own (rdma ends the connection each time). */
static void test_one_sided_remote_refusals(void **state)
{
    static uint8_t local[8192], remote[4096];
    uint64_t rb = (uint64_t)(uintptr_t)remote;
    const struct {
        int read;
        uint64_t raddr;
        uint32_t key_delta;
        size_t len;
    } cases[] = {{0, rb, 0, 4097},
                 {0, rb + 4000, 0, 97},
                 {0, rb - 1, 0, 10},
                 {0, rb, 1000, 10},
                 {1, rb, 0, 10}}; /* the last: no remote-read access */

    if (!is_rdma()) {
        print_message("covered by test_one_sided_refused on %s; skipping\n", ops->name);
        skip();
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct transport_mr *lmr, *rmr;
        void *st;
        pair_setup(&st);
        struct pair *p = st;
        assert_int_equal(
            ops->mem_reg(p->client, local, sizeof(local), TRANSPORT_ACCESS_LOCAL_WRITE, &lmr),
            RG_OK);
        assert_int_equal(
            ops->mem_reg(p->server, remote, sizeof(remote), TRANSPORT_ACCESS_REMOTE_WRITE, &rmr),
            RG_OK);
        uint32_t key = rmr->key + cases[i].key_delta;
        uint64_t ra = cases[i].raddr;
        rg_status_t got = cases[i].read ? ops->read(p->client, lmr, local, ra, key, cases[i].len)
                                        : ops->write(p->client, lmr, local, ra, key, cases[i].len);
        expect_remote_refusal(p, got);
        ops->mem_dereg(lmr);
        ops->mem_dereg(rmr);
        pair_teardown(&st);
    }
}

static void test_adopt_fd(void **state)
{
    struct pair *p = *state;
    struct transport_conn *adopted, *accepted;
    struct iovec iov = {"hello", 5};
    char buf[5];

    if (!is_tcp()) {
        print_message("transport_tcp_adopt_fd is tcp only; skipping\n");
        skip();
    }
    /* Detach the accepted side's socket by adopting a dup of it. */
    int fd = dup(transport_fd(p->server));
    assert_true(fd >= 0);
    assert_int_equal(transport_tcp_adopt_fd(fd, &adopted), RG_OK);
    assert_int_equal(transport_sendv(p->client, &iov, 1), RG_OK);
    assert_int_equal(transport_recv(adopted, buf, 5), RG_OK);
    assert_memory_equal(buf, "hello", 5);
    transport_close(adopted);
    assert_int_equal(transport_tcp_adopt_fd(-1, &accepted), RG_ERR_INVALID);
}

/* rdma: the session's TCP socket as the watch fd. Its peer closing ends the connection (a
 * receive returns RG_ERR_CLOSED at once); data arriving on it is a protocol error. */
static void test_watch_fd(void **state)
{
    struct pair *p = *state;
    int sv[2];
    char c;

    if (!is_rdma()) {
        print_message("the watch fd is rdma only; skipping\n");
        skip();
    }
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    transport_set_watch_fd(p->server, sv[0]);
    transport_set_watch_fd(p->client, sv[1]);
    assert_int_equal(write(sv[1], "x", 1), 1); /* the client side's peer "sends" on TCP */
    assert_int_equal(transport_recv(p->server, &c, 1), RG_ERR_PROTO);
    close(sv[0]); /* the client side's peer is gone */
    int64_t start = now_ms();
    assert_int_equal(transport_recv(p->client, &c, 1), RG_ERR_CLOSED);
    assert_true(now_ms() - start < 1000);
    close(sv[1]);
}

struct upgrader {
    const char *addr;
    const void *secret;
    size_t len;
    int ctl_fd;
    struct transport_conn *conn;
    rg_status_t status;
};

static void *upgrader_main(void *arg)
{
    struct upgrader *u = arg;
    struct transport_opts opts = {.connect_timeout_ms = 2000};

    u->status = transport_rdma_upgrade(u->addr, u->secret, u->len, u->ctl_fd, &opts, &u->conn);
    return NULL;
}

struct offer_waiter {
    struct transport_rdma_offer *offer;
    int ctl_fd;
    struct transport_conn *conn;
    rg_status_t status;
};

static void *offer_waiter_main(void *arg)
{
    struct offer_waiter *w = arg;
    w->status = transport_rdma_offer_accept(w->offer, w->ctl_fd, 5000, &w->conn);
    return NULL;
}

/* The TCP-to-RDMA upgrade: a connection without the offer's secret is rejected and the offer
 * keeps waiting; the right secret is accepted; data on TCP means the client stayed there. */
static void test_rdma_upgrade_secret(void **state)
{
    struct transport_listener *tl;
    struct transport_conn *tc, *ts, *rs = NULL;
    struct transport_rdma_offer offer;
    struct upgrader bad, good;
    uint8_t wrong[RDMA_SECRET_LEN] = {0};
    char addr[128], why[160];
    pthread_t t1, t2, tw;

    if (!is_rdma()) {
        print_message("the upgrade is rdma only; skipping\n");
        skip();
    }
    const struct transport_ops *rdma = ops;
    ops = &transport_tcp_ops; /* the session's TCP connection */
    tl = listen_any(addr, sizeof(addr));
    connect_accept(tl, addr, NULL, &tc, &ts);
    ops = rdma;
    assert_int_equal(transport_rdma_offer_open(transport_fd(ts), &offer, why, sizeof(why)), RG_OK);
    assert_true(strncmp(offer.addr, "127.0.0.1:", 10) == 0);
    bad = (struct upgrader){
        .addr = offer.addr, .secret = wrong, .len = sizeof(wrong), .ctl_fd = transport_fd(tc)};
    good = (struct upgrader){.addr = offer.addr,
                             .secret = offer.secret,
                             .len = sizeof(offer.secret),
                             .ctl_fd = transport_fd(tc)};
    struct offer_waiter w = {.offer = &offer, .ctl_fd = transport_fd(ts)};
    assert_int_equal(pthread_create(&tw, NULL, offer_waiter_main, &w), 0);
    assert_int_equal(pthread_create(&t1, NULL, upgrader_main, &bad), 0);
    pthread_join(t1, NULL);
    assert_int_equal(bad.status, RG_ERR_REFUSED); /* rejected; the offer keeps waiting */
    assert_int_equal(pthread_create(&t2, NULL, upgrader_main, &good), 0);
    pthread_join(t2, NULL);
    pthread_join(tw, NULL);
    assert_int_equal(w.status, RG_OK);
    rs = w.conn;
    assert_int_equal(good.status, RG_OK);
    struct iovec iov = {"up", 2};
    char buf[2];
    assert_int_equal(transport_sendv(good.conn, &iov, 1), RG_OK);
    assert_int_equal(transport_recv(rs, buf, 2), RG_OK);
    assert_memory_equal(buf, "up", 2);
    transport_close(good.conn);
    transport_close(rs);
    transport_rdma_offer_close(&offer);
    /* A client that goes on over TCP instead: the offer ends with RG_ERR_NOT_FOUND. */
    assert_int_equal(transport_rdma_offer_open(transport_fd(ts), &offer, why, sizeof(why)), RG_OK);
    assert_int_equal(transport_sendv(tc, &iov, 1), RG_OK);
    assert_int_equal(transport_rdma_offer_accept(&offer, transport_fd(ts), 3000, &rs),
                     RG_ERR_NOT_FOUND);
    transport_rdma_offer_close(&offer);
    transport_close(tc);
    transport_close(ts);
    transport_tcp_ops.listener_close(tl);
}

/* ---- the authenticated side listener (transport/side_listener.h), over each backend ---- */

#define SIDE_TAG_LEN 4

struct side_waiter {
    struct transport_side_listener *sl;
    int n, timeout_ms, watch_fd;
    struct transport_conn *conn[2];
    uint32_t tag[2];
    int taken;
    rg_status_t status;
    pthread_t tid;
};

static bool side_take(void *arg, struct transport_conn *conn, const uint8_t *tag)
{
    struct side_waiter *w = arg;

    if (tag != NULL)
        memcpy(&w->tag[w->taken], tag, SIDE_TAG_LEN);
    w->conn[w->taken++] = conn;
    return true;
}

static void *side_waiter_main(void *arg)
{
    struct side_waiter *w = arg;

    w->status = transport_side_accept(w->sl, w->n, w->timeout_ms, w->watch_fd, side_take, w);
    return NULL;
}

static void side_waiter_start(struct side_waiter *w, struct transport_side_listener *sl, int n,
                              int timeout_ms, int watch_fd)
{
    *w = (struct side_waiter){
        .sl = sl, .n = n, .timeout_ms = timeout_ms, .watch_fd = watch_fd, .status = RG_ERR_IO};
    assert_int_equal(pthread_create(&w->tid, NULL, side_waiter_main, w), 0);
}

static bool connect_secret(void)
{
    return (ops->caps & TRANSPORT_CAP_CONNECT_SECRET) != 0;
}

static struct transport_side_listener *side_open(int hello_ms)
{
    static int counter;
    struct transport_side_listener *sl = NULL;
    char addr[64];

    if (is_ip())
        snprintf(addr, sizeof(addr), "127.0.0.1:0");
    else
        snprintf(addr, sizeof(addr), "side-%d", counter++);
    assert_int_equal(
        transport_side_open(
            &(struct transport_side_params){.ops = ops,
                                            .addr = addr,
                                            .secret_len = 32,
                                            .tag_len = connect_secret() ? 0 : SIDE_TAG_LEN,
                                            .hello_ms = hello_ms,
                                            .what = "a test"},
            &sl),
        RG_OK);
    return sl;
}

/* Connect presenting secret (32 bytes) and tag the way the backend takes them: RG_OK, or the
 * connect's refusal (rdma checks the secret in the connection request). */
static rg_status_t side_connect(struct transport_side_listener *sl, const uint8_t *secret,
                                uint32_t tag, struct transport_conn **conn_p)
{
    struct transport_opts opts = {.connect_timeout_ms = 2000};
    uint8_t hello[32 + SIDE_TAG_LEN];
    struct iovec iov = {hello, sizeof(hello)};
    rg_status_t st;

    if (connect_secret())
        return transport_rdma_connect_pdata(transport_side_addr(sl), &opts, secret, 32, conn_p);
    memcpy(hello, secret, 32);
    memcpy(hello + 32, &tag, SIDE_TAG_LEN);
    if ((st = ops->connect(transport_side_addr(sl), &opts, conn_p)) == RG_OK &&
        (st = transport_sendv(*conn_p, &iov, 1)) != RG_OK)
        transport_close(*conn_p);
    return st;
}

/* A connection without the secret is refused (rdma: its request; else closed after its
 * hello) and the accept goes on; the right secret is taken, with its tag, and carries data. */
static void test_side_secret(void **state)
{
    struct transport_side_listener *sl = side_open(2000);
    const uint8_t *secret = transport_side_secret(sl);
    uint8_t wrong[32];
    struct transport_conn *bad = NULL, *good = NULL;
    struct side_waiter w;
    struct iovec iov = {"ok", 2};
    char buf[2];

    memcpy(wrong, secret, sizeof(wrong));
    wrong[31] ^= 1; /* only the last byte differs */
    side_waiter_start(&w, sl, 1, 10000, -1);
    if (connect_secret()) {
        assert_int_equal(side_connect(sl, wrong, 0, &bad), RG_ERR_REFUSED);
    } else {
        assert_int_equal(side_connect(sl, wrong, 1, &bad), RG_OK);
        assert_int_equal(transport_set_recv_idle(bad, 5000), RG_OK);  /* fail, never hang */
        assert_int_equal(transport_recv(bad, buf, 1), RG_ERR_CLOSED); /* closed by the listener */
        transport_close(bad);
    }
    assert_int_equal(side_connect(sl, secret, 7, &good), RG_OK);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_OK);
    assert_int_equal(w.taken, 1);
    if (!connect_secret())
        assert_int_equal(w.tag[0], 7);
    assert_int_equal(transport_sendv(good, &iov, 1), RG_OK);
    assert_int_equal(transport_recv(w.conn[0], buf, 2), RG_OK);
    assert_memory_equal(buf, "ok", 2);
    transport_close(good);
    transport_close(w.conn[0]);
    transport_side_close(sl);
}

/* The deadlines: an accept nobody comes to ends with RG_ERR_TIMEOUT; a connection that never
 * presents its secret is closed after hello_ms while the accept goes on, and the right one
 * that comes after it is taken. */
static void test_side_deadlines(void **state)
{
    struct transport_side_listener *sl = side_open(200);
    struct transport_conn *silent, *good;
    struct side_waiter w;
    char c;

    assert_int_equal(transport_side_accept(sl, 1, 300, -1, side_take, &w), RG_ERR_TIMEOUT);
    if (connect_secret()) { /* no stream before the connection: no hello to wait for */
        transport_side_close(sl);
        return;
    }
    side_waiter_start(&w, sl, 1, 60000, -1);
    assert_int_equal(ops->connect(transport_side_addr(sl), NULL, &silent), RG_OK);
    assert_int_equal(transport_set_recv_idle(silent, 10000), RG_OK); /* fail, never hang */
    assert_int_equal(transport_recv(silent, &c, 1), RG_ERR_CLOSED);  /* after its 200 ms */
    transport_close(silent);
    assert_int_equal(side_connect(sl, transport_side_secret(sl), 0, &good), RG_OK);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_OK);
    transport_close(good);
    transport_close(w.conn[0]);
    transport_side_close(sl);
}

/* More connections waiting to present their secret than are read at once: the listener reads
 * TRANSPORT_SIDE_PENDING_MAX, drops the silent ones at their deadline, and takes the right one
 * queued behind them. */
static void test_side_bounded_pending(void **state)
{
    struct transport_side_listener *sl;
    struct transport_conn *silent[TRANSPORT_SIDE_PENDING_MAX + 2], *good;
    struct side_waiter w;

    if (connect_secret()) {
        print_message("no stream before an rdma connection: nothing pending; skipping\n");
        skip();
    }
    sl = side_open(300);
    side_waiter_start(&w, sl, 1, 60000, -1);
    for (int i = 0; i < TRANSPORT_SIDE_PENDING_MAX + 2; i++)
        assert_int_equal(ops->connect(transport_side_addr(sl), NULL, &silent[i]), RG_OK);
    assert_int_equal(side_connect(sl, transport_side_secret(sl), 3, &good), RG_OK);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_OK);
    assert_int_equal(w.tag[0], 3);
    for (int i = 0; i < TRANSPORT_SIDE_PENDING_MAX + 2; i++)
        transport_close(silent[i]);
    transport_close(good);
    transport_close(w.conn[0]);
    transport_side_close(sl);
}

/* transport_side_cancel ends a waiting accept at once with RG_ERR_CLOSED; data on the watch fd
 * ends it with RG_ERR_NOT_FOUND, the watch fd's close with RG_ERR_CLOSED. */
static void test_side_cancel_and_watch(void **state)
{
    struct transport_side_listener *sl = side_open(2000);
    struct side_waiter w;
    int sv[2];

    side_waiter_start(&w, sl, 1, 60000, -1);
    transport_side_cancel(sl);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_ERR_CLOSED);
    transport_side_close(sl);

    sl = side_open(2000);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    side_waiter_start(&w, sl, 1, 60000, sv[0]);
    assert_int_equal(write(sv[1], "x", 1), 1);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_ERR_NOT_FOUND);
    close(sv[1]);
    side_waiter_start(&w, sl, 1, 60000, sv[0]);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_ERR_NOT_FOUND); /* the byte is still there, unread */
    assert_int_equal(read(sv[0], &(char){0}, 1), 1);
    side_waiter_start(&w, sl, 1, 60000, sv[0]);
    pthread_join(w.tid, NULL);
    assert_int_equal(w.status, RG_ERR_CLOSED);
    close(sv[0]);
    transport_side_close(sl);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_complete),
        cmocka_unit_test_setup_teardown(test_connect_accept, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_ping_pong, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_sendv_many_iovecs, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_big_transfer, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_both_directions, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_busy_poll_ping_pong, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_orderly_close, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_close_mid_message, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_unblocks_recv, pair_setup, pair_teardown),
        cmocka_unit_test(test_connect_fails_fast),
        cmocka_unit_test(test_connect_bad_address),
        cmocka_unit_test(test_io_timeout),
        cmocka_unit_test_setup_teardown(test_one_sided_round_trip, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_one_sided_refused, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_one_sided_dmabuf, pair_setup, pair_teardown),
        cmocka_unit_test(test_one_sided_remote_refusals),
        cmocka_unit_test_setup_teardown(test_adopt_fd, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_watch_fd, pair_setup, pair_teardown),
        cmocka_unit_test(test_rdma_upgrade_secret),
        cmocka_unit_test(test_side_secret),
        cmocka_unit_test(test_side_deadlines),
        cmocka_unit_test(test_side_bounded_pending),
        cmocka_unit_test(test_side_cancel_and_watch),
    };
    char group[64];

    if (argc != 2 || (ops = transport_find(argv[1])) == NULL) {
        fprintf(stderr, "usage: %s tcp|loop|rdma\n", argv[0]);
        return 2;
    }
    rg_log_set_callback(capture_log);
    snprintf(group, sizeof(group), "transport conformance over %s", ops->name);
    return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
