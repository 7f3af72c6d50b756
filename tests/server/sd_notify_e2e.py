#!/usr/bin/env python3
"""gpu-server under a service manager's eye: with $NOTIFY_SOCKET set (as systemd does for a
Type=notify unit) the supervisor sends READY=1 once its port accepts connections, RELOADING=1
then READY=1 around a SIGHUP reload, and STOPPING=1 on SIGTERM; and with $JOURNAL_STREAM naming
its stderr, its log lines carry syslog priorities (<6> for info).
Usage: sd_notify_e2e.py GPU_SERVER FAKECUDA"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def main():
    server, fake = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="rgpu-notify-")
    path = os.path.join(work, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    conf = os.path.join(work, "server.conf")
    with open(conf, "w") as f:
        f.write("[server]\nlisten = 127.0.0.1\nport = 0\nmodule_cache = off\n")
    log_path = os.path.join(work, "server.log")
    log = open(log_path, "w")
    st = os.fstat(log.fileno())
    env = dict(os.environ, NOTIFY_SOCKET=path, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
    proc = subprocess.Popen([server, "--config", conf, "--driver", fake], stderr=log,
                            stdout=log, env=env)
    states = []

    def expect(want):
        data = sock.recv(4096).decode()
        states.append(data.split("\n")[0])
        if not data.startswith(want):
            raise AssertionError("expected %s, got %r" % (want, data))

    try:
        expect("READY=1")
        # READY came after listen(): the port is in the log already and accepts connections.
        text = open(log_path).read()
        port = int(text.split("listening on 127.0.0.1:")[1].split()[0])
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        proc.send_signal(signal.SIGHUP)
        expect("RELOADING=1\nMONOTONIC_USEC=")
        expect("READY=1")
        proc.send_signal(signal.SIGTERM)
        expect("STOPPING=1")
        if proc.wait(timeout=20) != 0:
            raise AssertionError("gpu-server exited with %d" % proc.returncode)
        text = open(log_path).read()
        info = [ln for ln in text.splitlines() if "listening on" in ln]
        if not info or not info[0].startswith("<6>"):
            raise AssertionError("the info line has no <6> journal priority: %r" % info)
    except Exception as e:
        proc.kill()
        print("FAIL: %s\n--- server log\n%s" % (e, open(log_path).read()))
        return 1
    finally:
        log.close()
    print("notifications %s: PASS" % " ".join(states))
    return 0


if __name__ == "__main__":
    sys.exit(main())
