# PyTorch's CUDA runtime features through whatever libcuda.so.1 comes first: memory queries and
# the caching allocator's counters, streams and wait_stream, timing events, CUDA graphs sharing a
# memory pool, pinned non-blocking copies. Prints one "feature: ok" or "feature: value" line per
# check, only deterministic facts, so native and rgpu outputs can be compared line by line; a
# failed check prints "feature: FAIL (detail)" and the last line is PASS or FAIL.
import argparse
import sys

MIB = 2**20


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch CUDA feature checks (deterministic output)")
    p.add_argument("--list", action="store_true", help="print the feature names and exit")
    return p.parse_args(argv)


class Report:
    def __init__(self):
        self.failed = 0

    def ok(self, name, cond, detail=""):
        if cond:
            print("%s: ok" % name)
        else:
            self.failed += 1
            print("%s: FAIL (%s)" % (name, detail))

    def value(self, name, v):
        print("%s: %s" % (name, v))


def check_memory(torch, r):
    torch.cuda.empty_cache()
    free0, total = torch.cuda.mem_get_info()
    r.ok("mem_get_info", 0 < free0 <= total, "free %d total %d" % (free0, total))
    r.value("memory_allocated at start", torch.cuda.memory_allocated())
    a = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
    b = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    r.value("memory_allocated after 4 MiB + 256 MiB (MiB)", torch.cuda.memory_allocated() / MIB)
    r.value("memory_reserved after 4 MiB + 256 MiB (MiB)", torch.cuda.memory_reserved() / MIB)
    free1, _ = torch.cuda.mem_get_info()
    r.ok("mem_get_info free drops by the 256 MiB block", free0 - free1 >= 256 * MIB,
         "dropped %.1f MiB" % ((free0 - free1) / MIB))
    r.value("max_memory_allocated (MiB)", torch.cuda.max_memory_allocated() / MIB)
    del a, b
    r.value("memory_allocated after del (MiB)", torch.cuda.memory_allocated() / MIB)
    torch.cuda.empty_cache()
    r.value("memory_reserved after empty_cache (MiB)", torch.cuda.memory_reserved() / MIB)


def check_streams(torch, r):
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)
    s1.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        y = x * 2
    s2.wait_stream(s1)
    with torch.cuda.stream(s2):
        z = y + 1
    torch.cuda.current_stream().wait_stream(s2)
    expect = torch.arange(1 << 20, dtype=torch.float32) * 2 + 1
    r.ok("streams with wait_stream", torch.equal(z.cpu(), expect), "wrong values")
    r.value("stream priority of the high-priority stream", s2.priority)
    s2.synchronize()
    r.ok("stream query after synchronize", s2.query(), "query() is False")


def check_events(torch, r):
    a = torch.randn(2048, 2048, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        a = a @ a
        a = a / a.norm()
    end.record()
    end.synchronize()
    r.ok("event query after synchronize", end.query(), "query() is False")
    ms = start.elapsed_time(end)
    r.ok("event elapsed_time > 0", ms > 0, "%r ms" % ms)
    e = torch.cuda.Event()
    e.record()
    torch.cuda.current_stream().wait_event(e)
    torch.cuda.synchronize()
    r.ok("torch.cuda.synchronize", True)


def check_graphs(torch, r):
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda().eval()
    static_in = torch.randn(64, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)  # warm-up on a side stream, as PyTorch asks before capture
    torch.cuda.current_stream().wait_stream(side)
    pool = torch.cuda.graph_pool_handle()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.no_grad():
        with torch.cuda.graph(g1, pool=pool):
            out1 = model(static_in)
        with torch.cuda.graph(g2, pool=pool):
            out2 = model(out1).relu()
    gen = torch.Generator().manual_seed(5)
    worst = 0.0
    for _ in range(3):
        new = torch.randn(64, 256, generator=gen).cuda()
        static_in.copy_(new)
        g1.replay()
        g2.replay()
        with torch.no_grad():
            eager1 = model(new)
            eager2 = model(eager1).relu()
        worst = max(worst, (out1 - eager1).abs().max().item(), (out2 - eager2).abs().max().item())
    torch.cuda.synchronize()
    r.ok("cuda graphs (two graphs, one pool) replay matches eager", worst < 1e-4,
         "max abs difference %g" % worst)
    r.value("graph output shape", tuple(out2.shape))


def check_pinned(torch, r):
    host = torch.arange(1 << 22, dtype=torch.float32).pin_memory()
    r.ok("pin_memory", host.is_pinned(), "not pinned")
    dev = host.to("cuda", non_blocking=True)
    back = torch.empty_like(host).pin_memory()
    back.copy_(dev * 3, non_blocking=True)
    torch.cuda.synchronize()
    r.ok("pinned non_blocking round trip", torch.equal(back, host * 3), "wrong values")


CHECKS = [check_memory, check_streams, check_events, check_graphs, check_pinned]


def main(argv):
    args = parse_args(argv)
    if args.list:
        for c in CHECKS:
            print(c.__name__[len("check_"):])
        return 0
    import torch

    r = Report()
    print("cuda available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
    p = torch.cuda.get_device_properties(0)
    print("device: %s, capability %d.%d" % (p.name, p.major, p.minor))
    for c in CHECKS:
        c(torch, r)
    print("PASS" if r.failed == 0 else "FAIL")
    return 0 if r.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
