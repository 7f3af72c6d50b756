/* The authenticated side listener (transport/side_listener.h). */
#include "transport/side_listener.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/secret.h"

#define SIDE_POLL_MS 100 /* the longest one poll waits, so per-hello deadlines are kept */

struct transport_side_listener {
    const struct transport_ops *ops;
    struct transport_listener *listener;
    int cancel_fd; /* eventfd: transport_side_cancel */
    size_t secret_len, tag_len;
    int hello_ms;
    char addr[128];
    char what[96];
    uint8_t secret[TRANSPORT_SIDE_SECRET_MAX];
};

/* A stream connection that has not yet presented its secret and tag. */
struct side_hello {
    struct transport_conn *conn;
    int64_t deadline_ms;
    size_t got;
    uint8_t buf[TRANSPORT_SIDE_SECRET_MAX + TRANSPORT_SIDE_TAG_MAX];
};

static int64_t side_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

rg_status_t transport_side_open(const struct transport_side_params *p,
                                struct transport_side_listener **sl_p)
{
    const struct transport_ops *ops = p->ops != NULL ? p->ops : &transport_tcp_ops;
    bool in_request = (ops->caps & TRANSPORT_CAP_CONNECT_SECRET) != 0;
    struct transport_side_listener *sl;
    rg_status_t st;

    if (p->addr == NULL || p->secret_len == 0 || p->secret_len > TRANSPORT_SIDE_SECRET_MAX ||
        p->tag_len > TRANSPORT_SIDE_TAG_MAX || (in_request && p->tag_len != 0) ||
        (!in_request && p->hello_ms <= 0))
        return RG_ERR_INVALID;
    if ((sl = calloc(1, sizeof(*sl))) == NULL)
        return RG_ERR_NOMEM;
    sl->ops = ops;
    sl->secret_len = p->secret_len;
    sl->tag_len = p->tag_len;
    sl->hello_ms = p->hello_ms;
    snprintf(sl->what, sizeof(sl->what), "%s", p->what != NULL ? p->what : "a side");
    if ((sl->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rg_error("%s listener: eventfd: %m", sl->what);
        free(sl);
        return RG_ERR_IO;
    }
    if (p->secret != NULL)
        memcpy(sl->secret, p->secret, p->secret_len);
    else if (getrandom(sl->secret, p->secret_len, 0) != (ssize_t)p->secret_len) {
        rg_error("%s listener: no random secret: %m", sl->what);
        st = RG_ERR_IO;
        goto err_close_cancel;
    }
    if ((st = ops->listen(p->addr, &sl->listener)) != RG_OK)
        goto err_close_cancel;
    if ((st = ops->listener_addr(sl->listener, sl->addr, sizeof(sl->addr))) != RG_OK)
        goto err_close_listener;
    *sl_p = sl;
    return RG_OK;

err_close_listener:
    ops->listener_close(sl->listener);
err_close_cancel:
    close(sl->cancel_fd);
    memset(sl->secret, 0, sizeof(sl->secret));
    free(sl);
    return st;
}

const char *transport_side_addr(const struct transport_side_listener *sl)
{
    return sl->addr;
}

const uint8_t *transport_side_secret(const struct transport_side_listener *sl)
{
    return sl->secret;
}

static void side_refuse(struct transport_side_listener *sl, struct transport_conn *conn)
{
    rg_warn("%s connection without the session's secret; closed", sl->what);
    transport_close(conn);
}

/* Read what h's peer sent, without blocking. true when h is finished with (taken by the
 * caller, or closed); *taken_p counts those taken. */
static bool side_hello_read(struct transport_side_listener *sl, struct side_hello *h,
                            transport_side_take_fn take, void *arg, int *taken_p)
{
    size_t want = sl->secret_len + sl->tag_len;
    ssize_t r = recv(transport_fd(h->conn), h->buf + h->got, want - h->got, MSG_DONTWAIT);

    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (side_now_ms() < h->deadline_ms)
            return false;
        transport_close(h->conn); /* silent past its time */
        return true;
    }
    if (r > 0 && (h->got += (size_t)r) < want)
        return false;
    if (r <= 0) { /* gone before its hello */
        transport_close(h->conn);
        return true;
    }
    if (!rg_secret_equal(h->buf, sl->secret, sl->secret_len) ||
        !take(arg, h->conn, h->buf + sl->secret_len)) {
        side_refuse(sl, h->conn);
        return true;
    }
    (*taken_p)++;
    return true;
}

/* A connection request is waiting (CONNECT_SECRET backends): accept it if it carries the
 * secret (the backend rejects and logs one that does not). RG_OK, or a status that ends the
 * accept (anything but a refusal or a request that gave up). */
static rg_status_t side_accept_request(struct transport_side_listener *sl,
                                       transport_side_take_fn take, void *arg, int *taken_p)
{
    struct transport_conn *conn;
    rg_status_t st = sl->ops->accept_secret(sl->listener, sl->secret, sl->secret_len, &conn);

    if (st == RG_ERR_REFUSED || st == RG_ERR_TIMEOUT)
        return RG_OK;
    if (st != RG_OK)
        return st;
    if (!take(arg, conn, NULL)) {
        side_refuse(sl, conn);
        return RG_OK;
    }
    (*taken_p)++;
    return RG_OK;
}

/* What watch_fd says: RG_OK (nothing), RG_ERR_NOT_FOUND (data) or RG_ERR_CLOSED (closed). */
static rg_status_t side_watch(int fd, short revents)
{
    char b;

    if (revents == 0)
        return RG_OK;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0 ? RG_ERR_NOT_FOUND : RG_ERR_CLOSED;
}

rg_status_t transport_side_accept(struct transport_side_listener *sl, int n, int timeout_ms,
                                  int watch_fd, transport_side_take_fn take, void *arg)
{
    int64_t deadline = side_now_ms() + timeout_ms;
    struct side_hello pend[TRANSPORT_SIDE_PENDING_MAX];
    struct pollfd p[3 + TRANSPORT_SIDE_PENDING_MAX];
    bool in_request = (sl->ops->caps & TRANSPORT_CAP_CONNECT_SECRET) != 0;
    rg_status_t st = RG_OK;
    int npend = 0, taken = 0;

    while (st == RG_OK && taken < n) {
        int64_t left = deadline - side_now_ms();
        struct transport_conn *c;
        if (left <= 0) {
            st = RG_ERR_TIMEOUT;
            break;
        }
        p[0] = (struct pollfd){sl->ops->listener_fd(sl->listener),
                               npend < TRANSPORT_SIDE_PENDING_MAX ? POLLIN : 0, 0};
        p[1] = (struct pollfd){sl->cancel_fd, POLLIN, 0};
        p[2] = (struct pollfd){watch_fd, POLLIN, 0}; /* a negative fd is ignored */
        for (int i = 0; i < npend; i++)
            p[3 + i] = (struct pollfd){transport_fd(pend[i].conn), POLLIN, 0};
        if (poll(p, (nfds_t)(3 + npend), left < SIDE_POLL_MS ? (int)left : SIDE_POLL_MS) < 0 &&
            errno != EINTR) {
            rg_error("%s listener: poll: %m", sl->what);
            st = RG_ERR_IO;
            break;
        }
        if (p[1].revents != 0) {
            st = RG_ERR_CLOSED;
            break;
        }
        if (watch_fd >= 0 && (st = side_watch(watch_fd, p[2].revents)) != RG_OK)
            break;
        for (int i = npend - 1; i >= 0; i--)
            if (side_hello_read(sl, &pend[i], take, arg, &taken))
                pend[i] = pend[--npend];
        if (taken >= n || !(p[0].revents & POLLIN))
            continue;
        if (in_request)
            st = side_accept_request(sl, take, arg, &taken);
        else if (sl->ops->accept(sl->listener, &c) == RG_OK)
            pend[npend++] =
                (struct side_hello){.conn = c, .deadline_ms = side_now_ms() + sl->hello_ms};
    }
    for (int i = 0; i < npend; i++)
        transport_close(pend[i].conn);
    return st;
}

void transport_side_cancel(struct transport_side_listener *sl)
{
    uint64_t one = 1;

    if (write(sl->cancel_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        rg_warn("%s listener: cannot cancel its accept: %m", sl->what); /* never: the counter */
}

void transport_side_close(struct transport_side_listener *sl)
{
    if (sl == NULL)
        return;
    sl->ops->listener_close(sl->listener);
    close(sl->cancel_fd);
    memset(sl->secret, 0, sizeof(sl->secret));
    free(sl);
}
