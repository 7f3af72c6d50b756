#!/usr/bin/env python3
"""Pre-authentication flood and slowloris driver for gpu-server (loopback only, bounded).

  flood.py --server 127.0.0.1:PORT --mode MODE [--count N] [--duration S] [--tenant T --token K]

Modes (each opens --count connections, holds them for --duration seconds, then closes them
all and exits; nothing runs longer than --duration + a few seconds):
  idle          connect and send nothing
  slow-hello    send a valid Hello one byte a second
  half-header   send half a frame header, then nothing
  idle-auth     a complete authenticated Hello, then nothing (an idle session)
  cut-call      authenticated, then a Call frame cut inside its message
  stalled-copy  authenticated, then a MEMCPY_HTOD of 64 MiB whose bulk stops after 1 MiB
  legit         one authenticated session: prints the handshake time and the median and p99
                of --count NOP round trips as JSON (exit 1 when it is refused or fails)
  reflood       --count connections that send nothing, spread over --sources loopback addresses
                (127.1.x.y), each reopened at once from its address when the server closes it,
                for --duration: the pre-Hello table held from many addresses (issue 27 item 4);
                prints how many were opened and closed by the server as JSON
  probe-hold    --count authenticated probes at once, each kept alive by an Echo of --hold-echo
                bytes a second for --duration: how many were answered, how many refused (and
                why) and how many still answered at the end, as JSON
  probe-echo    one authenticated probe, then an Echo of --echo-bytes to be sent back: whether
                the server echoed it or ended the connection, as JSON
  probe-name    one probe naming the tenant --tenant (any bytes, e.g. a newline), on a server
                without tenants: whether it was answered, as JSON
  auth-timing   --count rounds of two Hellos, one naming an unknown tenant and one naming
                --tenant with a wrong token, interleaved: the time from the Hello sent to the
                refusal received, medians in microseconds as JSON (a difference tells a peer
                without a token which tenant names exist)

The Hello and Call are encoded here by hand (protobuf wire format), so the tool needs nothing
beyond Python 3. Ops are numbered from proto/ops.def (--ops).
"""
import argparse
import ipaddress
import json
import os
import re
import resource
import select
import socket
import struct
import sys
import time

MAGIC = 0x55504752
HELLO, WELCOME, CALL, REPLY = 1, 2, 3, 4
PROBE, PROBE_REPLY, ECHO = 8, 9, 10
# The version this build speaks, read from proto/frame.h so that the two never drift apart.
_FRAME_H = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../proto/frame.h")).read()
PROTO_VERSION = int(re.search(r"#define PROTO_VERSION\s+(\d+)u", _FRAME_H).group(1))
PROTO_MINOR = int(re.search(r"#define PROTO_VERSION_MINOR\s+(\d+)u", _FRAME_H).group(1))
HDR = struct.Struct("<IHHIIQ")  # magic, type, flags, msg_len, reserved, bulk_len
MAX_COUNT, MAX_DURATION = 5000, 600


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint((num << 3) | 2) + varint(len(b)) + b


def frame(ftype, msg, bulk_len=0):
    return HDR.pack(MAGIC, ftype, 0, len(msg), 0, bulk_len) + msg


def hello(tenant, token):
    msg = (field_varint(1, PROTO_VERSION) + field_bytes(2, "flood") + field_bytes(3, "loopback")
           + field_varint(4, os.getpid()) + field_bytes(5, tenant) + field_bytes(6, token)
           + field_bytes(10, "tcp") + field_varint(11, PROTO_MINOR))
    return frame(HELLO, msg)


def probe(tenant, token):
    msg = (field_varint(1, PROTO_VERSION) + field_bytes(2, tenant) + field_bytes(3, token)
           + field_varint(5, PROTO_MINOR))
    return frame(PROBE, msg)


def probe_answer(s):
    """(status, reason) of the answer to a Probe: a ProbeReply, or a Welcome refusing."""
    ftype, msg = recv_frame(s)
    f = parse_fields(msg)
    status = f.get(2, 0)
    if status >= 1 << 63:
        status -= 1 << 64
    return status, f.get(3, b"").decode(errors="replace")


def call(cid, op, args, bulk_len=0):
    packed = b"".join(varint(a) for a in args)
    msg = field_varint(1, cid) + field_varint(2, op) + (field_bytes(4, packed) if args else b"")
    return frame(CALL, msg, bulk_len)


def parse_fields(msg):
    """{field number: last value} of a protobuf message (varints and length-delimited only)."""
    fields, i = {}, 0
    while i < len(msg):
        key, i = read_varint(msg, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(msg, i)
        elif wt == 2:
            n, i = read_varint(msg, i)
            v, i = msg[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        fields[num] = v
    return fields


def read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def recv_frame(s):
    magic, ftype, _, mlen, _, blen = HDR.unpack(recv_exact(s, HDR.size))
    if magic != MAGIC:
        raise ValueError("bad magic")
    msg = recv_exact(s, mlen)
    recv_exact(s, blen)
    return ftype, msg


def welcome(s):
    ftype, msg = recv_frame(s)
    f = parse_fields(msg)
    status = f.get(2, 0)
    if status >= 1 << 63:
        status -= 1 << 64
    return status, f.get(3, b"").decode(errors="replace")


def op_numbers(path):
    """{op name: wire number}: the rows of proto/ops.def in order (comments skipped)."""
    names = re.findall(r"^([A-Z][A-Z0-9_]*)\s*\|", open(path).read(), re.M)
    return {n: i for i, n in enumerate(names)}


SOURCE = None  # --source: the local address to connect from (another loopback address)


def connect(addr, timeout=10):
    s = socket.create_connection(addr, timeout=timeout,
                                 source_address=(SOURCE, 0) if SOURCE else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def session(addr, args):
    s = connect(addr)
    s.sendall(hello(args.tenant, args.token))
    status, reason = welcome(s)
    if status != 0:
        raise ConnectionError("refused: %s" % reason)
    return s


def legit(addr, args):
    t0 = time.monotonic()
    try:
        s = session(addr, args)
    except (OSError, ConnectionError, ValueError) as e:
        print(json.dumps({"served": False, "error": str(e),
                          "after_s": round(time.monotonic() - t0, 3)}))
        return 1
    hs = time.monotonic() - t0
    rtts = []
    for i in range(args.count):
        t = time.monotonic()
        s.sendall(call(i + 1, args.ops["NOP"], []))
        ftype, _ = recv_frame(s)
        rtts.append(time.monotonic() - t)
    time.sleep(args.hold)
    s.close()
    rtts.sort()
    print(json.dumps({"served": True, "handshake_ms": round(hs * 1e3, 2),
                      "nop_median_us": round(rtts[len(rtts) // 2] * 1e6, 1),
                      "nop_p99_us": round(rtts[int(len(rtts) * 0.99) - 1] * 1e6, 1),
                      "nops": len(rtts)}))
    return 0


def auth_timing(addr, args):
    def refused_after(tenant):
        s = connect(addr)
        msg = hello(tenant, "wrong-token-of-32-characters-xx")
        t = time.perf_counter()
        s.sendall(msg)
        status, _ = welcome(s)
        dt = time.perf_counter() - t
        s.close()
        if status == 0:
            raise SystemExit("auth-timing: the Hello was admitted")
        return dt

    known, unknown = [], []
    unknown_name = "x" * len(args.tenant) if args.tenant != "x" * len(args.tenant) else "y"
    for _ in range(args.count):
        unknown.append(refused_after(unknown_name))
        known.append(refused_after(args.tenant))
    known.sort()
    unknown.sort()
    med = lambda v: v[len(v) // 2] * 1e6
    print(json.dumps({"rounds": args.count, "unknown_tenant_us": round(med(unknown), 1),
                      "wrong_token_us": round(med(known), 1),
                      "difference_us": round(med(known) - med(unknown), 1)}))
    return 0


def reflood(addr, args):
    """--count idle connections over --sources addresses, reopened as soon as closed."""
    import errno
    sources = ["127.1.%d.%d" % (1 + i // 250, 1 + i % 250) for i in range(args.sources)]
    socks = {}  # fd -> (socket, source)
    opened = closed = failed = 0
    poller = select.poll()

    def open_one(src):
        nonlocal opened, failed
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((src, 0))
            s.setblocking(False)
            rc = s.connect_ex(addr)
            if rc not in (0, errno.EINPROGRESS):
                raise OSError(rc, "connect")
        except OSError:
            failed += 1
            s.close()
            return
        opened += 1
        socks[s.fileno()] = (s, src)
        poller.register(s.fileno(), select.POLLIN)

    for i in range(args.count):
        open_one(sources[i % len(sources)])
    end = time.monotonic() + args.duration
    while time.monotonic() < end:
        for fd, ev in poller.poll(100):
            s, src = socks.pop(fd)
            poller.unregister(fd)
            try:
                s.recv(65536)
            except OSError:
                pass
            s.close()
            closed += 1
            open_one(src)
        while len(socks) < args.count and time.monotonic() < end:  # failed connects
            open_one(sources[(opened + failed) % len(sources)])
            if failed > 100000:
                break
    for s, _ in socks.values():
        s.close()
    print(json.dumps({"mode": "reflood", "sources": len(sources), "held": args.count,
                      "opened": opened, "closed_by_server": closed, "failed": failed}))
    return 0


def probe_hold(addr, args):
    conns, reasons, answered = [], {}, 0
    for _ in range(args.count):
        try:
            s = connect(addr)
            s.sendall(probe(args.tenant, args.token))
            status, reason = probe_answer(s)
        except (OSError, ConnectionError, ValueError) as e:
            status, reason = -1, "failed: %s" % e
        if status == 0:
            answered += 1
            conns.append(s)
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
            s.close()
    end, alive = time.monotonic() + args.duration, len(conns)
    echo = frame(ECHO, b"", args.hold_echo) + b"x" * args.hold_echo
    while time.monotonic() < end:
        time.sleep(1)
        for s in list(conns):
            try:
                s.sendall(echo)
                recv_frame(s)
            except (OSError, ConnectionError, ValueError):
                conns.remove(s)
    alive = len(conns)
    for s in conns:
        s.close()
    print(json.dumps({"mode": "probe-hold", "asked": args.count, "answered": answered,
                      "alive_at_end": alive, "refused": reasons}))
    return 0


def probe_echo(addr, args):
    s = connect(addr, timeout=30)
    s.sendall(probe(args.tenant, args.token))
    status, reason = probe_answer(s)
    if status != 0:
        print(json.dumps({"mode": "probe-echo", "answered": False, "reason": reason}))
        return 1
    n, echoed = args.echo_bytes, False
    try:
        s.sendall(frame(ECHO, b"", n))
        chunk = b"\0" * (1 << 20)
        left = n
        while left > 0:
            left -= s.send(chunk[:min(left, len(chunk))])
        ftype, _ = recv_frame(s)
        echoed = ftype == ECHO
    except (OSError, ConnectionError, ValueError):
        pass
    s.close()
    print(json.dumps({"mode": "probe-echo", "answered": True, "bytes": n, "echoed": echoed}))
    return 0


def probe_name(addr, args):
    s = connect(addr)
    s.sendall(probe(args.tenant, args.token))
    status, reason = probe_answer(s)
    s.close()
    print(json.dumps({"mode": "probe-name", "answered": status == 0, "reason": reason}))
    return 0


def opener(mode, addr, args):
    """A connection in the state the mode wants, and the bytes it still dribbles (or None)."""
    if mode in ("idle", "slow-hello", "half-header"):
        s = connect(addr)
        if mode == "half-header":
            s.sendall(hello(args.tenant, args.token)[:HDR.size // 2])
        return s, hello(args.tenant, args.token) if mode == "slow-hello" else None
    s = session(addr, args)
    if mode == "cut-call":
        whole = call(1, args.ops["NOP"], [1, 2, 3, 4, 5, 6, 7, 8])
        s.sendall(whole[:HDR.size + 4])
    elif mode == "stalled-copy":
        s.sendall(call(1, args.ops["MEMCPY_HTOD"], [0, 64 << 20, 0, 0], bulk_len=64 << 20))
        s.sendall(b"\0" * (1 << 20))
    return s, None


def flood(addr, args):
    conns, failed, closed_by_server = [], 0, 0
    end = time.monotonic() + args.duration
    for _ in range(args.count):
        try:
            conns.append(list(opener(args.mode, addr, args)) + [0])
        except (OSError, ConnectionError, ValueError):
            failed += 1
        if time.monotonic() > end:
            break
    opened = len(conns)
    while time.monotonic() < end and conns:
        for c in list(conns):  # one more byte a second for the slow modes
            s, rest, sent = c
            if rest is not None and sent < len(rest):
                try:
                    s.send(rest[sent:sent + 1])
                    c[2] += 1
                except OSError:
                    pass
        poller, by_fd = select.poll(), {}
        for c in conns:
            poller.register(c[0], select.POLLIN)
            by_fd[c[0].fileno()] = c[0]
        for fd, _ in poller.poll(1000):  # the server answered or closed: count and forget it
            s = by_fd[fd]
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                closed_by_server += 1
                conns = [c for c in conns if c[0] is not s]
                s.close()
    for c in conns:
        c[0].close()
    print(json.dumps({"mode": args.mode, "opened": opened, "failed": failed,
                      "closed_by_server": closed_by_server, "held_to_end": len(conns)}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--mode", required=True,
                    choices=["idle", "slow-hello", "half-header", "idle-auth", "cut-call",
                             "stalled-copy", "legit", "auth-timing", "probe-hold",
                             "probe-echo", "probe-name", "reflood"])
    ap.add_argument("--echo-bytes", type=int, default=64 << 20, help="probe-echo: bulk bytes")
    ap.add_argument("--hold-echo", type=int, default=64, help="probe-hold: bytes of each Echo")
    ap.add_argument("--sources", type=int, default=300, help="reflood: source addresses (<= 5000)")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--tenant", default="")
    ap.add_argument("--token", default="")
    ap.add_argument("--hold", type=float, default=0, help="legit: keep the session this long")
    ap.add_argument("--source", help="connect from this loopback address (e.g. 127.0.0.2)")
    ap.add_argument("--ops", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "proto", "ops.def"))
    args = ap.parse_args()
    host, port = args.server.rsplit(":", 1)
    if not ipaddress.ip_address(host.strip("[]")).is_loopback:
        sys.exit("flood.py: loopback addresses only")
    if not (0 < args.count <= MAX_COUNT and 0 < args.duration <= MAX_DURATION and
            0 <= args.hold <= MAX_DURATION):
        sys.exit("flood.py: --count up to %d, --duration up to %d s" % (MAX_COUNT, MAX_DURATION))
    args.ops = op_numbers(args.ops)
    global SOURCE
    SOURCE = args.source
    if SOURCE and not ipaddress.ip_address(SOURCE).is_loopback:
        sys.exit("flood.py: loopback addresses only")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.count + 64)), hard))
    addr = (host.strip("[]"), int(port))
    if args.mode == "auth-timing":
        return auth_timing(addr, args)
    if args.mode == "reflood":
        if not 0 < args.sources <= 5000:
            sys.exit("flood.py: --sources up to 5000")
        return reflood(addr, args)
    if args.mode.startswith("probe-"):
        return {"probe-hold": probe_hold, "probe-echo": probe_echo,
                "probe-name": probe_name}[args.mode](addr, args)
    return legit(addr, args) if args.mode == "legit" else flood(addr, args)


if __name__ == "__main__":
    sys.exit(main())
