/* A session worker in a child process on the fake driver, driven over TCP from the test: the
 * helpers the worker tests share (start it, say Hello, send Calls, read Replies), over the frame
 * helpers of tests/wire/wire_client.c. Header-only: each test executable includes it once. */
#ifndef RGPU_TESTS_WIRE_PEER_H
#define RGPU_TESTS_WIRE_PEER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "proto/frame.h"
#include "server/session.h"
#include "proto/ops.h"
#include "server/server.h"
#include "tests/wire/wire_client.h"

struct peer {
    struct transport_conn *conn;
    pid_t pid;
    uint8_t buf[1 << 16];
};

/* The worker's configuration (tenants, limits); the driver is the fake one. */
static struct srv_config peer_cfg = {
    .driver = FAKECUDA_PATH, .log_level = RG_LOG_ERROR, .name = "test"};

/* A worker in a child process, serving one TCP connection whose other end we keep. */
static void peer_start(struct peer *p)
{
    struct transport_listener *l;
    struct transport_conn *srv;
    char addr[64];

    assert_int_equal(transport_tcp_ops.listen("127.0.0.1:0", &l), RG_OK);
    assert_int_equal(transport_tcp_ops.listener_addr(l, addr, sizeof(addr)), RG_OK);
    assert_int_equal(transport_tcp_ops.connect(addr, NULL, &p->conn), RG_OK);
    assert_int_equal(transport_tcp_ops.accept(l, &srv), RG_OK);
    p->pid = fork();
    if (p->pid == 0) {
        transport_close(p->conn);
        _exit(srv_worker_run(&peer_cfg, dup(transport_fd(srv)), 7, "test-peer"));
    }
    transport_close(srv);
    transport_tcp_ops.listener_close(l);
}

/* Close our end; the worker's exit status (-1 if it died of a signal). */
static int peer_finish(struct peer *p)
{
    int status;

    transport_close(p->conn);
    assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static Rgpu__Welcome *peer_hello_as(struct peer *p, const char *tenant, const char *token)
{
    Rgpu__Hello h = RGPU__HELLO__INIT;

    h.proto_version = PROTO_VERSION;
    h.proto_minor = PROTO_VERSION_MINOR;
    h.tenant = (char *)tenant;
    h.token = (char *)token;
    return wire_hello(p->conn, &h, p->buf, sizeof(p->buf));
}

/* Start a worker and be admitted as tenant (NULL: the default tenant). */
static void peer_open(struct peer *p, const char *tenant, const char *token)
{
    Rgpu__Welcome *w;

    peer_start(p);
    w = peer_hello_as(p, tenant ? tenant : "", token ? token : "");
    assert_non_null(w);
    assert_int_equal(w->status, 0);
    rgpu__welcome__free_unpacked(w, NULL);
}

/* One call (with bulk bytes after it when bulk_len > 0) and the result of its reply; its out[]
 * words into out (up to cap), its inline data or bulk into rdata (up to rdata_cap). */
static CUresult peer_call_bulk(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                               const void *data, size_t len, const void *bulk, size_t bulk_len,
                               uint64_t *out, size_t cap, void *rdata, size_t rdata_cap)
{
    static uint64_t id = 1;
    Rgpu__Reply *r;
    CUresult res;

    wire_call(p->conn, id++, PROTO_PRIMARY_CTX_ID(0), op, args, nargs, 0, data, len, bulk,
              bulk_len);
    r = wire_reply(p->conn, p->buf, sizeof(p->buf), rdata, rdata_cap);
    res = (CUresult)r->result;
    for (size_t i = 0; i < cap; i++) /* words the reply lacks read as 0 */
        out[i] = i < r->n_out ? r->out[i] : 0;
    if (rdata != NULL && r->data.len > 0) /* inline bytes (a bulk reply has none) */
        memcpy(rdata, r->data.data, r->data.len < rdata_cap ? r->data.len : rdata_cap);
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

static CUresult peer_call_data(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                               const void *data, size_t len, uint64_t *out, size_t cap, void *rdata,
                               size_t rdata_cap)
{
    return peer_call_bulk(p, op, args, nargs, data, len, NULL, 0, out, cap, rdata, rdata_cap);
}

static CUresult peer_call(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                          uint64_t *out, size_t cap)
{
    return peer_call_data(p, op, args, nargs, NULL, 0, out, cap, NULL, 0);
}

#endif
