"""Per-process view of a bench/frameworks.sh run made with FW_SAMPLE=1: for each hf row, its
cold tokens/s, the CPU time of its cold generate(), the CPU time the stack sampler found under
nvrtcCompileProgram (the same compiles, from the same cache, natively and through rgpu: a gauge
of how fast that process's CPU was), and the cold wall time per second of that NVRTC time. The
host's CPU speed changes from process to process (the same NVRTC work takes 2.2-6.2 s); the last
column compares native and rgpu with that taken out.
Usage: python3 bench/fw_samples.py DIR   (DIR holds frameworks.jsonl and fw-sample-* files)"""
import glob
import json
import re
import statistics
import sys


def nvrtc_ms(path_glob):
    best = None
    for path in glob.glob(path_glob):  # the python process is the one with the most CPU
        text = open(path).read()
        total = int(re.search(r"(\d+) periods", text).group(1))
        if best is None or total > best[0]:
            best = (total, text)
    if best is None:
        return None
    m = re.search(r"\n\s*(\d+)\s+[\d.]+%\s+libnvrtc\.so\.13!nvrtcCompileProgram", best[1])
    return int(m.group(1)) if m else None


def main(d):
    rows = [json.loads(l) for l in open(d + "/frameworks.jsonl") if '"result"' in l]
    per_mode = {"native": [], "rgpu": []}
    print("| mode | run | cold tok/s | cold CPU s | NVRTC CPU s | cold wall s per NVRTC CPU s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        res = r.get("result")
        if r.get("workload") != "hf" or not res:
            continue
        ms = nvrtc_ms("%s/fw-sample-%s-%s-hf.*" % (d, r["mode"], r["run"]))
        wall = res["tokens"] / res["cold_tok_s"]
        ratio = wall / (ms / 1e3) if ms else None
        if ratio:
            per_mode[r["mode"]].append(ratio)
        print("| %s | %s | %.2f | %.2f | %s | %s |" % (r["mode"], r["run"], res["cold_tok_s"],
              res.get("cold_cpu_s", float("nan")), "%.2f" % (ms / 1e3) if ms else "-",
              "%.3f" % ratio if ratio else "-"))
    if per_mode["native"] and per_mode["rgpu"]:
        n, g = statistics.median(per_mode["native"]), statistics.median(per_mode["rgpu"])
        print("\nmedian cold wall s per NVRTC CPU s: native %.3f, rgpu %.3f: rgpu/native %.3fx"
              % (n, g, n / g))


if __name__ == "__main__":
    main(sys.argv[1])
