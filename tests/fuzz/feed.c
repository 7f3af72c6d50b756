/* fuzz_feed (tests/fuzz/fuzz.h): bytes into a socket from a thread, replies drained. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

/* Write what is to be read while draining what comes back (a peer that replies while we
 * still write must never block us both), then drain until the other end closes. */
static void *feed_main(void *arg)
{
    struct fuzz_feed *f = arg;
    static uint8_t sink[1 << 16];
    size_t off = 0, total = f->head_len + f->len;
    bool writing = true;

    fcntl(f->fds[0], F_SETFL, fcntl(f->fds[0], F_GETFL) | O_NONBLOCK);
    for (;;) {
        struct pollfd p = {f->fds[0], POLLIN | (writing ? POLLOUT : 0), 0};
        if (writing && off == total) {
            shutdown(f->fds[0], SHUT_WR);
            writing = false;
            continue;
        }
        if (poll(&p, 1, -1) < 0)
            return NULL;
        if (p.revents & POLLOUT) {
            const uint8_t *src = off < f->head_len ? f->head + off : f->data + (off - f->head_len);
            size_t n = off < f->head_len ? f->head_len - off : total - off;
            ssize_t w = send(f->fds[0], src, n, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && errno != EAGAIN)
                writing = false, off = total; /* the peer closed: stop writing */
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(f->fds[0], sink, sizeof(sink));
            if (r == 0 || (r < 0 && errno != EAGAIN))
                return NULL;
        }
    }
}

/* A connected pair of TCP sockets on the loopback (the transport sets TCP options on them). */
static int tcp_pair(int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;

    fds[0] = fds[1] = -1;
    if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
        getsockname(l, (struct sockaddr *)&a, &alen) == 0 &&
        (fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        connect(fds[0], (struct sockaddr *)&a, sizeof(a)) == 0 &&
        (fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        rc = 0;
    if (rc != 0 && fds[0] >= 0)
        close(fds[0]);
    if (l >= 0)
        close(l);
    return rc;
}

int fuzz_feed_start(struct fuzz_feed *f, const void *head, size_t head_len, const uint8_t *data,
                    size_t len)
{
    pthread_t *t = malloc(sizeof(*t));

    f->head = head, f->head_len = head_len, f->data = data, f->len = len;
    if (t == NULL || tcp_pair(f->fds) != 0) {
        free(t);
        return -1;
    }
    if (pthread_create(t, NULL, feed_main, f) != 0) {
        close(f->fds[0]);
        close(f->fds[1]);
        free(t);
        return -1;
    }
    f->thread = t;
    return 0;
}

void fuzz_feed_end(struct fuzz_feed *f)
{
    pthread_join(*(pthread_t *)f->thread, NULL);
    free(f->thread);
    close(f->fds[0]);
}
