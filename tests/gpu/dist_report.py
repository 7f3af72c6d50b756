"""The table of tests/gpu/dist.sh from its logs: every pattern's row per placement (native, one
server, two servers), trainings' losses against native, and the speed rows with the issue's
targets (bus bandwidth >= 0.95x native from 16 MiB and >= 0.8x at 1 MiB, 8-byte latency within
native + 10 us, DDP/FSDP step time >= 0.95x, peer copies >= 0.9x).
Usage: dist_report.py LOGS_DIR NGPU   (markdown on stdout)"""
import glob
import json
import os
import re
import statistics
import sys

PLACES = ("native", "one", "two")
TITLE = {"native": "native", "one": "rgpu, one server", "two": "rgpu, two servers"}


def parse(logs):
    rows, order, losses, metrics = {}, [], {}, {p: {} for p in PLACES}
    kinds = ("torch", "vmm", "jax", "jaxpp", "single", "cupy", "jaxdist", "shell")
    paths = sorted(glob.glob(os.path.join(logs, "*.out")),
                   key=lambda q: (next((i for i, k in enumerate(kinds)
                                        if os.path.basename(q).startswith(k + ".")), 99), q))
    for path in paths:
        m = re.match(r"^(torch|jaxpp|jax|single|cupy|vmm|jaxdist|shell)\.(native|one|two)\.out$",
                     os.path.basename(path))
        if not m:
            continue
        pl = m.group(2)
        for line in open(path, errors="replace"):
            line = line.rstrip("\n")
            if line.startswith("ROW "):
                parts = line.split(" ", 3)
                if len(parts) < 3:
                    continue
                name, status = parts[1], parts[2]
                detail = parts[3] if len(parts) > 3 else ""
                if name not in rows:
                    rows[name] = {}
                    order.append(name)
                old = rows[name].get(pl)
                if old is None or status == "FAIL" or old[0] == "SKIP":
                    rows[name][pl] = (status, detail)
            elif line.startswith("LOSSES "):
                _, name, data = line.split(" ", 2)
                losses.setdefault(name, {})[pl] = json.loads(data)
            elif line.startswith("METRIC "):
                d = json.loads(line[7:])
                metrics[pl][d["name"]] = d
    return rows, order, losses, metrics


def busbw(logs):
    """{place: {bytes: [(median, min, max) per round]}}, {place: [latency per round]}"""
    bw, lat = {p: {} for p in PLACES}, {p: [] for p in PLACES}
    for path in sorted(glob.glob(os.path.join(logs, "busbw.*.out"))):
        m = re.match(r"^busbw\.(native|one|two)\.(\d+)\.out$", os.path.basename(path))
        if not m:
            continue  # the run after the faults is a check, not a sample
        for line in open(path, errors="replace"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "latency_8b_us" in d:
                lat[m.group(1)].append(d["latency_8b_us"])
            elif "bytes" in d:
                bw[m.group(1)].setdefault(d["bytes"], []).append(
                    (d["busbw_gbs"], d.get("busbw_min", d["busbw_gbs"]), d.get("busbw_max", d["busbw_gbs"])))
    return bw, lat


def human(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return "%g %s" % (n / k, unit)
    return "%d B" % n


def loss_cmp(a, b, rtol=1e-4):
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return False, "%d vs %d losses" % (len(b), len(a))
    worst = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b)), default=0.0)
    same = sum(1 for x, y in zip(a, b) if x == y)
    return worst <= rtol, "%d losses, %d identical, worst relative difference %.2g" % (len(a), same, worst)


def rtol_of(name):
    """XLA's autotuner may pick other GEMM configurations from run to run, natively too."""
    return 1e-3 if name.startswith("jax") else 1e-4


def main(argv):
    logs, ngpu = argv[1], int(argv[2]) if len(argv) > 2 else 2
    rows, order, losses, metrics = parse(logs)
    bw, lat = busbw(logs)
    out = ["## Distributed and multi-GPU patterns, %d GPUs (tests/gpu/dist.sh)" % ngpu, "",
           "| pattern | " + " | ".join(TITLE[p] for p in PLACES) + " |",
           "|---|" + "---|" * len(PLACES)]
    fails = 0
    for name in order:
        cells = []
        for p in PLACES:
            st = rows[name].get(p)
            cells.append(st[0] if st else "-")
            if st and st[0] == "FAIL" and p != "native" and not name.startswith("fault_"):
                fails += 1
        out.append("| %s | %s |" % (name, " | ".join(cells)))
    for name, per in sorted(losses.items()):
        cells = []
        for p in PLACES:
            if p == "native":
                cells.append("%d losses" % len(per["native"]) if "native" in per else "-")
                continue
            r = loss_cmp(per.get("native"), per.get(p), rtol_of(name))
            cells.append("-" if r is None else ("same as native" if r[0] else "DIFFER"))
            if r is not None and not r[0]:
                fails += 1
        out.append("| %s losses | %s |" % (name, " | ".join(cells)))
    out += ["", "### Details", ""]
    for name in order:
        for p in PLACES:
            st = rows[name].get(p)
            if st:
                out.append("- %s [%s] %s: %s" % (name, p, st[0], st[1]))
    for name, per in sorted(losses.items()):
        for p in ("one", "two"):
            r = loss_cmp(per.get("native"), per.get(p), rtol_of(name))
            if r is not None:
                out.append("- %s losses [%s]: %s" % (name, p, r[1]))

    out += ["", "### All-reduce bus bandwidth (GB/s: median of the rounds' medians, "
            "min-max over every timed repetition; %d processes)" % ngpu, "",
            "| size | native | one server | one/native | two servers | two/native | target |",
            "|---|---|---|---|---|---|---|"]
    sizes = sorted(set().union(*[set(bw[p]) for p in PLACES]))

    def cell(p, n):
        v = bw[p].get(n)
        if not v:
            return None, "-"
        med = statistics.median(x[0] for x in v)
        return med, "%.2f (%.2f-%.2f)" % (med, min(x[1] for x in v), max(x[2] for x in v))

    for n in sizes:
        nat, nc = cell("native", n)
        o, oc = cell("one", n)
        t, tc = cell("two", n)
        target = 0.95 if n >= (16 << 20) else 0.8 if n >= (1 << 20) else None
        ro = o / nat if nat and o is not None else None
        rt = t / nat if nat and t is not None else None
        mark = ""
        if target is not None and ro is not None:
            mark = ">= %.2fx: %s" % (target, "met" if ro >= target else "MISSED")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            human(n), nc, oc, "%.3f" % ro if ro else "-", tc, "%.3f" % rt if rt else "-", mark))
    tcp = metrics["two"].get("tcp_ceiling")
    if tcp and tcp.get("send"):
        big = max((n for n in bw["two"]), default=None)
        two_big = statistics.median(x[0] for x in bw["two"][big]) if big else None
        line = ("The two servers' network: the veth's raw TCP ceiling between the \"hosts\" "
                "(rgpu-bench-tcp, one connection) %.2f %s sending, %.2f receiving"
                % (tcp["send"], tcp.get("unit") or "", tcp.get("recv") or 0.0))
        if two_big:
            line += "; two-server bus bandwidth at %s: %.2f GB/s" % (human(big), two_big)
        out += ["", line + "."]
    out += ["", "### Latency, step times, replays, copies", "",
            "| measurement | native | one server | two servers | target |", "|---|---|---|---|---|"]

    def med(v):
        return statistics.median(v) if v else None

    ln, lo, lt = (med(lat[p]) for p in PLACES)
    fmt = lambda v, f="%.1f": "-" if v is None else f % v
    tgt = "" if ln is None or lo is None else "<= native + 10 us: %s (%+.1f us)" % (
        "met" if lo <= ln + 10 else "MISSED", lo - ln)
    out.append("| 8-byte all-reduce, waited for (us, median) | %s | %s | %s | %s |" % (
        fmt(ln), fmt(lo), fmt(lt), tgt))
    for key, label, better in (("ddp_step_s", "DDP step (ms)", "time"),
                               ("fsdp_step_s", "FSDP2 step (ms)", "time"),
                               ("vmm_ddp_step_s", "DDP step, expandable segments (ms)", "time"),
                               ("graph_replay_us", "CUDA-graph all-reduce replay (us)", "time"),
                               ("peer_copy_gbs", "peer copy cuda:0 -> cuda:1 (GB/s)", "rate")):
        v = [metrics[p].get(key, {}).get("value") for p in PLACES]
        if all(x is None for x in v):
            continue
        scale = 1e3 if key.endswith("_s") else 1.0
        cells = [fmt(x * scale if x is not None else None, "%.2f") for x in v]
        target = ""
        if v[0] and v[1]:
            ratio = v[0] / v[1] if better == "time" else v[1] / v[0]
            want = 0.9 if key == "peer_copy_gbs" else 0.95
            target = "one/native %.2fx (>= %.2fx: %s)" % (ratio, want, "met" if ratio >= want else "MISSED")
        out.append("| %s | %s | %s | %s | %s |" % (label, cells[0], cells[1], cells[2], target))
    libs = {p: metrics[p].get("nccl_libs", {}).get("value") for p in PLACES}
    if any(libs.values()):
        out += ["", "NCCL libraries mapped in the JAX processes: " +
                "; ".join("%s: %s" % (p, ", ".join(v) if v else "none") for p, v in libs.items() if v is not None)]
    out += ["", "%d rgpu row(s) failed" % fails]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
