#!/usr/bin/env python3
"""Run a pod template of deploy/kubernetes/ as the kubelet would, with the built gpu-server.

Usage (root; tools/k8s_validate.sh runs it in fresh mount, network and PID namespaces):
    k8s_validate.py DATA POD.json BUILD_DIR
DATA: what tools/k8s_validate.js --extract wrote (DATA/<ConfigMap or Secret>/<key>).

The container's image is made as deploy/docker/Dockerfile.server makes it, from this build:
/usr/sbin/gpu-server and the libraries it needs, /bin/sh and cat; the NVIDIA container
runtime's part, the host driver's libcuda.so.1 in the image's library directory, is the fake
driver. Then, as the kubelet does: each volume the container mounts (a ConfigMap's or Secret's
files with their defaultMode, owned by root and the pod's fsGroup; an emptyDir, 0777), read-only
where the mount says so; the root file system read-only if readOnlyRootFilesystem; the
container's command and args exactly as written, its env, as runAsUser/runAsGroup with the
supplemental groups and fsGroup, no new privileges, no capabilities. The pod's address
(10.244.0.2, on the namespace's own loopback device) is where probes and the Prometheus scrape
go, as from another host: a listener on 127.0.0.1 does not answer them. Checks: the readiness and liveness probes pass as written (httpGet, tcpSocket); the
scrape the prometheus.io annotations describe answers and passes `promtool check metrics`;
gpu-server logged no warning or error about its config; SIGHUP reloads it with its tenants.
Prints ok/FAIL lines; exit 1 on a failure.
"""
import ctypes
import json
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

POD_IP = "10.244.0.2"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
fails = 0


def ok(msg):
    print(f"ok   {msg}", flush=True)


def fail(msg):
    global fails
    fails += 1
    print(f"FAIL {msg}", flush=True)


def run(*cmd):
    subprocess.run(cmd, check=True)


def copy_with_libs(root, path, dest=None):
    """path into root (at dest, else the same path), and every library ldd says it needs."""
    dest = dest or path
    os.makedirs(os.path.dirname(root + dest), exist_ok=True)
    shutil.copy2(path, root + dest, follow_symlinks=True)
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        lib = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0] if parts else ""
        if lib.startswith("/") and not os.path.exists(root + lib):
            os.makedirs(os.path.dirname(root + lib), exist_ok=True)
            shutil.copy2(lib, root + lib, follow_symlinks=True)


def make_image(root, build):
    """The files of Dockerfile.server's image that matter here."""
    copy_with_libs(root, os.path.join(build, "bin", "gpu-server"), "/usr/sbin/gpu-server")
    copy_with_libs(root, os.path.realpath("/bin/sh"), "/bin/sh")
    copy_with_libs(root, shutil.which("cat"), "/bin/cat")
    libdir = os.path.dirname(os.path.realpath("/lib64/ld-linux-x86-64.so.2"))
    # the NVIDIA container runtime mounts the host's driver library here
    copy_with_libs(root, os.path.join(build, "tests", "fakecuda", "libfakecuda.so"),
                   os.path.join(libdir, "libcuda.so.1"))
    for d in ("proc", "dev", "tmp", "etc"):
        os.makedirs(os.path.join(root, d), exist_ok=True)


def mount_volumes(root, pod, c, data, work):
    spec = pod["spec"]
    fs_group = (spec.get("securityContext") or {}).get("fsGroup")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        src = os.path.join(work, "volumes", v["name"])
        os.makedirs(src, exist_ok=True)
        source = v.get("configMap") or v.get("secret")
        if source is not None:
            name = source.get("name") or source.get("secretName")
            mode = source.get("defaultMode", 0o644)
            for key in os.listdir(os.path.join(data, name)):
                dst = os.path.join(src, key)
                shutil.copy(os.path.join(data, name, key), dst)
                os.chown(dst, 0, fs_group if fs_group is not None else 0)
                os.chmod(dst, mode)
            os.chmod(src, 0o755)
        elif "emptyDir" in v:
            os.chmod(src, 0o777)
        else:
            fail(f"volume {v['name']}: only configMap, secret and emptyDir are emulated")
            continue
        target = root + m["mountPath"]
        os.makedirs(target, exist_ok=True)
        run("mount", "--bind", src, target)
        if m.get("readOnly"):
            run("mount", "-o", "remount,bind,ro", target)


def container_env(c):
    env = {"PATH": IMAGE_PATH, "HOSTNAME": "gpu-server-test"}
    for e in c.get("env", []):
        if "value" not in e:
            fail(f"env {e['name']}: only literal values are emulated")
            continue
        env[e["name"]] = e["value"]
    return env


def start(root, pod, c, log):
    """The container's process, as the kubelet's runtime starts it."""
    psc = pod["spec"].get("securityContext") or {}
    csc = c.get("securityContext") or {}
    uid = csc.get("runAsUser", psc.get("runAsUser", 0))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", 0))
    groups = list(psc.get("supplementalGroups", []))
    if psc.get("fsGroup") is not None:
        groups.append(psc["fsGroup"])
    argv = list(c.get("command", [])) + list(c.get("args", []))
    env = container_env(c)
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chroot(root)
            os.chdir(c.get("workingDir", "/"))
            if "ALL" in (csc.get("capabilities") or {}).get("drop", []):
                for cap in range(64):
                    libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
            if csc.get("allowPrivilegeEscalation") is False:
                libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.execve(argv[0], argv, env)
        except OSError as e:
            os.write(2, f"container start: {e}\n".encode())
        os._exit(127)
    return pid


def port_of(c, port):
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise KeyError(port)


def http_get(port, path, timeout=2):
    try:
        with urllib.request.urlopen(f"http://{POD_IP}:{port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError as e:
        return None, str(e).encode()


def probe(c, p):
    """One try of a probe as the kubelet makes it: (passed, what)."""
    if "httpGet" in p:
        port = port_of(c, p["httpGet"]["port"])
        path = p["httpGet"].get("path", "/")
        code, _ = http_get(port, path, p.get("timeoutSeconds", 1))
        return code is not None and 200 <= code < 400, f"GET {path} on {port}: {code}"
    if "tcpSocket" in p:
        port = port_of(c, p["tcpSocket"]["port"])
        try:
            socket.create_connection((POD_IP, port), timeout=p.get("timeoutSeconds", 1)).close()
            return True, f"TCP {port}: connected"
        except OSError as e:
            return False, f"TCP {port}: {e}"
    return False, "only httpGet and tcpSocket probes are emulated"


def main():
    data, pod_file, build = sys.argv[1:4]
    pod = json.load(open(pod_file))
    c = pod["spec"]["containers"][0]
    work = os.path.dirname(os.path.abspath(pod_file))
    root, log = os.path.join(work, "root"), os.path.join(work, "container.log")
    run("ip", "link", "set", "lo", "up")
    run("ip", "addr", "add", f"{POD_IP}/32", "dev", "lo")
    make_image(root, build)
    run("mount", "--bind", root, root)
    mount_volumes(root, pod, c, data, work)
    run("mount", "-t", "proc", "proc", root + "/proc")
    run("mount", "--rbind", "/dev", root + "/dev")
    if (c.get("securityContext") or {}).get("readOnlyRootFilesystem"):
        run("mount", "-o", "remount,bind,ro", root)
    pid = start(root, pod, c, log)

    ready = c.get("readinessProbe")
    passed, what = False, "no readinessProbe"
    for _ in range(150):  # 15 s
        if ready is None or os.waitpid(pid, os.WNOHANG) != (0, 0):
            break
        passed, what = probe(c, ready)
        if passed:
            break
        time.sleep(0.1)
    logtext = open(log).read()
    if passed:
        ok(f"the container as the DaemonSet starts it is ready ({what})")
    else:
        fail(f"the container is not ready ({what}); its log:\n{logtext}")
        return 1
    live = c.get("livenessProbe")
    if live is not None:
        passed, what = probe(c, live)
        (ok if passed else fail)(f"liveness probe: {what}")
    ann = pod["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") == "true":
        port = int(ann.get("prometheus.io/port", "9400"))
        path = ann.get("prometheus.io/path", "/metrics")
        code, body = http_get(port, path)
        if code != 200:
            fail(f"Prometheus' scrape of {path} on {port} (no token): {code} {body[:200]!r}")
        elif shutil.which("promtool") is None:
            fail("promtool is not installed (tools/test.sh installs Debian's prometheus)")
        else:
            r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
            if r.returncode == 0:
                ok(f"Prometheus' scrape of {path} on {port} without a token: "
                   f"{body.count(b'# TYPE ')} metric families, promtool check metrics passes")
            else:
                fail(f"promtool check metrics: {(r.stdout + r.stderr).decode()[:500]}")
        code, _ = http_get(port, "/status")
        (ok if code == 404 else fail)(f"/status is not served on the scraped port ({code})")
    bad = [l for l in logtext.splitlines() if re.search(r" (warn|error): ", l)]
    (fail if bad else ok)("gpu-server logged no warning or error" +
                          (":\n" + "\n".join(bad) if bad else ""))
    server = subprocess.run(["sh", "-c", f"cat /proc/{pid}/task/*/children"],
                            capture_output=True, text=True).stdout.split()
    target = pid if "gpu-server" in open(f"/proc/{pid}/cmdline").read() else int(server[0])
    os.kill(target, signal.SIGHUP)
    for _ in range(50):
        time.sleep(0.1)
        logtext = open(log).read()
        if "reloaded" in logtext:
            break
    line = [l for l in logtext.splitlines() if "reloaded" in l]
    (ok if line and re.search(r": 2 tenant\(s\)", line[-1]) else fail)(
        f"SIGHUP reloads the DaemonSet's config: {line[-1] if line else logtext}")
    os.kill(target, signal.SIGTERM)
    os.waitpid(pid, 0)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
