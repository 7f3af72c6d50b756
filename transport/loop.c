/* In-process loopback backend for tests: named listeners in a process-wide registry, each
 * connection an AF_UNIX socketpair. It also offers one-sided memory (a process-wide table of
 * registered regions, copied with memcpy), so the suite exercises the API the RDMA backend
 * offers with the same checks: the key must exist, the range must lie inside the region and the
 * region's access must allow the operation. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/sock.h"

#define LOOP_NAME_MAX 64

struct loop_pending {
    struct loop_pending *next;
    int fd;
};

struct loop_listener {
    struct transport_listener super;
    struct loop_listener *next;       /* registry link */
    struct loop_pending *head, *tail; /* queued connections, oldest first */
    int efd;                          /* eventfd (semaphore): count of queued connections */
    char name[LOOP_NAME_MAX];
};

struct loop_mr {
    struct transport_mr super;
    struct loop_mr *next;
    unsigned access;
};

static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER; /* guards all below */
static struct loop_listener *loop_listeners;
static struct loop_mr *loop_mrs;
static uint32_t loop_next_key = 1;

static struct loop_listener *loop_listener_of(struct transport_listener *l)
{
    return (struct loop_listener *)((char *)l - offsetof(struct loop_listener, super));
}

static struct loop_mr *loop_mr_of(struct transport_mr *mr)
{
    return (struct loop_mr *)((char *)mr - offsetof(struct loop_mr, super));
}

/* Caller holds loop_lock. */
static struct loop_listener *loop_find_listener(const char *name)
{
    for (struct loop_listener *ll = loop_listeners; ll != NULL; ll = ll->next)
        if (strcmp(ll->name, name) == 0)
            return ll;
    return NULL;
}

static rg_status_t loop_listen(const char *addr, struct transport_listener **listener_p)
{
    struct loop_listener *ll;
    rg_status_t status = RG_OK;

    if (addr == NULL || *addr == '\0' || strlen(addr) >= LOOP_NAME_MAX)
        return RG_ERR_INVALID;
    ll = calloc(1, sizeof(*ll));
    if (ll == NULL)
        return RG_ERR_NOMEM;
    ll->super.ops = &transport_loop_ops;
    snprintf(ll->name, sizeof(ll->name), "%s", addr);
    ll->efd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ll->efd < 0) {
        rg_error("listen on loop:%s failed: eventfd: %s", addr, strerror(errno));
        free(ll);
        return RG_ERR_IO;
    }
    pthread_mutex_lock(&loop_lock);
    if (loop_find_listener(addr) != NULL) {
        status = RG_ERR_BUSY;
    } else {
        ll->next = loop_listeners;
        loop_listeners = ll;
    }
    pthread_mutex_unlock(&loop_lock);
    if (status != RG_OK) {
        rg_error("listen on loop:%s failed: name in use", addr);
        close(ll->efd);
        free(ll);
        return status;
    }
    *listener_p = &ll->super;
    return RG_OK;
}

/* Queue fd on the listener named addr; caller holds loop_lock. */
static rg_status_t loop_enqueue(const char *addr, int fd)
{
    struct loop_listener *ll = loop_find_listener(addr);
    struct loop_pending *p;
    uint64_t one = 1;

    if (ll == NULL) {
        rg_warn("connect to loop:%s failed: no listener of that name", addr);
        return RG_ERR_REFUSED;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return RG_ERR_NOMEM;
    if (write(ll->efd, &one, sizeof(one)) != sizeof(one)) {
        rg_warn("connect to loop:%s failed: eventfd: %s", addr, strerror(errno));
        free(p);
        return RG_ERR_IO;
    }
    p->fd = fd;
    if (ll->tail != NULL)
        ll->tail->next = p;
    else
        ll->head = p;
    ll->tail = p;
    return RG_OK;
}

static rg_status_t loop_connect(const char *addr, const struct transport_opts *opts,
                                struct transport_conn **conn_p)
{
    struct transport_conn *conn;
    char peer[TRANSPORT_PEER_MAX];
    rg_status_t status;
    int sv[2];

    if (addr == NULL || *addr == '\0')
        return RG_ERR_INVALID;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        rg_warn("connect to loop:%s failed: socketpair: %s", addr, strerror(errno));
        return RG_ERR_IO;
    }
    snprintf(peer, sizeof(peer), "loop:%s", addr);
    status = transport_sock_set_timeout(sv[0], opts != NULL ? opts->io_timeout_ms : 0, peer);
    if (status != RG_OK)
        goto err_close;
    status = transport_sock_conn_new(&transport_loop_ops, sv[0], peer, &conn);
    if (status != RG_OK)
        goto err_close;
    pthread_mutex_lock(&loop_lock);
    status = loop_enqueue(addr, sv[1]);
    pthread_mutex_unlock(&loop_lock);
    if (status != RG_OK) {
        transport_sock_close(conn);
        close(sv[1]);
        return status;
    }
    *conn_p = conn;
    return RG_OK;

err_close:
    close(sv[0]);
    close(sv[1]);
    return status;
}

static rg_status_t loop_accept(struct transport_listener *listener, struct transport_conn **conn_p)
{
    struct loop_listener *ll = loop_listener_of(listener);
    struct loop_pending *p;
    char peer[TRANSPORT_PEER_MAX];
    uint64_t count;
    rg_status_t status;
    int fd;

    /* Blocks until a connection is queued; each read takes one (semaphore mode). */
    while (read(ll->efd, &count, sizeof(count)) != sizeof(count)) {
        if (errno != EINTR) {
            rg_error("accept on loop:%s failed: %s", ll->name, strerror(errno));
            return RG_ERR_IO;
        }
    }
    pthread_mutex_lock(&loop_lock);
    p = ll->head;
    ll->head = p->next;
    if (ll->head == NULL)
        ll->tail = NULL;
    pthread_mutex_unlock(&loop_lock);
    fd = p->fd;
    free(p);
    snprintf(peer, sizeof(peer), "loop:%s (accepted)", ll->name);
    status = transport_sock_conn_new(&transport_loop_ops, fd, peer, conn_p);
    if (status != RG_OK)
        close(fd);
    return status;
}

static int loop_listener_fd(struct transport_listener *listener)
{
    return loop_listener_of(listener)->efd;
}

static rg_status_t loop_listener_addr(struct transport_listener *listener, char *buf, size_t len)
{
    const char *name = loop_listener_of(listener)->name;

    if (strlen(name) + 1 > len)
        return RG_ERR_INVALID;
    memcpy(buf, name, strlen(name) + 1);
    return RG_OK;
}

static void loop_listener_close(struct transport_listener *listener)
{
    struct loop_listener *ll, **pp;

    if (listener == NULL)
        return;
    ll = loop_listener_of(listener);
    pthread_mutex_lock(&loop_lock);
    for (pp = &loop_listeners; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ll) {
            *pp = ll->next;
            break;
        }
    }
    pthread_mutex_unlock(&loop_lock);
    /* Unaccepted connections see end of stream, like a closed tcp listener's backlog. */
    while (ll->head != NULL) {
        struct loop_pending *p = ll->head;
        ll->head = p->next;
        close(p->fd);
        free(p);
    }
    close(ll->efd);
    free(ll);
}

#define LOOP_ACCESS_ALL                                                                            \
    (TRANSPORT_ACCESS_LOCAL_WRITE | TRANSPORT_ACCESS_REMOTE_READ | TRANSPORT_ACCESS_REMOTE_WRITE)

static rg_status_t loop_mem_reg(struct transport_conn *conn, void *addr, size_t len,
                                unsigned access, struct transport_mr **mr_p)
{
    struct loop_mr *lm;

    if (addr == NULL || len == 0 || (access & ~(unsigned)LOOP_ACCESS_ALL) != 0)
        return RG_ERR_INVALID;
    lm = calloc(1, sizeof(*lm));
    if (lm == NULL)
        return RG_ERR_NOMEM;
    lm->super.ops = &transport_loop_ops;
    lm->super.addr = addr;
    lm->super.len = len;
    lm->access = access;
    pthread_mutex_lock(&loop_lock);
    lm->super.key = loop_next_key++;
    if (loop_next_key == 0) /* 0 is never a valid key */
        loop_next_key = 1;
    lm->next = loop_mrs;
    loop_mrs = lm;
    pthread_mutex_unlock(&loop_lock);
    *mr_p = &lm->super;
    return RG_OK;
}

static void loop_mem_dereg(struct transport_mr *mr)
{
    struct loop_mr *lm, **pp;

    if (mr == NULL)
        return;
    lm = loop_mr_of(mr);
    pthread_mutex_lock(&loop_lock);
    for (pp = &loop_mrs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == lm) {
            *pp = lm->next;
            break;
        }
    }
    pthread_mutex_unlock(&loop_lock);
    free(lm);
}

/* Does [addr, addr+len) lie inside the region? Written so that no sum can overflow. */
static int loop_in_region(const struct transport_mr *mr, uint64_t addr, size_t len)
{
    uint64_t base = (uint64_t)(uintptr_t)mr->addr;

    return addr >= base && addr - base <= mr->len && len <= mr->len - (addr - base);
}

/* Find the peer's region by key and check range and access; caller holds loop_lock. */
static struct loop_mr *loop_find_remote(uint64_t raddr, uint32_t rkey, size_t len, unsigned need)
{
    for (struct loop_mr *lm = loop_mrs; lm != NULL; lm = lm->next)
        if (lm->super.key == rkey)
            return loop_in_region(&lm->super, raddr, len) && (lm->access & need) == need ? lm
                                                                                         : NULL;
    return NULL;
}

/* The local region mr if it is one of ours, registered and live, covering [addr, addr+len)
 * with local write access if write; caller holds loop_lock. */
static struct loop_mr *loop_find_local(const struct transport_mr *mr, uint64_t addr, size_t len,
                                       int write)
{
    for (struct loop_mr *lm = loop_mrs; lm != NULL; lm = lm->next) {
        if (&lm->super != mr)
            continue;
        if (!loop_in_region(mr, addr, len) ||
            (write && !(lm->access & TRANSPORT_ACCESS_LOCAL_WRITE)))
            return NULL;
        return lm;
    }
    return NULL;
}

/* One-sided copy; to_remote selects write (local -> remote) or read (remote -> local). */
static rg_status_t loop_copy(struct transport_mr *local, void *laddr, uint64_t raddr, uint32_t rkey,
                             size_t len, int to_remote)
{
    unsigned need = to_remote ? TRANSPORT_ACCESS_REMOTE_WRITE : TRANSPORT_ACCESS_REMOTE_READ;
    rg_status_t status = RG_OK;

    pthread_mutex_lock(&loop_lock);
    if (loop_find_local(local, (uint64_t)(uintptr_t)laddr, len, !to_remote) == NULL) {
        pthread_mutex_unlock(&loop_lock);
        rg_error("one-sided %s refused: local buffer %p+%zu not registered for it",
                 to_remote ? "write" : "read", laddr, len);
        return RG_ERR_INVALID;
    }
    if (loop_find_remote(raddr, rkey, len, need) == NULL) {
        status = RG_ERR_INVALID;
    } else if (to_remote) {
        memmove((void *)(uintptr_t)raddr, laddr, len);
    } else {
        memmove(laddr, (const void *)(uintptr_t)raddr, len);
    }
    pthread_mutex_unlock(&loop_lock);
    if (status != RG_OK)
        rg_error("one-sided %s refused: remote 0x%llx+%zu key %u is not a registered region "
                 "with that access",
                 to_remote ? "write" : "read", (unsigned long long)raddr, len, rkey);
    return status;
}

static rg_status_t loop_write(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                              uint64_t raddr, uint32_t rkey, size_t len)
{
    return loop_copy(local, laddr, raddr, rkey, len, 1);
}

static rg_status_t loop_read(struct transport_conn *conn, struct transport_mr *local, void *laddr,
                             uint64_t raddr, uint32_t rkey, size_t len)
{
    return loop_copy(local, laddr, raddr, rkey, len, 0);
}

const struct transport_ops transport_loop_ops = {
    .name = "loop",
    .caps = TRANSPORT_CAP_BUSY_POLL | TRANSPORT_CAP_ONE_SIDED,
    .connect = loop_connect,
    .listen = loop_listen,
    .accept = loop_accept,
    .accept_secret = transport_noaccept_secret,
    .listener_fd = loop_listener_fd,
    .listener_addr = loop_listener_addr,
    .listener_close = loop_listener_close,
    .sendv = transport_sock_sendv,
    .recv = transport_sock_recv,
    .fd = transport_sock_fd,
    .shutdown = transport_sock_shutdown,
    .close = transport_sock_close,
    .mem_reg = loop_mem_reg,
    .mem_dereg = loop_mem_dereg,
    .write = loop_write,
    .read = loop_read,
    .mem_reg_dmabuf = transport_nomem_reg_dmabuf, /* no device memory in one process's loop */
    .set_busy_poll = transport_sock_set_busy_poll,
    .wait_readable = transport_sock_wait_readable,
    .set_watch_fd = transport_sock_set_watch_fd,
    .set_recv_idle = transport_sock_set_recv_idle,
};
