"""One session of bench/share.py (issue 30): builds its workloads, says READY, waits for the
orchestrator's start time, then runs each workload in its own phase of a fixed schedule, all
sessions of a group at the same time, and prints one JSON line per phase.

Workloads (PyTorch, random weights, fp16):
  cpu     ResNet-18, batch 1, eager, the answer read back to the host per request: the host and
          the round trips bound it (CPU-bound); requests/s
  gpu     ResNet-18, batch 4, captured once in a CUDA graph and replayed back to back (batches
          of 8 replays, one batch queued behind the running one, as tests/gpu/tenant_load.cu's
          saturate): the GPU bounds it; replays/s
  gsync   the same graph, each replay followed by a synchronize (a request's answer awaited):
          one session leaves the GPU idle for a round trip per replay, as the issue's
          measurement seems to (1,670 replays/s natively at N=1, 2.2-2.4x that at N=4)
  decode  a GPT-2 shaped decoder (12 layers, 768 wide, 12 heads, 50257-token vocabulary, a
          256-entry KV cache), batch 1: one token's step captured in a CUDA graph (the next
          token and its position stay on the GPU) and replayed back to back like gpu; its
          kernels leave most SMs idle; tokens/s

Usage: share_load.py --start-file F --secs S --gap G --workloads "cpu gpu gsync decode"
       (SHARE_FAKE=1: no torch, each "request" a 2 ms sleep: for checking the orchestrator)
       share_load.py --dry-decode [STEPS]   the decode step on the CPU (torch, no GPU)"""
import argparse
import json
import os
import sys
import time

SLICE = 0.5  # seconds; per-slice counts show how even a session's rate was within the phase
# Every function captured in a CUDA graph, kept for the life of the process: a graph replays
# its kernels on the addresses it was captured with and holds no reference to the tensors
# behind them. Before this, graph_of's caller dropped the function once captured, so the decode
# step's state (token, position, weights, KV cache; only its closure held them) went back to
# PyTorch's caching allocator, the cpu phase's allocations reused that memory, and the decode
# phase's replays indexed the embeddings with garbage: "IndexKernel.cu: index out of bounds",
# a device-side assert, natively and through rgpu, on the H100 (2026-11-27). The ResNet graph's
# input batch was freed the same way (wrong numbers, no assert).
KEEP = []


def emit(obj):
    print(json.dumps(obj), flush=True)


class Phase:
    """Counts units completed in [t0, t0 + secs), per slice."""

    def __init__(self, t0, secs):
        self.t0, self.end = t0, t0 + secs
        self.slices = [0] * max(1, int(round(secs / SLICE)))
        self.count = 0

    def done(self, n, now):
        if self.t0 <= now < self.end:
            self.count += n
            self.slices[min(len(self.slices) - 1, int((now - self.t0) / SLICE))] += n


def wait_until(t):
    while True:
        d = t - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 0.05))


# ---- workloads ---------------------------------------------------------------------------------

class Fake:
    unit = "requests/s"

    def __init__(self, name):
        self.name = name

    def run(self, ph):
        while time.time() < ph.end:
            time.sleep(0.002)
            ph.done(1, time.time())


def build_torch(names):
    import torch
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    dev = torch.device("cuda")
    out = {}

    def saturate(replay, per_batch, ph):
        """Batches of per_batch replays, one queued behind the running one; a batch counts when
        its event is seen complete."""
        ev = [torch.cuda.Event(), torch.cuda.Event()]
        k = 0
        while True:
            for _ in range(per_batch):
                replay()
            ev[k & 1].record()
            if k > 0:
                ev[(k + 1) & 1].synchronize()
                now = time.time()
                ph.done(per_batch, now)
                if now >= ph.end:
                    break
            k += 1
        torch.cuda.synchronize()

    if "cpu" in names or "gpu" in names or "gsync" in names:
        import torchvision
        model = torchvision.models.resnet18().eval().half().to(dev)

    if "cpu" in names:
        x1 = torch.randn(1, 3, 224, 224, device=dev, dtype=torch.half)

        class Cpu:
            unit = "requests/s"

            def run(self, ph):
                with torch.no_grad():
                    while True:
                        model(x1).float().cpu()
                        now = time.time()
                        ph.done(1, now)
                        if now >= ph.end:
                            break
        with torch.no_grad():
            for _ in range(5):
                model(x1).float().cpu()
        out["cpu"] = Cpu()

    def graph_of(fn, warm=3):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warm):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        KEEP.append(fn)  # the tensors the graph reads and writes live as long as it does
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        return g

    if "gpu" in names or "gsync" in names:
        x4 = torch.randn(4, 3, 224, 224, device=dev, dtype=torch.half)
        with torch.no_grad():
            g4 = graph_of(lambda: model(x4))

        class Gsync:
            unit = "replays/s"

            def run(self, ph):
                while True:
                    g4.replay()
                    torch.cuda.current_stream().synchronize()
                    now = time.time()
                    ph.done(1, now)
                    if now >= ph.end:
                        break
        out["gsync"] = Gsync()

        class Gpu:
            unit = "replays/s"

            def run(self, ph):
                saturate(g4.replay, 8, ph)
        out["gpu"] = Gpu()

    if "decode" in names:
        step = decoder(torch, dev)
        gstep = graph_of(step)

        class Decode:
            unit = "tokens/s"

            def run(self, ph):
                saturate(gstep.replay, 16, ph)
                step.check()
        out["decode"] = Decode()
    return out


def decoder(torch, dev, layers=12, width=768, heads=12, vocab=50257, cache=256,
            dtype=None):
    """One batch-1 decode step of a GPT-2 shaped model as a function of device state only
    (capturable): embeds the current token at its position, runs the layers against the KV
    cache, writes the argmax token and the next position back."""
    F = torch.nn.functional
    h16 = dict(device=dev, dtype=dtype or torch.half)
    dh = width // heads

    def w(*shape):
        return torch.randn(*shape, **h16) * 0.02

    wte, wpe = w(vocab, width), w(cache, width)
    L = [dict(ln1=torch.ones(width, **h16), qkv=w(width, 3 * width), bqkv=w(3 * width),
              proj=w(width, width), bproj=w(width), ln2=torch.ones(width, **h16),
              fc=w(width, 4 * width), bfc=w(4 * width), fc2=w(4 * width, width), bfc2=w(width))
         for _ in range(layers)]
    lnf = torch.ones(width, **h16)
    kc = torch.zeros(layers, heads, cache, dh, **h16)
    vc = torch.zeros(layers, heads, cache, dh, **h16)
    tok = torch.zeros(1, dtype=torch.long, device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    idx = torch.arange(cache, device=dev)
    scale = dh ** -0.5

    def step():
        with torch.no_grad():
            x = wte[tok] + wpe[pos]  # (1, width)
            mask = torch.where(idx <= pos, 0.0, float("-inf")).to(h16["dtype"])
            for i, p in enumerate(L):
                h = F.layer_norm(x, (width,), p["ln1"])
                q, k, v = (h @ p["qkv"] + p["bqkv"]).view(3, heads, 1, dh).unbind(0)
                kc[i].index_copy_(1, pos, k)
                vc[i].index_copy_(1, pos, v)
                att = (q @ kc[i].transpose(-1, -2)) * scale + mask  # (heads, 1, cache)
                o = torch.softmax(att.float(), -1).to(h16["dtype"]) @ vc[i]  # (heads, 1, dh)
                x = x + o.reshape(1, width) @ p["proj"] + p["bproj"]
                h = F.layer_norm(x, (width,), p["ln2"])
                x = x + F.gelu(h @ p["fc"] + p["bfc"]) @ p["fc2"] + p["bfc2"]
            logits = F.layer_norm(x, (width,), lnf) @ wte.t()
            tok.copy_(logits.argmax(-1))
            pos.add_(1).remainder_(cache)

    def check():
        """After a phase: the state the graph carries from step to step is still in range (a
        replay on freed memory would show here, or as a device-side assert)."""
        t, p = int(tok.item()), int(pos.item())
        if not (0 <= t < vocab and 0 <= p < cache):
            raise RuntimeError("decode state out of range: token %d (vocab %d), position %d "
                               "(cache %d)" % (t, vocab, p, cache))
    step.check = check
    return step


def dry_decode(steps):
    """The decode step eagerly on the CPU in float32 (no GPU, no graph): shapes, and the token
    and position staying in range over more steps than the cache holds (it wraps)."""
    import torch
    step = decoder(torch, torch.device("cpu"), dtype=torch.float32)
    for _ in range(steps):
        step()
    step.check()
    print("decode dry run: %d steps on the CPU, state in range" % steps)
    return 0


def main():
    if sys.argv[1:2] == ["--dry-decode"]:  # needs torch (CPU is enough), not a GPU
        return dry_decode(int(sys.argv[2]) if len(sys.argv) > 2 else 300)
    ap = argparse.ArgumentParser()
    ap.add_argument("--start-file", required=True)
    ap.add_argument("--secs", type=float, default=3)
    ap.add_argument("--gap", type=float, default=0.7)
    ap.add_argument("--workloads", default="cpu gpu gsync decode")
    a = ap.parse_args()
    names = a.workloads.split()
    t = time.time()
    if os.environ.get("SHARE_FAKE") == "1":
        loads = {n: Fake(n) for n in names}
    else:
        loads = build_torch(names)
    emit({"ready": True, "pid": os.getpid(), "init_s": round(time.time() - t, 2)})
    while not os.path.exists(a.start_file):
        time.sleep(0.02)
    start = float(open(a.start_file).read().strip() or 0)
    for k, n in enumerate(names):
        t0 = start + k * (a.secs + a.gap)
        wait_until(t0)
        ph = Phase(t0, a.secs)
        try:
            loads[n].run(ph)
            emit({"workload": n, "unit": loads[n].unit, "count": ph.count,
                  "rate": ph.count / a.secs, "slices": ph.slices, "late_s":
                  round(max(0.0, time.time() - ph.end), 3)})
        except Exception as e:  # report and go on to the next phase
            emit({"workload": n, "error": str(e)[:300]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
