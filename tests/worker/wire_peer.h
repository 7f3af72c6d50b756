/* A session worker in a child process on the fake driver, driven over TCP from the test: the
 * helpers the worker tests share (start it, say Hello, send Calls, read Replies). Header-only:
 * each test executable includes it once. */
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

#include "proto/frame.h"
#include "server/session.h"
#include "proto/ops.h"
#include "server/server.h"

struct peer {
    struct transport_conn *conn;
    pid_t pid;
    uint8_t buf[1 << 16];
};

/* The worker's configuration (tenants, limits); the driver is the fake one. */
static struct srv_config peer_cfg = {.driver = FAKECUDA_PATH, .log_level = "error", .name = "test"};

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
    struct proto_frame_hdr hdr;

    h.proto_version = PROTO_VERSION;
    h.tenant = (char *)tenant;
    h.token = (char *)token;
    assert_int_equal(proto_send(p->conn, PROTO_HELLO, &h.base, NULL, 0), RG_OK);
    assert_int_equal(proto_recv(p->conn, &hdr, p->buf, sizeof(p->buf)), RG_OK);
    assert_int_equal(hdr.type, PROTO_WELCOME);
    return rgpu__welcome__unpack(NULL, hdr.msg_len, p->buf);
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
    Rgpu__Call c = RGPU__CALL__INIT;
    struct proto_frame_hdr hdr;
    Rgpu__Reply *r;
    CUresult res;

    c.id = id++;
    c.op = op;
    c.ctx = PROTO_PRIMARY_CTX_ID(0);
    c.n_args = nargs;
    c.args = (uint64_t *)args;
    c.data = (ProtobufCBinaryData){len, (uint8_t *)data};
    assert_int_equal(proto_send_flags(p->conn, PROTO_CALL, 0, &c.base, bulk, bulk_len), RG_OK);
    assert_int_equal(proto_recv(p->conn, &hdr, p->buf, sizeof(p->buf)), RG_OK);
    assert_int_equal(hdr.type, PROTO_REPLY);
    r = rgpu__reply__unpack(NULL, hdr.msg_len, p->buf);
    if (hdr.bulk_len > 0) { /* the reply's bytes as bulk: into rdata */
        assert_true(rdata != NULL && hdr.bulk_len <= rdata_cap);
        assert_int_equal(transport_recv(p->conn, rdata, hdr.bulk_len), RG_OK);
        rdata = NULL;
    }
    assert_non_null(r);
    res = (CUresult)r->result;
    for (size_t i = 0; i < r->n_out && i < cap; i++)
        out[i] = r->out[i];
    if (rdata != NULL)
        memcpy(rdata, r->data.data, r->data.len < rdata_cap ? r->data.len : rdata_cap);
    rgpu__reply__free_unpacked(r, NULL);
    return res;
}

static CUresult peer_call_data(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                               const void *data, size_t len, uint64_t *out, size_t cap,
                               void *rdata, size_t rdata_cap)
{
    return peer_call_bulk(p, op, args, nargs, data, len, NULL, 0, out, cap, rdata, rdata_cap);
}

static CUresult peer_call(struct peer *p, unsigned op, const uint64_t *args, size_t nargs,
                          uint64_t *out, size_t cap)
{
    return peer_call_data(p, op, args, nargs, NULL, 0, out, cap, NULL, 0);
}

#endif
