"""CuPy's NCCL communicator over the GPUs of one process (tests/gpu/dist.sh):
NcclCommunicator.initAll and a grouped allReduce, then one communicator per device made by a
thread each (a blocking init that waits for the other device's), a grouped broadcast over them.
Prints ROW lines as dist_torch.py does."""
import sys
import threading
import traceback


def out(*words):
    print(*words, flush=True)


def main():
    import cupy as cp
    from cupy.cuda import nccl
    n = cp.cuda.runtime.getDeviceCount()
    if n < 2:
        out("ROW", "cupy_nccl", "SKIP", "%d device(s)" % n)
        return 0
    try:
        comms = nccl.NcclCommunicator.initAll(n)
        xs = []
        for i in range(n):
            with cp.cuda.Device(i):
                xs.append(cp.full(1 << 16, i + 1, dtype=cp.float32))
        nccl.groupStart()
        for i, c in enumerate(comms):
            with cp.cuda.Device(i):
                c.allReduce(xs[i].data.ptr, xs[i].data.ptr, xs[i].size, nccl.NCCL_FLOAT32,
                            nccl.NCCL_SUM, cp.cuda.Stream.null.ptr)
        nccl.groupEnd()
        want = n * (n + 1) / 2
        for i in range(n):
            with cp.cuda.Device(i):
                cp.cuda.Device(i).synchronize()
                assert float(xs[i][5]) == want, ("initAll allReduce", i, float(xs[i][5]))
        # a thread per device, each a blocking NcclCommunicator(n, uid, rank)
        uid = nccl.get_unique_id()
        made = [None] * n
        errs = []

        def make(i):
            try:
                with cp.cuda.Device(i):
                    made[i] = nccl.NcclCommunicator(n, uid, i)
            except Exception as e:  # reported below
                errs.append(e)

        ts = [threading.Thread(target=make, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errs and all(m is not None for m in made), ("threads", errs)
        nccl.groupStart()
        for i, c in enumerate(made):
            with cp.cuda.Device(i):
                c.bcast(xs[i].data.ptr, xs[i].size, nccl.NCCL_FLOAT32, n - 1, cp.cuda.Stream.null.ptr)
        nccl.groupEnd()
        for i in range(n):
            with cp.cuda.Device(i):
                cp.cuda.Device(i).synchronize()
                assert float(xs[i][0]) == want, ("bcast", i, float(xs[i][0]))
        for c in list(comms) + made:
            c.destroy()
        out("ROW", "cupy_nccl", "PASS", "NCCL %s: initAll + grouped allReduce, %d threads' "
            "communicators + grouped bcast, values right" % (nccl.get_version(), n))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        out("ROW", "cupy_nccl", "FAIL", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
