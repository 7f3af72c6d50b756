# PyTorch workloads for the benchmark table; prints JSON lines like bench/micro.c.
#   ResNet-50 inference, random weights, fp16, batch 32: images/s (best of 3 blocks of 100),
#     eager and replayed from a CUDA graph (the GPU's own rate)
#   GPT-2 (124M) greedy decode, batch 1, random weights: tokens/s (launch-bound; best of 2)
import json
import sys
import time

import torch


def report(name, value, unit):
    print(json.dumps({"bench": name, "value": round(value, 3), "unit": unit}), flush=True)


def resnet50():
    import torchvision
    model = torchvision.models.resnet50().cuda().half().eval()
    x = torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.half)
    with torch.no_grad():
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        best, n = 0, 100
        for _ in range(3):  # best of 3 blocks: the host's own rate varies between runs
            t = time.perf_counter()
            for _ in range(n):
                model(x)
            torch.cuda.synchronize()
            best = max(best, 32 * n / (time.perf_counter() - t))
    report("resnet50_fp16_b32", best, "images/s")
    report("resnet50_fp16_b32_graph", graph_rate(model, x, n), "images/s")


def graph_rate(model, x, n):
    """The same forward pass captured once in a CUDA graph and replayed (best of 3 blocks of n):
    the rate the GPU itself sustains, with almost no host work per pass. Eager runs that reach
    it are bound by the GPU; natively, eager ResNet-50 falls well short of it (the host issues
    kernels more slowly than the GPU runs them)."""
    g, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        model(x)
    best = 0
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            g.replay()
        torch.cuda.synchronize()
        best = max(best, x.shape[0] * n / (time.perf_counter() - t))
    return best


def gpt2_decode():
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()
    ids = torch.randint(0, 50000, (1, 16), device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                       pad_token_id=0)
        torch.cuda.synchronize()
        best, n = 0, 128
        for _ in range(2):  # best of 2
            t = time.perf_counter()
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 pad_token_id=0)
            torch.cuda.synchronize()
            best = max(best, (out.shape[1] - ids.shape[1]) / (time.perf_counter() - t))
    report("gpt2_decode_b1", best, "tokens/s")


if __name__ == "__main__":
    # Names on the command line run only those (resnet50, gpt2_decode); none: all.
    fns = [f for f in (resnet50, gpt2_decode) if len(sys.argv) < 2 or f.__name__ in sys.argv[1:]]
    for fn in fns:
        try:
            fn()
        except Exception as e:  # report and go on: the table shows what failed
            print(json.dumps({"bench": fn.__name__, "error": str(e)[:200]}), flush=True)
            sys.stderr.write(f"{fn.__name__}: {e}\n")
    # Host memory of this process (natively it includes the driver's own; through rgpu the
    # client's instead), named after the model when one runs alone (bench/run.sh runs each in
    # its own process): its peak, and what it holds at the end, while the driver still has its
    # libraries loaded (cudart unloads them at exit). The difference between native and rgpu at
    # the end is what left the process for the worker; the peak is usually the model's CPU copy.
    import resource
    tag = sys.argv[1] if len(sys.argv) == 2 else "torch"
    report(tag + "_process_peak_rss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "MiB")
    parts = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in ("RssAnon", "RssFile", "RssShmem"):
            parts[key] = int(line.split()[1]) / 1024
    report(tag + "_process_rss", sum(parts.values()), "MiB")
    report(tag + "_process_rss_anon", parts.get("RssAnon", 0), "MiB")
