#!/usr/bin/env python3
"""Misbehaving pool members for tests/worker/pool_e2e.sh, speaking rgpu's framing by hand.

  fake_pool_server.py PORTFILE hang    accept and never answer anything (a wedged server)
  fake_pool_server.py PORTFILE liar    answer every probe "would admit" (one 10 GiB GPU), then
                                       refuse every session at its Hello, as a server does when
                                       another client took the room between probe and session
  fake_pool_server.py PORTFILE old     a server older than the probe: it closes the connection
                                       on a probe; a Hello gets a refusal naming it

Listens on 127.0.0.1, an ephemeral port written to PORTFILE. Runs until killed."""
import socket
import struct
import sys
import threading

HDR = struct.Struct("<IHHIIQ")  # magic, type, flags, msg_len, reserved, bulk_len
MAGIC = 0x55504752
HELLO, WELCOME, PROBE, PROBE_REPLY = 1, 2, 8, 9


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def fields(msg):
    """The top-level fields of a protobuf message: {number: int or bytes} (the last of each)."""
    out, i = {}, 0

    def read_varint():
        nonlocal i
        v = shift = 0
        while True:
            b = msg[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(msg):
        key = read_varint()
        if key & 7 == 0:
            out[key >> 3] = read_varint()
        elif key & 7 == 2:
            n = read_varint()
            out[key >> 3] = msg[i:i + n]
            i += n
        elif key & 7 == 1:
            out[key >> 3] = msg[i:i + 8]
            i += 8
        else:
            raise ValueError("wire type %d" % (key & 7))
    return out


def frame(kind, msg):
    return HDR.pack(MAGIC, kind, 0, len(msg), 0, 0) + msg


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def liar(conn):
    gib10 = 10 << 30
    gpu = field(1, 0) + field(2, "liar gpu") + field(3, gib10) + field(4, gib10)
    while True:
        _, kind, _, msg_len, _, bulk = HDR.unpack(recv_exact(conn, HDR.size))
        recv_exact(conn, msg_len + bulk)
        if kind == PROBE:
            reply = field(1, 1) + field(4, "liar") + field(5, gpu) + field(9, 1)
            conn.sendall(frame(PROBE_REPLY, reply))
        elif kind == HELLO:
            welcome = field(1, 1) + field(2, 2) + field(
                3, "session limit reached: the room went to another client")
            conn.sendall(frame(WELCOME, welcome))


def old(conn):
    _, kind, _, msg_len, _, bulk = HDR.unpack(recv_exact(conn, HDR.size))
    recv_exact(conn, msg_len + bulk)
    if kind == HELLO:
        welcome = field(1, 1) + field(2, 2) + field(3, "the old server is full")
        conn.sendall(frame(WELCOME, welcome))


def serve(conn, mode):
    try:
        if mode == "liar":
            liar(conn)
        elif mode == "old":
            old(conn)
        else:
            threading.Event().wait()
    except (EOFError, OSError):
        pass
    finally:
        conn.close()


def main():
    portfile, mode = sys.argv[1], sys.argv[2]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()


if __name__ == "__main__":
    main()
