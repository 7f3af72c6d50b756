"""Faults for tests/gpu/dist.sh: ranks all-reduce 64 MiB in a loop (PyTorch, one process per GPU,
RANK/WORLD_SIZE/LOCAL_RANK from the environment, process group timeout 600 s); rank 0 writes
the step it reached to --progress every 10 steps. --kill-rank R --kill-step S: rank R exits
abruptly (os._exit) at step S, in the middle of the ranks' all-reduces. A survivor whose
collective fails prints "ERROR <seconds since its last good step> <what>" and exits 3 (PyTorch
may also end it with SIGABRT from its watchdog: dist.sh takes any non-zero end as the error).
--steps bounds the loop (a run nobody kills ends by itself)."""
import argparse
import datetime
import os
import sys
import time


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=30)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--progress", default="")
    a = p.parse_args(argv)
    import torch
    import torch.distributed as dist
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=600))
    x = torch.ones(16 << 20, device=dev)
    last = time.time()
    try:
        for step in range(a.steps):
            if rank == a.kill_rank and step == a.kill_step:
                os._exit(9)
            dist.all_reduce(x)
            x.div_(2.0)
            torch.cuda.synchronize()
            last = time.time()
            if rank == 0 and a.progress and step % 10 == 0:
                with open(a.progress + ".tmp", "w") as f:
                    f.write("%d %.3f\n" % (step, last))
                os.replace(a.progress + ".tmp", a.progress)
    except Exception as e:
        print("ERROR %.2f %s" % (time.time() - last, str(e).splitlines()[0][:200] if str(e) else repr(e)),
              flush=True)
        os._exit(3)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
