/* srv_notify (server/sd_notify.c): one datagram to $NOTIFY_SOCKET, a path or an @abstract
 * name; nothing and RG_OK without the variable; a bad address refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/sd_notify.h"

/* A datagram socket bound to name ("/path" or "@abstract"). */
static int listen_on(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);

    assert_true(fd >= 0 && n < sizeof(sa.sun_path));
    memcpy(sa.sun_path, name, n);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    assert_int_equal(
        bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)),
        0);
    return fd;
}

static void expect_datagram(int fd, const char *want_prefix)
{
    char buf[600];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

    assert_true(n > 0);
    buf[n] = '\0';
    assert_memory_equal(buf, want_prefix, strlen(want_prefix));
}

static void test_path_socket(void **state)
{
    char path[64];
    int fd;

    snprintf(path, sizeof(path), "/tmp/rgpu-notify-%d", (int)getpid());
    unlink(path);
    fd = listen_on(path);
    setenv("NOTIFY_SOCKET", path, 1);
    assert_int_equal(srv_notify("READY=1"), RG_OK);
    expect_datagram(fd, "READY=1");
    assert_int_equal(srv_notify("RELOADING=1"), RG_OK);
    expect_datagram(fd, "RELOADING=1\nMONOTONIC_USEC=");
    assert_int_equal(srv_notify("STOPPING=1"), RG_OK);
    expect_datagram(fd, "STOPPING=1");
    unsetenv("NOTIFY_SOCKET");
    close(fd);
    unlink(path);
}

static void test_abstract_socket(void **state)
{
    char name[64];
    int fd;

    snprintf(name, sizeof(name), "@rgpu-notify-test-%d", (int)getpid());
    fd = listen_on(name);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(srv_notify("READY=1"), RG_OK);
    expect_datagram(fd, "READY=1");
    unsetenv("NOTIFY_SOCKET");
    close(fd);
}

static void test_unset_and_bad(void **state)
{
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(srv_notify("READY=1"), RG_OK);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(srv_notify("READY=1"), RG_ERR_INVALID);
    setenv("NOTIFY_SOCKET", "/nonexistent/rgpu-notify", 1);
    assert_int_equal(srv_notify("READY=1"), RG_ERR_IO);
    unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_unset_and_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
