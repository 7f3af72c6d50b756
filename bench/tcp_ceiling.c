/* The raw transport's ceiling between the same endpoints rgpu uses: ping-pong round trip of 8
 * bytes (median, p99) and bulk throughput each way, over rgpu's own tcp backend. The bulk runs
 * twice: tcp_send/tcp_recv move 1 GiB from or into a 1 GiB client buffer in 8 MiB writes, as a
 * 1 GiB memcpy through rgpu does (the memory is read or written once, from DRAM);
 * tcp_send_hot/tcp_recv_hot reuse one 8 MiB client buffer, which the caches may hold. The
 * server side uses one 8 MiB buffer in both, like the worker's staging.
 *   rgpu-bench-tcp server HOST:PORT     (serves until the client is done)
 *   rgpu-bench-tcp client HOST:PORT     (prints JSON lines like bench/micro.c) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/transport.h"

#define PINGS 5000
#define BULK  (1024ull << 20)
#define CHUNK (8u << 20)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Moves total bytes in CHUNK pieces through buf, which holds span bytes (CHUNK: one buffer
 * reused; total: each piece at its own offset). */
static int xfer(struct transport_conn *c, char *buf, size_t span, uint64_t total, int sending)
{
    for (uint64_t off = 0; off < total; off += CHUNK) {
        char *p = buf + off % span;
        struct iovec iov = {p, CHUNK};
        if ((sending ? transport_sendv(c, &iov, 1) : transport_recv(c, p, CHUNK)) != RG_OK)
            return -1;
    }
    return 0;
}

static int serve(struct transport_conn *c, char *buf)
{
    uint64_t v;
    struct iovec iov = {&v, sizeof(v)};

    for (int i = 0; i < PINGS; i++)
        if (transport_recv(c, &v, sizeof(v)) != RG_OK || transport_sendv(c, &iov, 1) != RG_OK)
            return 1;
    for (int round = 0; round < 2; round++) {
        if (xfer(c, buf, CHUNK, BULK, 0) != 0 || transport_sendv(c, &iov, 1) != RG_OK ||
            xfer(c, buf, CHUNK, BULK, 1) != 0)
            return 1;
    }
    return 0;
}

static void report(const char *name, double value, const char *unit)
{
    printf("{\"bench\": \"%s\", \"value\": %.3f, \"unit\": \"%s\"}\n", name, value, unit);
}

static int bulk(struct transport_conn *c, char *buf, size_t span, const char *suffix)
{
    char name[32];
    uint64_t x;
    double t = now_us();

    if (xfer(c, buf, span, BULK, 1) != 0 || transport_recv(c, &x, sizeof(x)) != RG_OK)
        return 1;
    snprintf(name, sizeof(name), "tcp_send%s", suffix);
    report(name, BULK / ((now_us() - t) / 1e6) / (1 << 30), "GiB/s");
    t = now_us();
    if (xfer(c, buf, span, BULK, 0) != 0)
        return 1;
    snprintf(name, sizeof(name), "tcp_recv%s", suffix);
    report(name, BULK / ((now_us() - t) / 1e6) / (1 << 30), "GiB/s");
    return 0;
}

static int measure(struct transport_conn *c, char *buf)
{
    static double v[PINGS];
    uint64_t x = 0;
    struct iovec iov = {&x, sizeof(x)};
    double t;

    for (int i = 0; i < PINGS; i++) {
        t = now_us();
        if (transport_sendv(c, &iov, 1) != RG_OK || transport_recv(c, &x, sizeof(x)) != RG_OK)
            return 1;
        v[i] = now_us() - t;
    }
    qsort(v, PINGS, sizeof(*v), cmp_double);
    report("tcp_rtt_median", v[PINGS / 2], "us");
    report("tcp_rtt_p99", v[PINGS * 99 / 100], "us");
    return bulk(c, buf, BULK, "") != 0 || bulk(c, buf, CHUNK, "_hot") != 0;
}

int main(int argc, char **argv)
{
    struct transport_listener *l;
    struct transport_conn *c;
    int client = argc == 3 && strcmp(argv[1], "client") == 0;
    char *buf = malloc(client ? BULK : CHUNK);
    int rc;

    if (buf != NULL) /* touched: no page faults nor shared zero pages in the measurement */
        memset(buf, 0x5a, client ? BULK : CHUNK);
    if (argc != 3 || buf == NULL) {
        fprintf(stderr, "usage: rgpu-bench-tcp server|client HOST:PORT\n");
        return 2;
    }
    if (strcmp(argv[1], "server") == 0) {
        if (transport_tcp_ops.listen(argv[2], &l) != RG_OK ||
            transport_tcp_ops.accept(l, &c) != RG_OK)
            return 1;
        rc = serve(c, buf);
    } else {
        if (transport_tcp_ops.connect(argv[2], NULL, &c) != RG_OK)
            return 1;
        rc = measure(c, buf);
    }
    transport_close(c);
    free(buf);
    return rc;
}
