"""Framework workloads for bench/frameworks.sh, one JSON line each:
  hf N     Hugging Face transformers generate(): GPT-2 shaped (12 layers, 768 wide, random
           weights), batch 1, fp16, greedy, the default attention backend (SDPA, which is cuDNN
           attention on Hopper), N new tokens after a 16-token prompt. "cold" is the first
           generate() of the process (every key length new: cuDNN builds its plans, as a user's
           first request does), "warm" a second identical one (lengths seen).
  jax N    a JAX training step (jit, grad, SGD) of a 4-layer MLP (1024 wide, batch 512, fp32):
           the median of N steps after 5 warm-up steps, in ms.
  resnet N torchvision ResNet-50, random weights, batch 32, PyTorch's defaults (eager, cuDNN):
           fp16 inference and an AMP (fp16 autocast, GradScaler, SGD) training step, images/s
           over N iterations after 10 warm-up ones."""
import json
import os
import statistics
import sys
import time


def cpu_calibration_ms():
    """A fixed piece of pure Python: how fast this process's CPU was (hosts differ from process
    to process; compare rows with like calibrations)."""
    t = time.process_time()
    x = 0
    for i in range(300000):
        x += i * i % 7
    return (time.process_time() - t) * 1e3


def hf(new):
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval().cuda().half()
    prompt = torch.randint(0, 50257, (1, 16)).cuda()
    out = {"attn": getattr(model.config, "_attn_implementation", "?"), "tokens": new,
           "calib_ms": cpu_calibration_ms()}
    for rep in ("cold", "warm"):
        torch.cuda.synchronize()
        t, c = time.perf_counter(), time.process_time()
        with torch.no_grad():
            ids = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        torch.cuda.synchronize()
        out[rep + "_tok_s"] = new / (time.perf_counter() - t)
        out[rep + "_cpu_s"] = time.process_time() - c
    out["last_ids"] = ids[0, -4:].tolist()
    return out


def jax_step(n):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    params = [jax.random.normal(keys[i], (1024, 1024)) * 0.03 for i in range(4)]
    x = jax.random.normal(keys[4], (512, 1024))
    y = jax.random.normal(keys[5], (512, 1024))

    def loss(p):
        h = x
        for w in p:
            h = jax.nn.relu(h @ w)
        return jnp.mean((h - y) ** 2)

    @jax.jit
    def step(p):
        g = jax.grad(loss)(p)
        return [a - 0.01 * b for a, b in zip(p, g)]

    for _ in range(5):
        params = step(params)
    jax.block_until_ready(params)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        params = step(params)
        jax.block_until_ready(params)
        times.append((time.perf_counter() - t) * 1e3)
    return {"steps": n, "step_ms": statistics.median(times), "loss": float(loss(params))}


def resnet(n):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    out = {"iterations": n}
    half = model.half().eval()
    with torch.no_grad():
        out["infer_img_s"] = rate(lambda: half(x.half()), n)
    model.float().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    out["train_img_s"] = rate(step, n)
    return out


def rate(fn, n):
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return 32 * n / (time.perf_counter() - t)


if __name__ == "__main__":
    kind, n = sys.argv[1], int(sys.argv[2])
    work = {"hf": hf, "jax": jax_step, "resnet": resnet}[kind]
    print(json.dumps(work(n)), flush=True)

