# PyTorch workloads for the benchmark table; prints JSON lines like bench/micro.c.
#   ResNet-50 inference, random weights, fp16, batch 32: images/s
#   GPT-2 (124M) greedy decode, batch 1, random weights: tokens/s (launch-bound)
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
        t, n = time.perf_counter(), 100
        for _ in range(n):
            model(x)
        torch.cuda.synchronize()
    report("resnet50_fp16_b32", 32 * n / (time.perf_counter() - t), "images/s")


def gpt2_decode():
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()
    ids = torch.randint(0, 50000, (1, 16), device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                       pad_token_id=0)
        torch.cuda.synchronize()
        t, n = time.perf_counter(), 128
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=0)
        torch.cuda.synchronize()
    report("gpt2_decode_b1", (out.shape[1] - ids.shape[1]) / (time.perf_counter() - t),
           "tokens/s")


if __name__ == "__main__":
    for fn in (resnet50, gpt2_decode):
        try:
            fn()
        except Exception as e:  # report and go on: the table shows what failed
            print(json.dumps({"bench": fn.__name__, "error": str(e)[:200]}), flush=True)
            sys.stderr.write(f"{fn.__name__}: {e}\n")
    # Host memory of this process (natively it includes the driver's own; through rgpu the
    # client's instead): the difference is what rgpu adds to a PyTorch process.
    import resource
    report("torch_process_peak_rss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "MiB")
