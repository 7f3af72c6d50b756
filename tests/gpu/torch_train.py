# Deterministic PyTorch training through whatever libcuda.so.1 comes first: a small CNN (conv,
# batch norm, ReLU, pooling, linear) under bfloat16 autocast with AdamW, and an MLP in fp32 with
# SGD momentum, on seeded random data. Prints the losses, one per line, rounded to 4 significant
# digits; --json prints the raw losses instead, and --compare checks two such files within a
# relative tolerance (that mode needs no torch or GPU), so run.sh can compare native and rgpu.
import argparse
import json
import math
import os
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30, help="training steps per model (default 30)")
    p.add_argument("--json", action="store_true", help="print the raw losses as one JSON object")
    p.add_argument("--compare", nargs=2, metavar=("NATIVE", "RGPU"),
                   help="compare two --json outputs instead of training")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance for --compare")
    p.add_argument("--device", default="cuda", help="torch device (cpu: a dry run without a GPU)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def compare(native_path, rgpu_path, rtol):
    """Returns (ok, message): same models, same step counts, every loss within rtol."""
    try:
        with open(native_path) as f:
            a = json.load(f)
        with open(rgpu_path) as f:
            b = json.load(f)
    except (OSError, ValueError) as e:
        return False, "cannot read the loss files: %s" % e
    if sorted(a) != sorted(b):
        return False, "different models: %s vs %s" % (sorted(a), sorted(b))
    worst = 0.0
    for name in sorted(a):
        la, lb = a[name], b[name]
        if len(la) != len(lb):
            return False, "%s: %d losses native, %d rgpu" % (name, len(la), len(lb))
        for i, (x, y) in enumerate(zip(la, lb)):
            if not (math.isfinite(x) and math.isfinite(y)):
                return False, "%s step %d: non-finite loss (native %r, rgpu %r)" % (name, i, x, y)
            rel = abs(x - y) / max(abs(x), 1e-12)
            if rel > rtol:
                return False, "%s step %d: native %.6g rgpu %.6g (relative difference %.2e > %.0e)" % (
                    name, i, x, y, rel, rtol)
            worst = max(worst, rel)
    n = sum(len(v) for v in a.values())
    return True, "%d losses within rtol %.0e (largest relative difference %.2e)" % (n, rtol, worst)


def set_determinism(torch):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # warn_only: an op without a deterministic CUDA kernel warns on stderr instead of failing.
    torch.use_deterministic_algorithms(True, warn_only=True)


def train_cnn(torch, steps, dev):
    nn = torch.nn
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, 32, 32, generator=gen).to(dev)
    y = torch.randint(0, 10, (32,), generator=gen).to(dev)
    torch.manual_seed(2)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_mlp(torch, steps, dev):
    nn = torch.nn
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(256, 128, generator=gen).to(dev)
    y = torch.randn(256, 1, generator=gen).to(dev)
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv):
    args = parse_args(argv)
    if args.compare:
        ok, msg = compare(args.compare[0], args.compare[1], args.rtol)
        print(("PASS " if ok else "FAIL ") + msg)
        return 0 if ok else 1
    # cuBLAS is deterministic only with a fixed workspace configuration; set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    set_determinism(torch)
    losses = {"cnn_bf16_adamw": train_cnn(torch, args.steps, args.device),
              "mlp_fp32_sgd": train_mlp(torch, args.steps, args.device)}
    if args.json:
        print(json.dumps(losses, sort_keys=True))
        return 0
    for name in sorted(losses):
        for i, v in enumerate(losses[name]):
            print("%s step %2d loss %.4g" % (name, i, v))
    first, last = losses["cnn_bf16_adamw"][0], losses["cnn_bf16_adamw"][-1]
    print("cnn loss decreased:", last < first)
    print("PASS" if last < first else "FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
