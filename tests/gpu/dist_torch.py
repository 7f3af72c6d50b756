"""The patterns distributed PyTorch programs run, one process per GPU (under torchrun), natively
or through rgpu (the shim preloaded, the client first): tests/gpu/dist.sh runs it in each
placement and compares. Rank 0 prints one line per result:
  ROW name PASS|FAIL|SKIP detail        a pattern's outcome
  LOSSES name [..]                      a training's losses (compared with native by dist.sh)
  METRIC {"name": .., ...}              a timing (step time, replay time)
Phases (--phases, default all): coll (all_reduce, broadcast, all_gather, reduce_scatter,
all_to_all_single even and uneven, gather, scatter, reduce), p2p (ungrouped isend/irecv, a
pipeline of micro-batches, batch_isend_irecv), graph (all_reduce captured in a CUDA graph and
replayed per "token"), ipc (a custom all-reduce over CUDA IPC buffers of the ranks on one host:
storage._share_cuda_ / _new_shared_cuda, as torch.multiprocessing shares them), ddp, fsdp
(fully_shard). DIST_HOSTS: the host of each rank ("0,0", "0,1", "0,0,1,1"; default all one):
IPC only between ranks of one host. A failing phase prints its row and the run goes on; a
hang is bounded by dist.sh's timeout. --cpu: gloo on the CPU, to check the script itself."""
import argparse
import datetime
import json
import os
import sys
import time
import traceback


def out(*words):
    print(*words, flush=True)


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--phases", default="coll,p2p,graph,ipc,ddp,fsdp")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prefix", default="", help="row name prefix (vmm_ for the VMM run)")
    p.add_argument("--cpu", action="store_true")
    return p.parse_args(argv)


class Ctx:
    pass


def close(a, b, tol=1e-5):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


def phase_coll(c):
    torch, dist, dev, rank, world = c.torch, c.dist, c.dev, c.rank, c.world
    done = []
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    assert close(x[0].item(), world * (world + 1) / 2), ("all_reduce", x[0].item())
    done.append("all_reduce")
    y = torch.full((16,), float(rank), device=dev)
    dist.broadcast(y, src=world - 1)
    assert y[3].item() == world - 1, ("broadcast", y[3].item())
    done.append("broadcast")
    ag = torch.empty(world * 8, device=dev)
    dist.all_gather_into_tensor(ag, torch.full((8,), float(rank), device=dev))
    assert ag.view(world, 8)[:, 0].tolist() == [float(r) for r in range(world)], "all_gather"
    parts = [torch.empty(8, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((8,), float(rank), device=dev))
    assert [p[0].item() for p in parts] == [float(r) for r in range(world)], "all_gather list"
    done.append("all_gather")
    rs = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(4 * world, dtype=torch.float32, device=dev) + rank)
    want = [world * (rank * 4 + i) + world * (world - 1) / 2 for i in range(4)]
    assert rs.tolist() == want, ("reduce_scatter", rs.tolist(), want)
    done.append("reduce_scatter")
    inp = torch.arange(world * 4, dtype=torch.float32, device=dev) + 100 * rank
    o = torch.empty_like(inp)
    dist.all_to_all_single(o, inp)
    want = [100 * j + rank * 4 + i for j in range(world) for i in range(4)]
    assert o.tolist() == want, ("all_to_all_single", o.tolist()[:8])
    done.append("all_to_all_single")
    # uneven: rank r sends j+1 elements to rank j (mixture-of-experts token routing)
    send = [j + 1 for j in range(world)]
    recv = [rank + 1] * world
    inp = torch.arange(sum(send), dtype=torch.float32, device=dev) + 1000 * rank
    o = torch.empty(sum(recv), device=dev)
    dist.all_to_all_single(o, inp, output_split_sizes=recv, input_split_sizes=send)
    off = sum(k + 1 for k in range(rank))
    want = [1000 * j + off + i for j in range(world) for i in range(rank + 1)]
    assert o.tolist() == want, ("all_to_all_single uneven", o.tolist()[:8])
    done.append("all_to_all_single uneven")
    t = torch.full((4,), float(rank), device=dev)
    gl = [torch.empty(4, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(t, gl, dst=0)
    if rank == 0:
        assert [g[0].item() for g in gl] == [float(r) for r in range(world)], "gather"
    done.append("gather")
    t = torch.empty(4, device=dev)
    sl = [torch.full((4,), 10.0 + r, device=dev) for r in range(world)] if rank == 0 else None
    dist.scatter(t, sl, src=0)
    assert t[0].item() == 10.0 + rank, ("scatter", t[0].item())
    done.append("scatter")
    t = torch.full((4,), float(rank + 1), device=dev)
    dist.reduce(t, dst=0)
    if rank == 0:
        assert close(t[0].item(), world * (world + 1) / 2), ("reduce", t[0].item())
    done.append("reduce")
    dist.barrier()
    return "values right: " + ", ".join(done)


def phase_p2p(c):
    torch, dist, dev, rank, world = c.torch, c.dist, c.dev, c.rank, c.world
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # ungrouped isend / irecv around the ring
    a = torch.full((1 << 16,), float(rank), device=dev)
    b = torch.empty_like(a)
    if rank % 2 == 0:
        reqs = [dist.isend(a, nxt), dist.irecv(b, prv)]
    else:
        reqs = [dist.irecv(b, prv), dist.isend(a, nxt)]
    for r in reqs:
        r.wait()
    assert b[7].item() == float(prv), ("isend/irecv", b[7].item())
    # a pipeline: stage r gets activations from r-1, adds its part, passes them to r+1
    micro = 4
    acts = [torch.zeros(1 << 14, device=dev) for _ in range(micro)]
    for m in range(micro):
        if rank > 0:
            dist.recv(acts[m], rank - 1)
        acts[m] += rank + m
        if rank < world - 1:
            dist.send(acts[m], rank + 1)
    if rank == world - 1:
        want = [sum(r + m for r in range(world)) for m in range(micro)]
        assert [v[0].item() for v in acts] == want, ("pipeline", [v[0].item() for v in acts])
    # batch_isend_irecv: both directions around the ring in one batch
    s1, s2 = torch.full((1024,), 10.0 + rank, device=dev), torch.full((1024,), 20.0 + rank, device=dev)
    r1, r2 = torch.empty_like(s1), torch.empty_like(s2)
    ops = [dist.P2POp(dist.isend, s1, nxt), dist.P2POp(dist.irecv, r1, prv),
           dist.P2POp(dist.isend, s2, prv), dist.P2POp(dist.irecv, r2, nxt)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    assert r1[0].item() == 10.0 + prv and r2[0].item() == 20.0 + nxt, "batch_isend_irecv"
    c.torch.cuda.synchronize()
    dist.barrier()
    return "ungrouped isend/irecv ring, %d-stage pipeline of %d micro-batches, batch_isend_irecv" % (
        world, micro)


def phase_graph(c):
    torch, dist, dev, rank, world = c.torch, c.dist, c.dev, c.rank, c.world
    inp = torch.zeros(4096, device=dev)
    o = torch.zeros_like(inp)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, as serving engines do
        for _ in range(3):
            o.copy_(inp)
            dist.all_reduce(o)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o.copy_(inp)
        dist.all_reduce(o)
    for k in range(20):
        inp.fill_(float(rank + k))
        g.replay()
        torch.cuda.synchronize()
        want = world * k + world * (world - 1) / 2
        assert close(o[0].item(), want), ("replay", k, o[0].item(), want)
    n = 200
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):  # one replay per "token", not waited for
        g.replay()
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / n * 1e6
    if rank == 0:
        out("METRIC", json.dumps({"name": "graph_replay_us", "value": round(us, 2)}))
    dist.barrier()
    return "20 replays right; %.1f us per replay (200 back to back)" % us


def phase_ipc(c):
    torch, dist, dev, rank, world = c.torch, c.dist, c.dev, c.rank, c.world
    hosts = c.hosts
    mine = [r for r in range(world) if hosts[r] == hosts[rank]]
    n = 1 << 20
    buf = torch.full((n,), float(rank + 1), device=dev)
    torch.cuda.synchronize()
    # Shared only where a peer on this host opens it: a share nobody opens stays in PyTorch's
    # limbo to the process's exit, whose destructor crashed there (two servers, one rank per
    # "host": tests/gpu/results/2026-11-28-s14-h100x2-dist.md).
    handle = buf.untyped_storage()._share_cuda_() if len(mine) > 1 else None
    got = [None] * world
    dist.all_gather_object(got, (rank, handle))
    acc = buf.clone()
    opened = []
    for r, h in got:
        if r == rank or hosts[r] != hosts[rank]:
            continue
        st = torch.UntypedStorage._new_shared_cuda(*h)
        peer = torch.empty((0,), dtype=torch.float32, device=st.device).set_(st, 0, (n,), (1,))
        opened.append(peer)
        acc += peer.to(dev, non_blocking=True)  # a peer read over NVLink
    torch.cuda.synchronize()
    want = float(sum(r + 1 for r in mine))
    ok = close(acc[0].item(), want) and close(acc[-1].item(), want)
    dist.barrier()  # peers done reading before the buffers go
    del opened
    assert ok, ("ipc all-reduce", acc[0].item(), want)
    if len(mine) == 1:
        return "SKIP", "no other rank on this host (ranks on hosts %s)" % hosts
    return "PASS", "ranks %s of host %d summed over IPC buffers (%g)" % (mine, hosts[rank], want)


def train(c, kind):
    torch, dist, dev, rank, world = c.torch, c.dist, c.dev, c.rank, c.world
    nn = torch.nn
    torch.manual_seed(0)
    layers = [nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
              for _ in range(4)]
    model = nn.Sequential(*layers).to(dev)
    if kind == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=None if c.cpu else [dev])
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1234 + rank)
    losses, times = [], []
    steps = c.args.steps if kind == "ddp" else max(10, c.args.steps * 2 // 3)
    for step in range(steps):
        x = torch.randn(16, 64, 256, generator=gen).to(dev)
        y = torch.randn(16, 64, 256, generator=gen).to(dev)
        t0 = time.perf_counter()
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        v = avg.item() / world  # waits for the step
        times.append(time.perf_counter() - t0)
        losses.append(v)
    steady = sorted(times[3:])
    med = steady[len(steady) // 2]
    if rank == 0:
        out("LOSSES", c.args.prefix + kind, json.dumps(losses))
        out("METRIC", json.dumps({"name": c.args.prefix + kind + "_step_s", "value": round(med, 5)}))
    dist.barrier()
    return "%d steps, loss %.4f -> %.4f, median step %.1f ms" % (steps, losses[0], losses[-1], med * 1e3)


def main(argv):
    args = parse(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import torch
    import torch.distributed as dist
    c = Ctx()
    c.torch, c.dist, c.args, c.cpu = torch, dist, args, args.cpu
    c.rank, c.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    hosts = os.environ.get("DIST_HOSTS", "")
    c.hosts = [int(h) for h in hosts.split(",")] if hosts else [0] * c.world
    if args.cpu:
        c.dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    else:
        c.dev = torch.device("cuda", local)
        torch.cuda.set_device(c.dev)
        dist.init_process_group("nccl", device_id=c.dev, timeout=datetime.timedelta(seconds=120))
    phases = {"coll": ("collectives", phase_coll), "p2p": ("p2p", phase_p2p),
              "graph": ("cuda_graph_allreduce", phase_graph), "ipc": ("ipc_allreduce", phase_ipc),
              "ddp": ("ddp", lambda c: train(c, "ddp")), "fsdp": ("fsdp2", lambda c: train(c, "fsdp"))}
    for key in args.phases.split(","):
        name, fn = phases[key]
        if args.cpu and key in ("graph", "ipc"):
            continue
        try:
            res = fn(c)
            status, detail = res if isinstance(res, tuple) else ("PASS", res)
        except Exception as e:  # the row says why; later phases may still run
            status, detail = "FAIL", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
            traceback.print_exc(file=sys.stderr)
        try:  # a rank's failure fails the row (rank 0 prints it)
            bad = torch.tensor([1.0 if status == "FAIL" else 0.0], device=c.dev)
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
            if bad.item() > 0 and status != "FAIL":
                status, detail = "FAIL", "another rank failed: " + detail
        except Exception:
            pass
        if c.rank == 0:
            out("ROW", args.prefix + name, status, detail)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
