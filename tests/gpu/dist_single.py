"""Several GPUs in one PyTorch process (tests/gpu/dist.sh): torch.nn.DataParallel training (its
broadcasts and reductions are NCCL over a communicator of all the devices, ncclCommInitAll and
grouped calls from one thread), torch.cuda.nccl.all_reduce over one tensor per device, and the
peer copy bandwidth between devices 0 and 1 (NVLink within one server). Prints ROW / LOSSES /
METRIC lines as dist_torch.py does."""
import json
import sys
import time
import traceback


def out(*words):
    print(*words, flush=True)


def dataparallel(torch, n):
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to("cuda:0")
    dp = nn.DataParallel(model, device_ids=list(range(n)))
    opt = torch.optim.SGD(dp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(20):
        x = torch.randn(64 * n, 256, generator=gen).to("cuda:0")
        y = torch.randn(64 * n, 256, generator=gen).to("cuda:0")
        loss = nn.functional.mse_loss(dp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out("LOSSES", "dataparallel", json.dumps(losses))
    return "%d devices, 20 steps, loss %.4f -> %.4f" % (n, losses[0], losses[-1])


def nccl_multi(torch, n):
    import torch.cuda.nccl as nccl
    ts = [torch.full((1 << 20,), float(i + 1), device="cuda:%d" % i) for i in range(n)]
    nccl.all_reduce(ts)
    for i in range(n):
        torch.cuda.synchronize(i)
    want = n * (n + 1) / 2
    got = [t[0].item() for t in ts] + [t[-1].item() for t in ts]
    assert all(v == want for v in got), ("torch.cuda.nccl.all_reduce", got, want)
    outs = [torch.empty(1 << 20, device="cuda:%d" % i) for i in range(n)]
    nccl.broadcast(ts, root=0)
    nccl.reduce(ts, outs[0], root=0)
    for i in range(n):
        torch.cuda.synchronize(i)
    assert outs[0][0].item() == n * want, ("torch.cuda.nccl.reduce", outs[0][0].item())
    return "all_reduce, broadcast, reduce over %d devices of one process" % n


def peer_copy(torch, n):
    size = 256 << 20
    a = torch.empty(size, dtype=torch.uint8, device="cuda:0")
    b = torch.empty(size, dtype=torch.uint8, device="cuda:1")
    res = {}
    for name, src, dst in (("0to1", a, b), ("1to0", b, a)):
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        t0 = time.perf_counter()
        for _ in range(10):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        res[name] = round(10 * size / (time.perf_counter() - t0) / 1e9, 2)
    can = torch.cuda.can_device_access_peer(0, 1)
    out("METRIC", json.dumps({"name": "peer_copy_gbs", "value": res["0to1"], "back": res["1to0"],
                              "peer_access": can}))
    return "256 MiB cuda:0 -> cuda:1 %.1f GB/s, back %.1f GB/s (peer access %s)" % (
        res["0to1"], res["1to0"], can)


def main():
    import torch
    n = torch.cuda.device_count()
    for name, fn in (("dataparallel", dataparallel), ("nccl_multi_device", nccl_multi),
                     ("peer_copy", peer_copy)):
        try:
            status, detail = ("PASS", fn(torch, n)) if n >= 2 else ("SKIP", "%d device(s)" % n)
        except Exception as e:
            status, detail = "FAIL", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
            traceback.print_exc(file=sys.stderr)
        out("ROW", name, status, detail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
