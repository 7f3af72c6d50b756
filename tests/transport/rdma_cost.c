/* Per-message costs of a transport's byte stream, for docs/rdma-performance.md:
 *   rdma_cost BACKEND        (tcp | loop | rdma; rdma on tests/fakeverbs via run_fakeverbs.sh)
 * Prints: memcpy bandwidth of 64 KiB slot copies on this host; the sender thread's CPU time per
 * sendv of 64 B and of 64 KiB (all of it: transport, provider library and, on the fake, its
 * socket write); round trips of 64 B; and streaming throughput. On the fake every number
 * includes the fake NIC's thread hand-offs and socket calls, so it is an upper bound for the
 * transport's own cost, not a prediction of a fabric. */
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/transport.h"

static const struct transport_ops *ops;
static uint64_t (*fake_ns)(void); /* tests/fakeverbs: this thread's time inside the fake */

static double now_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct peer {
    struct transport_conn *conn;
    size_t msg, count;
    int echo;
    double cpu, in_fake; /* the receiving thread's CPU seconds, and its share inside the fake */
};

/* The other side: receive count messages of msg bytes, echoing each when asked. */
static void *peer_main(void *arg)
{
    struct peer *p = arg;
    uint8_t *buf = malloc(p->msg);
    double cpu = now_s(CLOCK_THREAD_CPUTIME_ID), in_fake = fake_ns != NULL ? (double)fake_ns() : 0;

    for (size_t i = 0; buf != NULL && i < p->count; i++) {
        struct iovec iov = {buf, p->msg};
        if (transport_recv(p->conn, buf, p->msg) != RG_OK ||
            (p->echo && transport_sendv(p->conn, &iov, 1) != RG_OK))
            break;
    }
    p->cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - cpu;
    p->in_fake = fake_ns != NULL ? ((double)fake_ns() - in_fake) * 1e-9 : 0;
    free(buf);
    return NULL;
}

static void memcpy_bandwidth(void)
{
    size_t big = 256u << 20, slot = 64u << 10, ring = 2u << 20;
    uint8_t *src = malloc(big), *dst = malloc(ring);
    double t;

    memset(src, 1, big);
    memset(dst, 0, ring);
    t = now_s(CLOCK_MONOTONIC);
    for (int rep = 0; rep < 4; rep++)
        for (size_t off = 0; off < big; off += slot)
            memcpy(dst + off % ring, src + off, slot);
    t = now_s(CLOCK_MONOTONIC) - t;
    printf("memcpy 64 KiB slots (256 MiB source, 2 MiB ring): %.1f GB/s\n", 4.0 * big / t / 1e9);
    free(src);
    free(dst);
}

/* Send count messages of msg bytes; the sender thread's CPU and wall time per message. */
static void stream(struct transport_conn *c, struct transport_conn *s, size_t msg, size_t count)
{
    struct peer p = {.conn = s, .msg = msg, .count = count};
    uint8_t *buf = calloc(1, msg);
    struct iovec iov = {buf, msg};
    pthread_t tid;
    double cpu, wall;

    double in_fake = fake_ns != NULL ? (double)fake_ns() : 0;

    pthread_create(&tid, NULL, peer_main, &p);
    cpu = now_s(CLOCK_THREAD_CPUTIME_ID);
    wall = now_s(CLOCK_MONOTONIC);
    for (size_t i = 0; i < count; i++)
        if (transport_sendv(c, &iov, 1) != RG_OK)
            break;
    cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - cpu;
    pthread_join(tid, NULL);
    wall = now_s(CLOCK_MONOTONIC) - wall;
    in_fake = fake_ns != NULL ? ((double)fake_ns() - in_fake) * 1e-9 : 0;
    printf("%s stream of %zu B messages: sender CPU %.2f us/msg (inside the fake provider "
           "%.2f, the rest %.2f), wall %.2f us/msg, %.2f GB/s\n",
           ops->name, msg, cpu / count * 1e6, in_fake / count * 1e6, (cpu - in_fake) / count * 1e6,
           wall / count * 1e6, msg * count / wall / 1e9);
    printf("%s   receiver CPU %.2f us/msg (inside the fake provider %.2f, the rest %.2f)\n",
           ops->name, p.cpu / count * 1e6, p.in_fake / count * 1e6,
           (p.cpu - p.in_fake) / count * 1e6);
    free(buf);
}

static void round_trips(struct transport_conn *c, struct transport_conn *s, size_t count)
{
    struct peer p = {.conn = s, .msg = 64, .count = count, .echo = 1};
    uint8_t buf[64] = {0};
    struct iovec iov = {buf, sizeof(buf)};
    pthread_t tid;
    double t;

    pthread_create(&tid, NULL, peer_main, &p);
    t = now_s(CLOCK_MONOTONIC);
    for (size_t i = 0; i < count; i++)
        if (transport_sendv(c, &iov, 1) != RG_OK || transport_recv(c, buf, sizeof(buf)) != RG_OK)
            break;
    t = now_s(CLOCK_MONOTONIC) - t;
    pthread_join(tid, NULL);
    printf("%s round trip of 64 B: %.1f us\n", ops->name, t / count * 1e6);
}

struct acceptor {
    struct transport_listener *l;
    struct transport_conn *conn;
};

static void *acceptor_main(void *arg)
{
    struct acceptor *a = arg;
    if (ops->accept(a->l, &a->conn) != RG_OK)
        a->conn = NULL;
    return NULL;
}

int main(int argc, char **argv)
{
    struct acceptor a = {0};
    struct transport_conn *c = NULL;
    char addr[128];
    pthread_t tid;

    if (argc != 2 || (ops = transport_find(argv[1])) == NULL) {
        fprintf(stderr, "usage: %s tcp|loop|rdma\n", argv[0]);
        return 2;
    }
    memcpy_bandwidth();
    if (ops->listen(strcmp(ops->name, "loop") ? "127.0.0.1:0" : "cost", &a.l) != RG_OK ||
        ops->listener_addr(a.l, addr, sizeof(addr)) != RG_OK)
        return 1;
    void *fake = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD); /* loaded by listen */
    if (fake != NULL)
        *(void **)&fake_ns = dlsym(fake, "fv_thread_ns_spent");
    pthread_create(&tid, NULL, acceptor_main, &a);
    if (ops->connect(addr, NULL, &c) != RG_OK)
        return 1;
    pthread_join(tid, NULL);
    if (a.conn == NULL)
        return 1;
    round_trips(c, a.conn, 20000);
    stream(c, a.conn, 64, 200000);
    stream(c, a.conn, 64u << 10, 20000);
    transport_close(c);
    transport_close(a.conn);
    ops->listener_close(a.l);
    return 0;
}
