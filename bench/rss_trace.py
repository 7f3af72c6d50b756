# Traces resident memory by kind over time, to find where a process's peak comes from: the
# worker's peak RSS is the benchmark table's memory row, and a short rise between two calls
# does not show in what the worker holds at its end.
#   rss_trace.py --pid PID            one process
#   rss_trace.py --children-of PID    every child of PID (gpu-server's workers), as they come
# Samples /proc/PID/status every --interval seconds until the processes are gone (or SIGTERM)
# and prints, per process: each rise or fall of RSS by --step MiB or more (time, anon, file,
# shmem), and the largest mappings (from smaps) at the highest sample seen.
import argparse
import os
import signal
import sys
import time

KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")


def status(pid):
    vals = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in KEYS:
                    vals[key] = int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return vals if "VmRSS" in vals else None


def top_mappings(pid, n=10):
    """The n mappings with the most resident memory: (MiB resident, MiB anonymous, name)."""
    maps, cur = [], None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if "-" in head[0] and not head[0].endswith(":"):
                    cur = [0.0, 0.0, head[5] if len(head) > 5 else "[anon]"]
                    maps.append(cur)
                elif head[0] == "Rss:":
                    cur[0] = int(head[1]) / 1024.0
                elif head[0] == "Anonymous:":
                    cur[1] = int(head[1]) / 1024.0
    except (OSError, IndexError):
        return []
    merged = {}
    for rss, anon, name in maps:  # one line per name: a library's segments, the heap's arenas
        m = merged.setdefault(name, [0.0, 0.0, 0])
        m[0], m[1], m[2] = m[0] + rss, m[1] + anon, m[2] + 1
    return sorted(((v[0], v[1], v[2], k) for k, v in merged.items()), reverse=True)[:n]


class Trace:
    def __init__(self, pid, step):
        self.pid, self.step, self.t0 = pid, step, time.monotonic()
        self.last, self.max, self.max_mapped = None, 0.0, 0.0
        self.at_max, self.lines = [], []

    def sample(self):
        s = status(self.pid)
        if s is None:
            return False
        rss = s["VmRSS"]
        if self.last is None or abs(rss - self.last) >= self.step:
            self.lines.append("%8.3f s  rss %7.1f  anon %7.1f  file %7.1f  shmem %6.1f  hwm %7.1f" % (
                time.monotonic() - self.t0, rss, s.get("RssAnon", 0), s.get("RssFile", 0),
                s.get("RssShmem", 0), s.get("VmHWM", 0)))
            self.last = rss
        if rss > self.max:  # smaps again only after a rise of a step
            if not self.at_max or rss >= self.max_mapped + self.step:
                self.at_max, self.max_mapped = top_mappings(self.pid), rss
            self.max = rss
        return True

    def report(self, out):
        out.write(f"== pid {self.pid}: highest sampled RSS {self.max:.1f} MiB\n")
        out.writelines(line + "\n" for line in self.lines)
        out.write(f"   largest mappings at {self.max_mapped:.1f} MiB (MiB resident, anonymous, count, name):\n")
        for rss, anon, count, name in self.at_max:
            out.write(f"   {rss:8.1f} {anon:8.1f} {count:5d}  {name}\n")
        out.flush()


def children(ppid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        kids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int)
    ap.add_argument("--children-of", type=int)
    ap.add_argument("--interval", type=float, default=0.005)
    ap.add_argument("--step", type=float, default=8.0, help="MiB")
    a = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    traces = {a.pid: Trace(a.pid, a.step)} if a.pid else {}
    tick = 0
    while not stop:
        if a.children_of and tick % 20 == 0:
            for kid in children(a.children_of):
                traces.setdefault(kid, Trace(kid, a.step))
        for pid in list(traces):
            if not traces[pid].sample():
                traces.pop(pid).report(sys.stdout)
        if a.pid and not traces:
            break
        tick += 1
        time.sleep(a.interval)
    for t in traces.values():
        t.report(sys.stdout)


if __name__ == "__main__":
    main()
