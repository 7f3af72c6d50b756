/* Issue 15 item 14: a lost wake-up in the rdma backend, made to happen on purpose. Every call
 * of poll() is wrapped (-Wl,--wrap=poll); the sender thread's first call is held back 800 ms
 * before it reaches the kernel, the window in which, on a busy machine, a thread has left the
 * connection's lock to block but is not blocked yet. In that window the peer hands back
 * credits, and another thread receiving on the same connection handles that completion (and
 * its completion event). Before the fix nothing woke the sender then: it blocked with the
 * credits it waited for already there, and both ends of test_both_directions could sleep for
 * good. Runs on tests/fakeverbs (run_fakeverbs.sh). */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "transport/rdma.h"
#include "transport/transport.h"

#define SEND_LEN (3u << 20) /* more than the peer's 32 receive slots of 64 KiB */

int __real_poll(struct pollfd *fds, nfds_t n, int timeout);

static pthread_t stalled; /* the thread whose polls are held back */
static volatile int stall_on, stalling;

int __wrap_poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (stall_on && pthread_equal(pthread_self(), stalled)) {
        stall_on = 0; /* its first poll only */
        stalling = 1;
        usleep(800 * 1000);
    }
    return __real_poll(fds, n, timeout);
}

struct side {
    struct transport_conn *conn;
    uint8_t *buf;
    size_t len;
    volatile size_t done;
    rg_status_t status;
};

static void *send_main(void *arg)
{
    struct side *s = arg;
    struct iovec iov = {s->buf, s->len};

    stalled = pthread_self();
    stall_on = 1;
    s->status = transport_sendv(s->conn, &iov, 1);
    return NULL;
}

static void *recv_main(void *arg)
{
    struct side *s = arg;

    s->status = RG_OK;
    while (s->done < s->len && s->status == RG_OK) {
        size_t n = s->len - s->done < 65536 ? s->len - s->done : 65536;
        if ((s->status = transport_recv(s->conn, s->buf + s->done, n)) == RG_OK)
            s->done += n;
    }
    return NULL;
}

static void *connect_main(void *arg)
{
    struct transport_opts opts = {.connect_timeout_ms = 2000, .io_timeout_ms = 3000};
    struct side *s = arg;

    s->status = transport_rdma_ops.connect((const char *)s->buf, &opts, &s->conn);
    return NULL;
}

static void test_credits_taken_by_another_thread(void **state)
{
    struct transport_listener *l;
    char addr[128];
    struct side client = {.status = RG_ERR_IO}, server = {0}, sender, receiver;
    struct pollfd pfd;
    pthread_t tid, stid, rtid;
    uint8_t byte;

    (void)state;
    assert_int_equal(transport_rdma_ops.listen("127.0.0.1:0", &l), RG_OK);
    assert_int_equal(transport_rdma_ops.listener_addr(l, addr, sizeof(addr)), RG_OK);
    client.buf = (uint8_t *)addr;
    assert_int_equal(pthread_create(&tid, NULL, connect_main, &client), 0);
    pfd = (struct pollfd){.fd = transport_rdma_ops.listener_fd(l), .events = POLLIN};
    assert_int_equal(__real_poll(&pfd, 1, 2000), 1);
    assert_int_equal(transport_rdma_ops.accept(l, &server.conn), RG_OK);
    pthread_join(tid, NULL);
    assert_int_equal(client.status, RG_OK);

    sender = (struct side){.conn = client.conn, .buf = calloc(1, SEND_LEN), .len = SEND_LEN};
    receiver = (struct side){.conn = server.conn, .buf = calloc(1, SEND_LEN), .len = SEND_LEN};
    assert_non_null(sender.buf);
    assert_non_null(receiver.buf);
    for (size_t i = 0; i < SEND_LEN; i++)
        sender.buf[i] = (uint8_t)(i * 31 + 7);
    /* The sender fills the peer's 32 receive slots and blocks for credits (held back 800 ms
     * before its poll); then the peer reads, handing credits back after 16 slots. */
    assert_int_equal(pthread_create(&stid, NULL, send_main, &sender), 0);
    for (int i = 0; i < 2000 && !stalling; i++)
        usleep(1000);
    assert_true(stalling);
    assert_int_equal(pthread_create(&rtid, NULL, recv_main, &receiver), 0);
    for (int i = 0; i < 400 && receiver.done < 16u * 65536; i++)
        usleep(1000);
    assert_true(receiver.done >= 16u * 65536);
    usleep(50 * 1000);
    /* This thread receives on the sender's connection: it handles the credit completion and
     * its event, and times out (nothing comes this way). */
    assert_int_equal(transport_recv(client.conn, &byte, 1), RG_ERR_TIMEOUT);
    pthread_join(stid, NULL);
    if (sender.status != RG_OK) /* the receiver would wait for the rest for ever */
        transport_shutdown(server.conn);
    pthread_join(rtid, NULL);
    assert_int_equal(sender.status, RG_OK); /* before the fix: RG_ERR_TIMEOUT, stuck */
    assert_int_equal(receiver.status, RG_OK);
    assert_memory_equal(sender.buf, receiver.buf, SEND_LEN);
    free(sender.buf);
    free(receiver.buf);
    transport_close(client.conn);
    transport_close(server.conn);
    transport_rdma_ops.listener_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credits_taken_by_another_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
