/* rgpu-bench-pool-fake: many pool members in one process, answering probes only
 * (bench/pool_scale.sh).
 *
 *   rgpu-bench-pool-fake --count N --port P --hosts FILE --name NAME [--slow K --slow-ms D]
 *                        [--full F]
 *
 * Listens on N loopback addresses 127.1.x.y, all on port P, and writes "ADDR NAME" lines to
 * FILE (a hosts file the bench mounts over /etc/hosts in a mount namespace of its own, so that
 * the pool entry NAME:P resolves to the N members, as a DNS name of a real pool does). Every
 * connection gets, for its Probe, a ProbeReply as a gpu-server's (one 80 GiB GPU, a load that
 * differs from member to member, "would admit"; members whose index is below F: "would not
 * admit"); member K answers D ms late (D < 0: never). Sessions are not served: this measures the
 * probe and the placement alone. SIGTERM or SIGINT: prints "probes N" (those answered) and exits.
 * One thread, epoll; the process raises its open-file limit to the hard limit. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"

#define GIB (1ull << 30)

struct conn {
    int fd;
    int member;
    uint8_t hdr[sizeof(struct proto_frame_hdr)];
    size_t have;   /* header bytes read */
    uint64_t skip; /* message bytes still to drop */
    double due;    /* answer at this time (ms), 0: not yet due */
    struct conn *next_late;
};

static volatile sig_atomic_t stop;
static uint64_t answered;
static uint8_t **frames; /* per member: its ProbeReply frame */
static size_t *frame_len;

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void member_addr(int i, char *buf, size_t len)
{
    snprintf(buf, len, "127.1.%d.%d", i / 250, i % 250 + 1);
}

static int make_frame(int i, int full)
{
    Rgpu__ProbeReply r = RGPU__PROBE_REPLY__INIT;
    Rgpu__ProbeGpu g = RGPU__PROBE_GPU__INIT, *gp = &g;
    char name[32];
    uint8_t buf[1024];
    size_t n;

    snprintf(name, sizeof(name), "fake-%d", i);
    g.index = 0;
    g.name = "fake 80 GiB";
    g.total_mem = 80 * GIB;
    g.available = (uint64_t)(80 - (i * 37) % 64) * GIB; /* 16..80 GiB left */
    g.sessions = (uint32_t)((i * 13) % 7);
    g.utilization = (double)((i * 29) % 100) / 100.0;
    r.proto_version = PROTO_VERSION;
    r.proto_minor = PROTO_VERSION_MINOR;
    r.server_name = name;
    r.n_gpus = 1;
    r.gpus = &gp;
    r.admit = i >= full;
    r.why_not = i >= full ? "" : "insufficient GPU memory: the fake member is full";
    n = proto_frame_pack(buf, sizeof(buf), PROTO_PROBE_REPLY, 0, &r.base, 0);
    if (n == 0 || (frames[i] = malloc(n)) == NULL)
        return -1;
    memcpy(frames[i], buf, n);
    frame_len[i] = n;
    return 0;
}

static void conn_close(int ep, struct conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

static void answer(struct conn *c)
{
    if (send(c->fd, frames[c->member], frame_len[c->member], MSG_NOSIGNAL) ==
        (ssize_t)frame_len[c->member])
        answered++;
}

int main(int argc, char **argv)
{
    int count = 0, port = 0, slow = -1, slow_ms = 0, full = 0, ep, *lfd;
    const char *hosts = NULL, *name = "pool-fake";
    struct rlimit rl;
    struct conn *late = NULL;
    FILE *hf;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--count") == 0)
            count = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--hosts") == 0)
            hosts = argv[i + 1];
        else if (strcmp(argv[i], "--name") == 0)
            name = argv[i + 1];
        else if (strcmp(argv[i], "--slow") == 0)
            slow = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--slow-ms") == 0)
            slow_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--full") == 0)
            full = atoi(argv[i + 1]);
    }
    if (count < 1 || count > 60000 || port < 1 || hosts == NULL) {
        fprintf(stderr, "usage: rgpu-bench-pool-fake --count N --port P --hosts FILE "
                        "[--name NAME] [--slow K --slow-ms D] [--full F]\n");
        return 2;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    frames = calloc((size_t)count, sizeof(*frames));
    frame_len = calloc((size_t)count, sizeof(*frame_len));
    lfd = calloc((size_t)count, sizeof(*lfd));
    if (frames == NULL || frame_len == NULL || lfd == NULL || (ep = epoll_create1(0)) < 0 ||
        (hf = fopen(hosts, "w")) == NULL)
        return 1;
    for (int i = 0; i < count; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        struct epoll_event ev = {.events = EPOLLIN};
        char ip[32];
        int one = 1;

        member_addr(i, ip, sizeof(ip));
        inet_pton(AF_INET, ip, &sa.sin_addr);
        if (make_frame(i, full) != 0 ||
            (lfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) < 0 ||
            setsockopt(lfd[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
            bind(lfd[i], (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd[i], 512) != 0) {
            fprintf(stderr, "member %d (%s:%d): %s\n", i, ip, port, strerror(errno));
            return 1;
        }
        ev.data.u64 = (uint64_t)i; /* listeners: the member index; connections: a pointer | 1<<63 */
        epoll_ctl(ep, EPOLL_CTL_ADD, lfd[i], &ev);
        fprintf(hf, "%s %s\n", ip, name);
    }
    fclose(hf);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    printf("listening %d\n", count);
    fflush(stdout);
    while (!stop) {
        struct epoll_event evs[256];
        int n;
        double t = now_ms(), next = 0;
        int wait;

        for (struct conn *c = late; c; c = c->next_late)
            if (next == 0 || c->due < next)
                next = c->due;
        wait = late ? (int)(next - t > 0 ? next - t + 1 : 0) : 1000;
        n = epoll_wait(ep, evs, 256, wait);

        for (struct conn **pp = &late; *pp;) { /* the slow member's answers that are due */
            struct conn *c = *pp;
            if (c->due <= now_ms()) {
                *pp = c->next_late;
                answer(c);
                c->due = 0;
            } else {
                pp = &c->next_late;
            }
        }
        for (int k = 0; k < n; k++) {
            if (!(evs[k].data.u64 >> 63)) { /* a listener: accept */
                int member = (int)evs[k].data.u64, fd;
                while ((fd = accept4(lfd[member], NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    struct conn *c = calloc(1, sizeof(*c));
                    struct epoll_event ev = {.events = EPOLLIN};
                    int one = 1;
                    if (c == NULL) {
                        close(fd);
                        continue;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    c->fd = fd;
                    c->member = member;
                    ev.data.u64 = (uint64_t)(uintptr_t)c | (1ull << 63);
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            struct conn *c = (struct conn *)(uintptr_t)(evs[k].data.u64 & ~(1ull << 63));
            uint8_t buf[4096];
            ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                for (struct conn **pp = &late; *pp; pp = &(*pp)->next_late)
                    if (*pp == c) {
                        *pp = c->next_late;
                        break;
                    }
                conn_close(ep, c);
                continue;
            }
            for (ssize_t off = 0; off < r;) {
                if (c->have < sizeof(c->hdr)) {
                    size_t take = sizeof(c->hdr) - c->have;
                    if (take > (size_t)(r - off))
                        take = (size_t)(r - off);
                    memcpy(c->hdr + c->have, buf + off, take);
                    c->have += take;
                    off += (ssize_t)take;
                    if (c->have == sizeof(c->hdr)) {
                        struct proto_frame_hdr h;
                        memcpy(&h, c->hdr, sizeof(h));
                        c->skip = h.msg_len + h.bulk_len;
                    }
                    continue;
                }
                size_t drop = c->skip < (uint64_t)(r - off) ? (size_t)c->skip : (size_t)(r - off);
                c->skip -= drop;
                off += (ssize_t)drop;
                if (c->skip == 0)
                    break;
            }
            if (c->have == sizeof(c->hdr) && c->skip == 0 && c->due == 0) {
                c->have = 0; /* one answer per frame */
                if (c->member == slow && slow_ms < 0) {
                    c->due = -1; /* never */
                } else if (c->member == slow) {
                    c->due = now_ms() + slow_ms;
                    c->next_late = late;
                    late = c;
                } else {
                    answer(c);
                }
            }
        }
    }
    printf("probes %llu\n", (unsigned long long)answered);
    return 0;
}
