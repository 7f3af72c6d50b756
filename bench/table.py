"""Turn the benchmark JSON lines of bench/run.sh into a Markdown table and a JSON document."""
import json
import os
import sys

res, modes = sys.argv[1], sys.argv[2:]
data = {}
for mode in modes:
    path = os.path.join(res, f"{mode}.jsonl")
    for line in open(path) if os.path.exists(path) else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        row = data.setdefault(rec["bench"], {"unit": rec.get("unit", "")})
        v, old = rec.get("value", rec.get("error")), row.get(mode)
        # A benchmark run twice in one mode (bench/run.sh runs the PyTorch models natively
        # first and last) keeps its better figure: lower for times and memory, else higher.
        if isinstance(old, (int, float)) and isinstance(v, (int, float)):
            v = min(old, v) if row["unit"] in ("us", "MiB") else max(old, v)
        row[mode] = v

def fmt(v):
    return "" if v is None else (f"{v:,.3f}" if isinstance(v, (int, float)) else str(v)[:40])

def ratio(a, b):
    return f"{b / a:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else ""

head = "| benchmark | unit | native | " + " | ".join(f"rgpu {m} | ratio {m}" for m in modes[1:]) + " |"
lines = ["# rgpu benchmark", "", "Ratios are rgpu / native (for us, lower is better; tcp_* rows"
         " are the raw transport on the same path).", "", head,
         "|" + "---|" * (3 + 2 * (len(modes) - 1))]
for name, rec in data.items():
    cells = [name, rec["unit"], fmt(rec.get("native"))]
    for m in modes[1:]:
        cells += [fmt(rec.get(m)), ratio(rec.get("native"), rec.get(m))]
    lines.append("| " + " | ".join(cells) + " |")

targets = []
def val(name, mode):
    v = data.get(name, {}).get(mode)
    return v if isinstance(v, (int, float)) else None
for m in modes[1:]:
    la, ln = val("launch_async", m), val("launch_async", "native")
    if la and ln:
        targets.append(f"{m}: async launch throughput {la / ln:.2f}x native (target >= 0.9)")
    for d, t in (("htod", "tcp_send"), ("dtoh", "tcp_recv")):
        c, tc = val(f"memcpy_{d}_pinned_1048576KiB", m), val(t, m)
        hot = val(t + "_hot", m)
        if c and tc:
            targets.append(f"{m}: 1 GiB pinned {d} {c:.2f} GiB/s = {c / tc:.2f}x raw TCP {tc:.2f} GiB/s"
                           f" moving a 1 GiB buffer (target >= 0.9)"
                           + (f"; {c / hot:.2f}x its {hot:.2f} GiB/s through one hot 8 MiB buffer" if hot else ""))
    r, tr = val("sync_rtt_median", m), val("tcp_rtt_median", m)
    if r and tr:
        targets.append(f"{m}: sync round trip {r:.1f} us vs raw TCP {tr:.1f} us + 10 = {tr + 10:.1f} us (target: at most that)")
    for b, goal in (("resnet50_fp16_b32", 0.95), ("gpt2_decode_b1", 0.85)):
        x, n = val(b, m), val(b, "native")
        if x and n:
            targets.append(f"{m}: {b} {x / n:.2f}x native (target >= {goal})")
lines += ["", "## Targets", ""] + [f"- {t}" for t in targets]
# Worker memory: bench/run.sh writes one line per loopback session: NAME PEAK_MiB STAGING_MiB.
workers = {}
path = os.path.join(res, "worker_rss.txt")
for line in open(path) if os.path.exists(path) else []:
    f = line.split()
    if len(f) == 3:
        workers[f[0]] = (float(f[1]), float(f[2]))
if workers:
    lines.append("- server: worker peak RSS (pinned staging): " + ", ".join(
        f"{k} {p:.1f} MiB ({g:.0f})" for k, (p, g) in workers.items()))
for bench, what in (("process_peak_rss", "the micro benchmark"),
                    ("resnet50_process_peak_rss", "ResNet-50"),
                    ("gpt2_decode_process_peak_rss", "GPT-2")):
    n, r = val(bench, "native"), val(bench, modes[1] if len(modes) > 1 else "native")
    if n and r:
        lines.append(f"- client: peak RSS of {what} {r:.1f} MiB through rgpu vs {n:.1f} MiB native"
                     f" ({r - n:+.1f} MiB; target: at most +64)")
# A worker holds what a native process holds of the driver for the same program (its context,
# the libraries it loaded and their kernels): that much leaves the client process. What the
# worker adds is its peak less its pinned staging less what left the client, which is the
# process's native RSS less its RSS through rgpu, both taken at its end while the driver still
# has the libraries loaded (the peaks do not compare: a model's peak is its CPU copy).
for model in ("resnet50", "gpt2_decode"):
    n, r = val(model + "_process_rss", "native"), val(model + "_process_rss", "lo")
    w = workers.get("torch-" + model)
    if n and r and w:
        left = n - r
        lines.append(f"- server: the {model} worker's peak {w[0]:.0f} MiB less its {w[1]:.0f} MiB of"
                     f" pinned staging less the {left:.0f} MiB that left the client (native"
                     f" {n:.0f} vs rgpu {r:.0f} MiB at its end) = {w[0] - w[1] - left:+.0f} MiB"
                     f" (target: at most +256)")
md = "\n".join(lines) + "\n"
open(os.path.join(res, "bench-results.md"), "w").write(md)
json.dump({"modes": modes, "results": data, "targets": targets}, open(os.path.join(res, "bench-results.json"), "w"), indent=1)
print(md)
