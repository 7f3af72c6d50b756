"""Issue 30's bench: N sessions at once sharing one GPU, natively time-sliced, natively under MPS,
through rgpu time-sliced (the compute gate) and through rgpu with sharing = mps, for each N,
modes interleaved (for each N: every mode in turn), with each session's share.

Each group (a mode and an N) starts N processes of bench/share_load.py; each builds its
workloads and says READY; then every process runs each workload in the same phase of one
schedule (SHARE_SECS seconds each, SHARE_GAP apart) and reports what it completed. Everything
runs under timeout(1), processes are ended by their pid only, and the MPS daemon this starts (for
the native MPS rows; its own pipe and log directories) is told to quit and killed by its pid if
it does not; each gpu-server (time-sliced, and sharing = mps with its own daemon) is stopped
with SIGTERM (it quits its daemon) and killed by pid after 20 s. A deadline (SHARE_DEADLINE s)
skips the groups that would not fit and says so.

Usage: python3 bench/share.py [BUNDLE_DIR]   (default <repo>/.bundle; from bench/share.sh)
  SHARE_SECS=3        seconds per measured phase (the scale knob; a group takes about
                      init + 4 x (SHARE_SECS + SHARE_GAP))
  SHARE_NS="1 4 8 2"  session counts, in this order (the table is sorted)
  SHARE_MODES="native-ts native-mps rgpu-ts rgpu-mps"
  SHARE_WORKLOADS="cpu gpu gsync decode"
  SHARE_ROUNDS=1      repeat the whole interleaved sequence
  SHARE_DEADLINE=520  seconds for everything (skip groups that would overrun)
  SHARE_FAKE=1        no GPU and no torch (sleeps), a stand-in MPS on PATH: checks this script
  SHARE_SERVER_B=PATH another gpu-server binary (another build of the gate): mode rgpu-ts-b runs
                      it time-sliced beside rgpu-ts, interleaved (an A/B of two builds in one run)
Writes share.jsonl and share.md into $OUT (else /tmp) and prints the table.
       python3 bench/share.py --table SHARE.JSONL   the table again from a run's share.jsonl
                      (skipped groups and failed sessions say so)."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_ONLY = len(sys.argv) > 2 and sys.argv[1] == "--table"
B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not TABLE_ONLY else os.path.join(ROOT, ".bundle"))
DEPS = os.path.join(B, "deps")
OUT = os.environ.get("OUT") or "/tmp"
SECS = float(os.environ.get("SHARE_SECS", "3"))
GAP = float(os.environ.get("SHARE_GAP", "0.7"))
NS = [int(n) for n in os.environ.get("SHARE_NS", "1 4 8 2").split()]
MODES = os.environ.get("SHARE_MODES", "native-ts native-mps rgpu-ts rgpu-mps").split()
WORKLOADS = os.environ.get("SHARE_WORKLOADS", "cpu gpu gsync decode").split()
ROUNDS = int(os.environ.get("SHARE_ROUNDS", "1"))
DEADLINE = float(os.environ.get("SHARE_DEADLINE", "520"))
FAKE = os.environ.get("SHARE_FAKE") == "1"
INIT_MAX = 90.0  # seconds a group's processes get to become ready (then 4x the slowest seen)
MPS_CONTROL = "nvidia-cuda-mps-control"
T0 = time.time()
LOG = os.path.join(OUT, "share-logs")
if not TABLE_ONLY:
    os.makedirs(LOG, exist_ok=True)
JSONL = None if TABLE_ONLY else open(os.path.join(OUT, "share.jsonl"), "w")
CHILDREN = []  # Popen objects we started and must end


def log(*a):
    print("[%5.0fs]" % (time.time() - T0), *a, flush=True)


def record(obj):
    JSONL.write(json.dumps(obj) + "\n")
    JSONL.flush()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def end(p, grace):
    """End one process we started: SIGTERM, then SIGKILL after grace seconds (by its pid)."""
    if p.poll() is not None:
        return
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)
    except ProcessLookupError:
        pass


# ---- the MPS daemon of the native rows -------------------------------------------------------

class NativeMps:
    def __init__(self):
        self.pid = None

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="share-mps-")
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.dir, "pipe"),
                    "CUDA_MPS_LOG_DIRECTORY": os.path.join(self.dir, "log")}
        for d in self.env.values():
            os.makedirs(d)
        r = subprocess.run(["timeout", "20", MPS_CONTROL, "-d"], env={**os.environ, **self.env},
                           capture_output=True, text=True)
        pidfile = os.path.join(self.env["CUDA_MPS_PIPE_DIRECTORY"], MPS_CONTROL + ".pid")
        for _ in range(100):
            if os.path.exists(pidfile):
                try:
                    self.pid = int(open(pidfile).read().strip())
                    break
                except ValueError:
                    pass
            time.sleep(0.05)
        log("native MPS daemon: exit %d, pid %s, pipe %s %s" % (
            r.returncode, self.pid, self.env["CUDA_MPS_PIPE_DIRECTORY"], r.stderr.strip()[:200]))
        if r.returncode != 0:
            self.stop()
        return r.returncode == 0

    def stop(self):
        try:
            subprocess.run(["timeout", "15", MPS_CONTROL], input="quit\n", text=True,
                           env={**os.environ, **self.env}, capture_output=True)
        except OSError:
            pass
        for _ in range(100):
            if self.pid is None or not os.path.exists("/proc/%d" % self.pid):
                break
            time.sleep(0.1)
        if self.pid is not None and os.path.exists("/proc/%d" % self.pid):
            log("native MPS daemon pid %d did not quit: killing it" % self.pid)
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["rm", "-rf", self.dir])
        self.pid = None
        log("native MPS daemon stopped")


# ---- gpu-server --------------------------------------------------------------------------------

class Server:
    def __init__(self, name, sharing, binary=None):
        self.name, self.port, self.mport = name, free_port(), free_port()
        conf = os.path.join(LOG, name + ".conf")
        with open(conf, "w") as f:
            f.write("[server]\nmetrics_listen = 127.0.0.1:%d\nsharing = %s\n" % (self.mport, sharing))
        self.logf = os.path.join(LOG, name + ".log")
        args = [binary or os.path.join(B, "bin", "gpu-server"), "--config", conf, "--listen", "127.0.0.1",
                "--port", str(self.port)]
        env = {**os.environ, "LD_LIBRARY_PATH": DEPS}
        if FAKE:
            args += ["--driver", os.path.join(B, "fakecuda", "libfakecuda.so")]
            env["LD_LIBRARY_PATH"] = os.path.join(B, "lib")
        env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
        self.p = subprocess.Popen(args, env=env, stdout=open(self.logf, "w"),
                                  stderr=subprocess.STDOUT)
        CHILDREN.append(self.p)

    def ready(self):
        for _ in range(300):
            text = open(self.logf).read()
            if "metrics on http" in text:
                return True
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        log("gpu-server %s did not start: %s" % (self.name, open(self.logf).read()[-400:]))
        return False

    def status(self):
        try:
            return json.load(urllib.request.urlopen("http://127.0.0.1:%d/status" % self.mport,
                                                    timeout=2))
        except Exception:
            return None

    def stop(self):
        end(self.p, 20)


def start_server(servers, mode, sharing, binary=None):
    servers[mode] = Server(mode, sharing, binary)
    if servers[mode].ready():
        return True
    servers.pop(mode).stop()
    return False


# ---- one group ---------------------------------------------------------------------------------

def mode_env(mode, servers, mps):
    env = dict(os.environ)
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    env.pop("CUDA_MPS_LOG_DIRECTORY", None)
    env["LD_LIBRARY_PATH"] = DEPS
    if mode == "native-mps":
        env.update(mps.env)
    if mode.startswith("rgpu"):
        env["LD_LIBRARY_PATH"] = os.path.join(B, "client") + ":" + DEPS
        if FAKE:
            env["LD_LIBRARY_PATH"] = os.path.join(B, "lib")
        env["RGPU_SERVER"] = "127.0.0.1:%d" % servers[mode].port
    return env


def gate_sampler(server, start, pids, out):
    """rgpu rows: the gate's GPU seconds per session (by client pid) at each phase's ends."""
    for k in range(len(WORKLOADS)):
        snaps = []
        for t in (start + k * (SECS + GAP) + 0.05, start + k * (SECS + GAP) + SECS - 0.05):
            while time.time() < t:
                time.sleep(0.01)
            s = server.status() or {}
            snaps.append({x["client"].split(" pid ")[-1].split(" ")[0]: x.get("gpu_seconds_total", 0)
                          for x in s.get("sessions", [])})
        out[WORKLOADS[k]] = [snaps[1].get(str(p), 0) - snaps[0].get(str(p), 0) for p in pids]


def group(rnd, mode, n, servers, mps):
    tag = "r%d-%s-n%d" % (rnd, mode, n)
    start_file = os.path.join(LOG, tag + ".start")
    if os.path.exists(start_file):
        os.remove(start_file)
    phases = len(WORKLOADS) * (SECS + GAP)
    limit = int(INIT_MAX + phases + 30)
    env = mode_env(mode, servers, mps)
    procs, outs = [], []
    for i in range(n):
        f = open(os.path.join(LOG, "%s-%d.out" % (tag, i)), "w+")
        cmd = ["timeout", "-k", "5", str(limit), sys.executable, "-u",
               os.path.join(ROOT, "bench", "share_load.py"), "--start-file", start_file,
               "--secs", str(SECS), "--gap", str(GAP), "--workloads", " ".join(WORKLOADS)]
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=LOG)
        CHILDREN.append(p)
        procs.append(p)
        outs.append(f)

    def lines(i):
        outs[i].seek(0)
        r = []
        for l in outs[i].read().splitlines():
            try:
                r.append(json.loads(l))
            except ValueError:
                pass
        return r

    t = time.time()
    ready = [None] * n
    while time.time() - t < INIT_MAX and not all(ready):
        for i in range(n):
            if ready[i] is None:
                ready[i] = next((x for x in lines(i) if x.get("ready")), None)
        if any(p.poll() is not None for i, p in enumerate(procs) if ready[i] is None):
            break
        time.sleep(0.1)
    init = time.time() - t
    start = time.time() + 1.0
    with open(start_file + ".tmp", "w") as f:
        f.write("%.6f\n" % start)
    os.rename(start_file + ".tmp", start_file)
    gate = {}
    sampler = None
    if mode.startswith("rgpu") and all(ready):
        sampler = threading.Thread(target=gate_sampler, daemon=True,
                                   args=(servers[mode], start, [r["pid"] for r in ready], gate))
        sampler.start()
    for p in procs:
        try:
            p.wait(max(1.0, start + phases + 20 - time.time()))
        except subprocess.TimeoutExpired:
            pass
        end(p, 5)
    if sampler:
        sampler.join(5)
    res = {"round": rnd, "mode": mode, "n": n, "init_s": round(init, 1),
           "ready": sum(1 for r in ready if r), "secs": SECS, "workloads": {}}
    for w in WORKLOADS:
        per = []
        for i in range(n):
            row = next((x for x in lines(i) if x.get("workload") == w), None)
            per.append(row)
        res["workloads"][w] = {
            "unit": next((r["unit"] for r in per if r and "unit" in r), ""),
            "rates": [r.get("rate") if r else None for r in per],
            "errors": [r.get("error") for r in per if r and r.get("error")],
            "slices": [r.get("slices") for r in per if r],
            "gate_gpu_s": gate.get(w)}
        if not all(r and r.get("rate") is not None for r in per):
            res["workloads"][w]["tail"] = [open(os.path.join(LOG, "%s-%d.out" % (tag, i))).read()[-300:]
                                           for i in range(n) if not per[i] or per[i].get("rate") is None][:2]
    record(res)
    agg = {w: sum(r or 0 for r in res["workloads"][w]["rates"]) for w in WORKLOADS}
    log("%-10s N=%d init %.1fs ready %d/%d: %s" % (mode, n, init, res["ready"], n, ", ".join(
        "%s %.0f" % (w, agg[w]) for w in WORKLOADS)))
    return res


# ---- the table ---------------------------------------------------------------------------------

def table(rows):
    """Two tables: the aggregate per workload and N, a column per mode (its rate, its ratio to
    the same mode's N=1, and the worst session's deviation from the sessions' mean); then each
    session's rate as % of the mean, and the gate's GPU time per session likewise (rgpu).
    rows: the groups as recorded; a skipped group ({"skipped": why}) is a cell saying so, and a
    session that failed or reported nothing counts as "failed" (its rate is not in the mean)."""
    by, skipped = {}, {}
    for r in rows:
        if r.get("skipped") or "workloads" not in r:
            skipped[(r.get("mode"), r.get("n"))] = r.get("skipped") or "no result"
            continue
        for w, d in r["workloads"].items():
            by.setdefault((w, r["mode"], r["n"]), []).append(d)
    seen_modes = {k[1] for k in by} | {k[0] for k in skipped}
    modes = [m for m in MODES if m in seen_modes] + sorted(m for m in seen_modes - set(MODES) if m)
    ns = sorted(set(NS) | {k[2] for k in by} | {k[1] for k in skipped if k[1] is not None})
    workloads = WORKLOADS + sorted({k[0] for k in by} - set(WORKLOADS))
    out = ["| workload | N | " + " | ".join(modes) + " |", "| --- | --- |" + " --- |" * len(modes)]
    shares = []

    def total(d):
        return sum(x or 0 for x in d["rates"])
    for w in workloads:
        unit = next((d[0]["unit"] for k, d in by.items() if k[0] == w and d[0].get("unit")), "")
        for n in ns:
            cells = []
            for mode in modes:
                ds = by.get((w, mode, n))
                if not ds:
                    why = skipped.get((mode, n))
                    cells.append("skipped (%s)" % why if why else "-")
                    continue
                aggs = [total(d) for d in ds]
                agg = sorted(aggs)[len(aggs) // 2]
                b = by.get((w, mode, 1))
                base = sorted(total(d) for d in b)[len(b) // 2] if b else 0
                d = ds[0]
                ok = [x for x in d["rates"] if x is not None]
                miss = len(d["rates"]) - len(ok)
                if not ok:
                    err = (d.get("errors") or ["no rate reported"])[0]
                    cells.append("failed (%s)" % err.split("\n")[0][:60])
                    shares.append("%-6s N=%d %-10s all %d session(s) failed: %s" % (
                        w, n, mode, len(d["rates"]), err.split("\n")[0][:100]))
                    continue
                mean = sum(ok) / len(ok)
                pct = [100 * x / mean if mean and x is not None else None for x in d["rates"]]
                worst = max(abs(p - 100) for p in pct if p is not None)
                cell = "%.0f" % agg
                if len(aggs) > 1:
                    cell += " (%.0f-%.0f)" % (min(aggs), max(aggs))
                if n > 1 and base:
                    cell += " %.2fx" % (agg / base)
                if n > 1:
                    cell += " ±%.0f%%" % worst
                if miss:
                    cell += " [%d of %d failed]" % (miss, len(d["rates"]))
                cells.append(cell)
                if n > 1:
                    slices = [x for x in (d.get("slices") or []) if x]
                    sl = [sum(c) / 0.5 for c in zip(*slices)] if slices else []
                    g = [x for x in (d.get("gate_gpu_s") or []) if x is not None]
                    gm = sum(g) / len(g) if g else 0
                    line = "%-6s N=%d %-10s %s" % (w, n, mode, " ".join(
                        "%.0f" % p if p is not None else "failed" for p in pct))
                    if sl:
                        line += "  | aggregate per 0.5 s %.0f-%.0f" % (min(sl), max(sl))
                    if gm > 0:
                        line += "  | gate GPU time %s" % " ".join("%.0f" % (100 * x / gm) for x in g)
                    if d.get("errors"):
                        line += "  | error: %s" % d["errors"][0].split("\n")[0][:100]
                    shares.append(line)
            out.append("| %s (%s) | %d | %s |" % (w, unit, n, " | ".join(cells)))
    return ("\n".join(out) + "\n\nEach session's rate, % of the sessions' mean:\n" +
            "\n".join(shares) + "\n\n" + targets(by))


def targets(by):
    """Issue 30's targets, from the table: equal sessions within 15% (rgpu modes), the
    GPU-bound aggregate at N=4 at least 2.2x N=1 through rgpu time-sliced, four decode sessions
    at least 3x one in the concurrent mode."""
    def agg(w, mode, n):
        d = by.get((w, mode, n))
        return sum(x or 0 for x in d[0]["rates"]) if d else None

    def worst(w, mode, n):
        d = by.get((w, mode, n))
        if not d:
            return None
        r = [x for x in d[0]["rates"] if x is not None]
        m = sum(r) / len(r) if r else 0
        return max(abs(x - m) / m for x in r) * 100 if m else None
    lines = ["Targets:"]
    for w, mode, want in (("gpu", "rgpu-ts", 2.2), ("gsync", "rgpu-ts", 2.2),
                          ("decode", "rgpu-mps", 3.0), ("decode", "native-mps", 3.0)):
        a1, a4 = agg(w, mode, 1), agg(w, mode, 4)
        if a1 and a4:
            lines.append("  %-6s N=4 %-10s %.2fx N=1 (target >= %.1fx): %s" % (
                w, mode, a4 / a1, want, "met" if a4 / a1 >= want else "MISSED"))
    for mode in ("rgpu-ts", "rgpu-mps", "native-ts", "native-mps"):
        ws = [(w, n, worst(w, mode, n)) for (w, m, n) in sorted(by) if m == mode and n > 1]
        ws = [x for x in ws if x[2] is not None]
        if ws:
            w, n, v = max(ws, key=lambda x: x[2])
            lines.append("  %-10s furthest session from the mean: %.0f%% (%s N=%d)%s" % (
                mode, v, w, n, " (target 15%% for rgpu-ts: %s)" % ("met" if v <= 15 else "MISSED")
                if mode == "rgpu-ts" else ""))
    return "\n".join(lines)


def main():
    global INIT_MAX
    if TABLE_ONLY:
        print(table([json.loads(line) for line in open(sys.argv[2]) if line.strip()]))
        return 0
    servers, mps, rows = {}, NativeMps(), []
    stopping = []

    def on_signal(sig, frame):
        stopping.append(sig)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    if FAKE:
        os.environ["PATH"] = os.path.join(ROOT, "tests", "worker", "fake_mps") + ":" + os.environ["PATH"]
    # Only one MPS at a time on the GPU: the native daemon runs for its group only, and so does
    # the sharing = mps gpu-server (with its own daemon); the time-sliced gpu-server stays up.
    setup = {"native-mps": lambda: mps.start(),
             "rgpu-mps": lambda: start_server(servers, "rgpu-mps", "mps")}
    teardown = {"native-mps": lambda: mps.stop(),
                "rgpu-mps": lambda: servers.pop("rgpu-mps").stop()}
    try:
        if "rgpu-ts" in MODES and not start_server(servers, "rgpu-ts", "time-sliced"):
            MODES.remove("rgpu-ts")
        if "rgpu-ts-b" in MODES and not (os.environ.get("SHARE_SERVER_B") and start_server(
                servers, "rgpu-ts-b", "time-sliced", os.path.abspath(os.environ["SHARE_SERVER_B"]))):
            log("rgpu-ts-b needs SHARE_SERVER_B, a gpu-server that starts: its rows are left out")
            MODES.remove("rgpu-ts-b")
        init_seen = 0.0
        for rnd in range(1, ROUNDS + 1):
            for n in NS:
                for mode in list(MODES):
                    need = (init_seen or 20.0) + len(WORKLOADS) * (SECS + GAP) + 8
                    if time.time() - T0 + need > DEADLINE:
                        log("skipped %s N=%d: it would end past SHARE_DEADLINE=%.0f s" % (mode, n, DEADLINE))
                        record({"round": rnd, "mode": mode, "n": n, "skipped": "deadline"})
                        rows.append({"round": rnd, "mode": mode, "n": n, "skipped": "deadline"})
                        continue
                    if mode in setup and not setup[mode]():
                        log("%s could not start: its rows are left out" % mode)
                        MODES.remove(mode)
                        continue
                    try:
                        r = group(rnd, mode, n, servers, mps)
                    finally:
                        if mode in teardown:
                            teardown[mode]()
                    rows.append(r)
                    init_seen = max(init_seen, r["init_s"])
                    INIT_MAX = max(40.0, min(INIT_MAX, 4 * init_seen + 10))
    except KeyboardInterrupt:
        log("interrupted (%s): stopping" % stopping)
    finally:
        for p in CHILDREN:
            end(p, 5)
        for s in servers.values():
            s.stop()
        if mps.pid is not None:
            mps.stop()
    md = table(rows)
    head = ("Issue 30 bench (bench/share.py): %s s per phase, N sessions at once, %d round(s). "
            "A cell: the sessions' rates summed; over the same mode's N=1; ± the session furthest "
            "from the sessions' mean. Modes: native-ts (time-sliced by the driver), native-mps "
            "(an MPS daemon), rgpu-ts (gpu-server's compute gate), rgpu-mps (gpu-server with "
            "sharing = mps), rgpu-ts-b (SHARE_SERVER_B, another gpu-server build, time-sliced). Below: each session's rate as %% of the mean (100 = fair), the "
            "aggregate's range over 0.5 s slices, and (rgpu) the GPU time the gate measured per "
            "session as %% of the mean." % (SECS, ROUNDS))
    open(os.path.join(OUT, "share.md"), "w").write(head + "\n\n" + md + "\n")
    print(head)
    print(md)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
