# torch.distributed with the nccl backend, through whatever libnccl.so.2 / libcuda.so.1 the
# process gets (natively, or rgpu's shim preloaded and its client first): checks all_reduce,
# broadcast, all_gather, reduce_scatter and barrier values, then trains a small seeded model
# with DistributedDataParallel and prints rank 0's losses (--json: raw, for --compare).
# World size 1 when started alone; under torchrun, its WORLD_SIZE. --kill-rank R --kill-step S:
# rank R exits abruptly at step S (the others must fail, not hang: exit status 3 when they do).
import argparse
import datetime
import json
import os
import sys


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--json", action="store_true")
    p.add_argument("--compare", nargs=2, metavar=("NATIVE", "RGPU"))
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0, help="process group timeout (s)")
    return p.parse_args(argv)


def compare(a, b, rtol):
    la, lb = (json.load(open(p))["losses"] for p in (a, b))
    if len(la) != len(lb):
        return False, "step counts differ: %d vs %d" % (len(la), len(lb))
    worst = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)), default=0.0)
    return worst <= rtol, "%d losses, worst relative difference %.3g (rtol %g)" % (len(la), worst, rtol)


def check_collectives(torch, dist, rank, world, dev):
    x = torch.full((1024,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    assert x[0].item() == world * (world + 1) / 2, x[0].item()
    y = torch.full((16,), float(rank), device=dev)
    dist.broadcast(y, src=world - 1)
    assert y[3].item() == world - 1
    parts = [torch.empty(8, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((8,), float(rank), device=dev))
    assert [p[0].item() for p in parts] == [float(r) for r in range(world)]
    out = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(out, torch.ones(4 * world, device=dev))
    assert out[0].item() == world
    dist.barrier()


def main(argv):
    args = parse_args(argv)
    if args.compare:
        ok, msg = compare(*args.compare, args.rtol)
        print(msg)
        return 0 if ok else 1
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev,
                            timeout=datetime.timedelta(seconds=args.timeout))
    check_collectives(torch, dist, rank, world, dev)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1234 + rank)
    losses = []
    for step in range(args.steps):
        if rank == args.kill_rank and step == args.kill_step:
            os._exit(9)
        x = torch.randn(128, 64, generator=g).to(dev)
        t = torch.randint(0, 10, (128,), generator=g).to(dev)
        loss = nn.functional.cross_entropy(ddp(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        losses.append(avg.item() / world)
    dist.destroy_process_group()
    if rank == 0:
        if args.json:
            print(json.dumps({"world": world, "losses": losses}))
        else:
            for v in losses:
                print("%.4g" % v)
    return 0


if __name__ == "__main__":
    if "--kill-rank" in sys.argv and "--compare" not in sys.argv:
        try:
            sys.exit(main(sys.argv[1:]))
        except Exception as e:  # the survivor's error: what the kill test wants to see
            print("collective failed: %s" % str(e).splitlines()[0] if str(e) else repr(e),
                  file=sys.stderr)
            os._exit(3)
    sys.exit(main(sys.argv[1:]))
