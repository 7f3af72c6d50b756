#include "server/preauth.h"

#include <arpa/inet.h>
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "server/session_table.h"

/* Why a connection was dropped before its first frame (one summary line per kind). */
enum drop { DROP_TOTAL, DROP_PEER, DROP_DEADLINE, DROP_MALFORMED, DROP_NOMEM, DROP_KINDS };
static const char *const drop_text[DROP_KINDS] = {
    [DROP_TOTAL] = ("over max_pending (connections waiting for their first frame): the oldest "
                    "of the address holding the most was closed to make room"),
    [DROP_PEER] = "over max_pending_per_peer: that address's oldest was closed to make room",
    [DROP_DEADLINE] = "first frame not complete within handshake_timeout_ms",
    [DROP_MALFORMED] = "malformed first frame",
    [DROP_NOMEM] = "out of memory",
};
/* What a connection closed to make room hears (a Welcome refusal for load: a client tries again
 * after about this long, with backoff). */
#define BUSY_RETRY_MS 100
static const char *const busy_text[2] = {
    "the server is busy: too many connections are waiting for their hello (max_pending)",
    "too many connections from this address are waiting for their hello (max_pending_per_peer)",
};
#define SUMMARY_S 10

/* A peer address (IPv4 or IPv6, no port) and how many pending connections it holds. */
struct addr {
    uint8_t family, bytes[16];
};
struct addr_count {
    struct addr a;
    int n;
};

struct pending {
    struct srv_preauth *p;
    int fd;
    char peer[64], host[INET6_ADDRSTRLEN];
    struct addr addr;
    struct event *ev;
    uint64_t deadline_ns;
    size_t got;     /* bytes of frame[] received */
    bool checked;   /* the header was checked and frame[] sized for the message */
    uint8_t *frame; /* header, then message */
    struct pending *prev, *next;
};

struct srv_preauth {
    struct event_base *base;
    struct srv_preauth_limits lim;
    srv_preauth_frame_fn on_frame;
    void *arg;
    struct pending *head, *tail; /* newest first; tail the oldest */
    int n;
    struct addr_count *addrs; /* the addresses of the pending connections, naddrs of them */
    int naddrs;
    struct event *summary;
    uint64_t dropped[DROP_KINDS];
    bool logged[DROP_KINDS]; /* the first of each kind is logged at once */
};

static void drop_note(struct srv_preauth *p, enum drop why, const char *peer)
{
    if (!p->logged[why]) {
        p->logged[why] = true;
        rg_warn("closing %s before its hello: %s (later ones are counted every %d s)", peer,
                drop_text[why], SUMMARY_S);
        return;
    }
    p->dropped[why]++;
}

static void on_summary(evutil_socket_t fd, short what, void *arg)
{
    struct srv_preauth *p = arg;

    for (int k = 0; k < DROP_KINDS; k++) {
        if (p->dropped[k] != 0)
            rg_warn("closed %llu connection(s) before their hello in the last %d s: %s",
                    (unsigned long long)p->dropped[k], SUMMARY_S, drop_text[k]);
        p->dropped[k] = 0;
    }
}

static int addr_find(const struct srv_preauth *p, const struct addr *a)
{
    for (int i = 0; i < p->naddrs; i++)
        if (memcmp(&p->addrs[i].a, a, sizeof(*a)) == 0)
            return i;
    return -1;
}

/* Connections pending from address a. */
static int addr_held(const struct srv_preauth *p, const struct addr *a)
{
    int i = addr_find(p, a);

    return i < 0 ? 0 : p->addrs[i].n;
}

static void addr_add(struct srv_preauth *p, const struct addr *a)
{
    int i = addr_find(p, a);

    if (i < 0) { /* room: at most one entry per pending connection, max_pending of them */
        i = p->naddrs++;
        p->addrs[i] = (struct addr_count){.a = *a};
    }
    p->addrs[i].n++;
}

static void addr_drop(struct srv_preauth *p, const struct addr *a)
{
    int i = addr_find(p, a);

    if (i >= 0 && --p->addrs[i].n == 0)
        p->addrs[i] = p->addrs[--p->naddrs];
}

/* Close a connection nobody will serve: what it sent is read first (a close with unread data
 * sends a reset, which may reach the peer before the refusal written just before). */
static void close_drained(int fd)
{
    char sink[4096];

    for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
        ;
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void pending_free(struct pending *c, bool close_fd)
{
    struct srv_preauth *p = c->p;

    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        p->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        p->tail = c->prev;
    p->n--;
    addr_drop(p, &c->addr);
    event_free(c->ev);
    if (close_fd)
        close(c->fd);
    free(c->frame);
    free(c);
}

/* Close c to make room for a newer connection, telling its peer to try again. */
static void pending_evict(struct pending *c, enum drop why)
{
    Rgpu__Welcome w = RGPU__WELCOME__INIT;
    int fd = c->fd;

    w.proto_version = PROTO_VERSION;
    w.proto_minor = PROTO_VERSION_MINOR;
    w.status = CUDA_ERROR_NOT_PERMITTED;
    w.reason = (char *)busy_text[why == DROP_PEER];
    w.retry_after_ms = BUSY_RETRY_MS;
    drop_note(c->p, why, c->peer);
    srv_preauth_send(fd, PROTO_WELCOME, &w.base);
    pending_free(c, false);
    close_drained(fd);
}

/* Which pending connection makes room for a new one from address a, or NULL when there is room.
 * Over max_pending_per_peer: a's oldest. Over max_pending: the oldest of the addresses holding
 * the most. A many-address flood then loses its oldest connections first, which have had the
 * longest to send their first frame, while a client that sends its Hello at once (read at the
 * accept: pending_add) is served before its turn could come. */
static struct pending *victim(struct srv_preauth *p, const struct addr *a, enum drop *why_p)
{
    int most = 0;

    if (addr_held(p, a) >= p->lim.max_pending_per_peer) {
        *why_p = DROP_PEER;
        for (struct pending *c = p->tail; c != NULL; c = c->prev)
            if (memcmp(&c->addr, a, sizeof(*a)) == 0)
                return c;
    }
    if (p->n < p->lim.max_pending)
        return NULL;
    *why_p = DROP_TOTAL;
    for (int i = 0; i < p->naddrs; i++)
        most = p->addrs[i].n > most ? p->addrs[i].n : most;
    for (struct pending *c = p->tail; c != NULL; c = c->prev)
        if (addr_held(p, &c->addr) == most)
            return c;
    return p->tail;
}

/* The frame is whole: hand it to the hook. */
static void pending_done(struct pending *c)
{
    const struct proto_frame_hdr *hdr = (const struct proto_frame_hdr *)c->frame;
    struct srv_preauth_peer who = {.fd = c->fd, .peer = c->peer, .host = c->host};
    bool kept = c->p->on_frame(c->p->arg, &who, hdr, c->frame, c->got);

    pending_free(c, !kept);
}

/* The header arrived: check it and make room for the message. false: malformed. */
static bool header_ok(struct pending *c)
{
    struct proto_frame_hdr hdr;
    uint8_t *grown;

    memcpy(&hdr, c->frame, sizeof(hdr));
    if (hdr.magic != PROTO_MAGIC || hdr.bulk_len != 0 ||
        hdr.msg_len > SRV_PREAUTH_FRAME_MAX - sizeof(hdr))
        return false;
    if ((grown = realloc(c->frame, sizeof(hdr) + hdr.msg_len)) == NULL)
        return false;
    c->frame = grown;
    return true;
}

static size_t frame_want(const struct pending *c)
{
    const struct proto_frame_hdr *hdr = (const struct proto_frame_hdr *)c->frame;

    return c->got < sizeof(*hdr) ? sizeof(*hdr) : sizeof(*hdr) + hdr->msg_len;
}

static void arm(struct pending *c)
{
    uint64_t now = srv_now_ns(), left = c->deadline_ns > now ? c->deadline_ns - now : 0;
    struct timeval tv = {(time_t)(left / 1000000000u), (suseconds_t)(left % 1000000000u / 1000)};

    event_add(c->ev, &tv);
}

/* Read what c's peer has sent; hand the frame on once whole, else wait for more. */
static void pending_read(struct pending *c)
{
    for (;;) {
        size_t want = frame_want(c);
        ssize_t n = recv(c->fd, c->frame + c->got, want - c->got, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            rg_debug("%s closed the connection before its hello", c->peer);
            pending_free(c, true);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            arm(c);
            return;
        }
        c->got += (size_t)n;
        if (c->got < sizeof(struct proto_frame_hdr))
            continue;
        if (!c->checked && !(c->checked = header_ok(c))) {
            drop_note(c->p, DROP_MALFORMED, c->peer);
            pending_free(c, true);
            return;
        }
        if (c->got == frame_want(c)) {
            pending_done(c);
            return;
        }
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct pending *c = arg;

    if (what & EV_TIMEOUT) {
        drop_note(c->p, DROP_DEADLINE, c->peer);
        pending_free(c, true);
        return;
    }
    pending_read(c);
}

static void peer_names(const struct sockaddr_storage *ss, char *peer, size_t plen, char *host,
                       size_t hlen, struct addr *a)
{
    int port = 0;

    memset(a, 0, sizeof(*a));
    snprintf(host, hlen, "?");
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, host, (socklen_t)hlen);
        port = ntohs(sin->sin_port);
        a->family = 4;
        memcpy(a->bytes, &sin->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, (socklen_t)hlen);
        port = ntohs(sin6->sin6_port);
        a->family = 6;
        memcpy(a->bytes, &sin6->sin6_addr, 16);
    }
    snprintf(peer, plen, "%s:%d", host, port);
}

/* A new connection: make room if a limit says so, then read its first frame if it is here
 * already, else wait for it. */
static void pending_add(struct srv_preauth *p, int fd, const struct sockaddr_storage *ss)
{
    struct pending *c = calloc(1, sizeof(*c)), *old;
    enum drop why = DROP_TOTAL;

    if (c == NULL || (c->frame = malloc(sizeof(struct proto_frame_hdr))) == NULL) {
        drop_note(p, DROP_NOMEM, "a new connection");
        close(fd);
        free(c);
        return;
    }
    peer_names(ss, c->peer, sizeof(c->peer), c->host, sizeof(c->host), &c->addr);
    while ((old = victim(p, &c->addr, &why)) != NULL)
        pending_evict(old, why);
    c->p = p;
    c->fd = fd;
    c->deadline_ns = srv_now_ns() + (uint64_t)p->lim.handshake_ms * 1000000u;
    c->ev = event_new(p->base, fd, EV_READ, on_readable, c);
    c->next = p->head;
    if (p->head != NULL)
        p->head->prev = c;
    else
        p->tail = c;
    p->head = c;
    p->n++;
    addr_add(p, &c->addr);
    pending_read(c);
}

rg_status_t srv_preauth_accept(struct srv_preauth *p, int lfd)
{
    /* At most batch at a time, then other events run: the pending connections' reads among
     * them, so that one burst of new connections cannot push out one whose first frame waits to
     * be read. */
    int batch = p->lim.max_pending / 4;

    batch = batch < 1 ? 1 : batch > 256 ? 256 : batch;
    for (int i = 0; i < batch; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            pending_add(p, fd, &ss);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return RG_OK;
        rg_error("accept on the session port failed: %m");
        return RG_ERR_IO;
    }
    return RG_OK;
}

int srv_preauth_pending(const struct srv_preauth *p)
{
    return p->n;
}

rg_status_t srv_preauth_create(struct event_base *base, const struct srv_preauth_limits *limits,
                               srv_preauth_frame_fn on_frame, void *arg, struct srv_preauth **p_p)
{
    struct srv_preauth *p = calloc(1, sizeof(*p));
    struct timeval every = {SUMMARY_S, 0};

    if (p == NULL)
        return RG_ERR_NOMEM;
    p->base = base;
    p->lim = *limits;
    if (p->lim.max_pending < 1)
        p->lim.max_pending = 1;
    if (p->lim.max_pending_per_peer < 1)
        p->lim.max_pending_per_peer = 1;
    if ((p->addrs = calloc((size_t)p->lim.max_pending + 1, sizeof(*p->addrs))) == NULL) {
        free(p);
        return RG_ERR_NOMEM;
    }
    p->on_frame = on_frame;
    p->arg = arg;
    p->summary = event_new(base, -1, EV_PERSIST, on_summary, p);
    event_add(p->summary, &every);
    *p_p = p;
    return RG_OK;
}

void srv_preauth_destroy(struct srv_preauth *p)
{
    if (p == NULL)
        return;
    while (p->head != NULL)
        pending_free(p->head, true);
    event_free(p->summary);
    free(p->addrs);
    free(p);
}

void srv_preauth_send(int fd, enum proto_frame_type type, const ProtobufCMessage *msg)
{
    uint8_t buf[4096];
    size_t len = proto_frame_pack(buf, sizeof(buf), type, 0, msg, 0);

    if (len > 0 && send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        rg_debug("sending a refusal failed: %m");
}
