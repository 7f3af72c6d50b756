"""JAX/XLA over several GPUs (tests/gpu/dist.sh), natively or through rgpu.
  local: every GPU of one process: pmap with psum, a jit over a NamedSharding (XLA inserts the
         collectives), a data-parallel training step (losses printed for comparison), and last
         a ppermute (XLA's collective-permute: NCCL send/recv).
  multi: jax.distributed across processes (DIST_COORD, DIST_NPROC, DIST_PID): pmap with psum
         over every process's devices, and a jit over a sharding of all of them.
Prints ROW / LOSSES / METRIC lines as dist_torch.py does; METRIC nccl_libs names the libnccl
files mapped into the process (which NCCL XLA used)."""
import json
import os
import sys
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def out(*words):
    print(*words, flush=True)


def run(name, fn):
    try:
        status, detail = "PASS", fn()
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        status, detail = "FAIL", "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
    out("ROW", name, status, detail)


def nccl_libs():
    try:
        libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l})
    except OSError:
        libs = []
    out("METRIC", json.dumps({"name": "nccl_libs", "value": libs}))


def make_mesh(jax, np):
    """A 1-D mesh of every device, its axis in XLA's automatic sharding mode (Mesh's default)."""
    from jax.sharding import Mesh
    return Mesh(np.array(jax.devices()), ("d",))


def local(jax, jnp, np):
    n = jax.local_device_count()

    def pmap_psum():
        x = jnp.arange(n * 4, dtype=jnp.float32).reshape(n, 4)
        y = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
        want = np.arange(n * 4, dtype=np.float32).reshape(n, 4).sum(0)
        assert np.allclose(np.asarray(y), np.broadcast_to(want, (n, 4))), np.asarray(y)
        return "%d devices, psum right" % n

    def sharded_jit():
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = make_mesh(jax, np)
        a = np.arange(n * 8 * 128, dtype=np.float32).reshape(n * 8, 128) / 1000.0
        x = jax.device_put(a, NamedSharding(mesh, P("d", None)))
        hi = jax.lax.Precision.HIGHEST  # float32 products (the default may take TF32)
        y = jax.jit(lambda v: jnp.matmul(v, v.T, precision=hi).sum(axis=0))(x)
        want = (a.astype(np.float64) @ a.T.astype(np.float64)).sum(axis=0)
        assert np.allclose(np.asarray(y), want, rtol=1e-3), "sharded matmul"
        return "a (%d, 128) array sharded over %d devices: matmul and reduction right" % (n * 8, n)

    def dp_step():
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = make_mesh(jax, np)
        k = jax.random.PRNGKey(0)
        k1, k2, k3 = jax.random.split(k, 3)
        params = (jax.random.normal(k1, (128, 256)) * 0.05, jax.random.normal(k2, (256, 8)) * 0.05)
        rep = NamedSharding(mesh, P())
        params = jax.device_put(params, rep)
        xs = jax.device_put(jax.random.normal(k3, (n * 32, 128)), NamedSharding(mesh, P("d")))
        ys = jax.device_put(jax.nn.one_hot(jnp.arange(n * 32) % 8, 8), NamedSharding(mesh, P("d")))

        def loss(p, x, y):
            h = jax.nn.relu(x @ p[0])
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ p[1]) * y, axis=-1))

        @jax.jit
        def step(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)  # the mean over the sharded batch: all-reduce
            return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), l

        losses = []
        for _ in range(10):
            params, l = step(params, xs, ys)
            losses.append(float(l))
        out("LOSSES", "jax_dp_step", json.dumps(losses))
        return "10 steps, loss %.4f -> %.4f" % (losses[0], losses[-1])

    def ppermute():
        x = jnp.arange(n, dtype=jnp.float32).reshape(n, 1)
        perm = [(j, (j + 1) % n) for j in range(n)]
        y = jax.pmap(lambda v: jax.lax.ppermute(v, "i", perm), axis_name="i")(x)
        want = np.roll(np.arange(n, dtype=np.float32), 1).reshape(n, 1)
        assert np.allclose(np.asarray(y), want), np.asarray(y)
        return "a ring shift over %d devices right" % n

    # DIST_JAX_PPERMUTE: "0" leaves ppermute out, "only" runs it alone (dist.sh runs it apart,
    # under a short timeout: a first send/recv between devices of one session hung through rgpu
    # until the worker connected a session-held clique's pairs at creation, docs/nccl.md
    # "Point-to-point pairs"; a clique used before its last rank was made still can).
    pp = os.environ.get("DIST_JAX_PPERMUTE", "1")
    if pp != "only":
        run("jax_pmap_psum", pmap_psum)
        nccl_libs()
        run("jax_sharded_jit", sharded_jit)
        run("jax_dp_step", dp_step)
    if pp != "0":
        run("jax_ppermute", ppermute)


def multi(jax, jnp, np):
    nproc, pid = int(os.environ["DIST_NPROC"]), int(os.environ["DIST_PID"])
    jax.distributed.initialize(coordinator_address=os.environ["DIST_COORD"], num_processes=nproc,
                               process_id=pid)
    n, nl = jax.device_count(), jax.local_device_count()

    def psum():
        x = jnp.full((nl, 4), float(pid + 1))
        y = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
        want = float(sum((p + 1) * (n // nproc) for p in range(nproc)))
        assert np.allclose(np.asarray(y), want), np.asarray(y)
        return "%d processes, %d devices: psum right (%g)" % (nproc, n, want)

    def global_jit():
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = make_mesh(jax, np)
        sh = NamedSharding(mesh, P("d"))
        a = np.arange(n * 16, dtype=np.float32)
        x = jax.make_array_from_callback(a.shape, sh, lambda idx: a[idx])
        y = jax.jit(lambda v: jnp.sum(v * 2.0), out_shardings=NamedSharding(mesh, P()))(x)
        assert np.allclose(float(y), float(a.sum() * 2.0)), float(y)
        return "a sum over %d devices of %d processes right" % (n, nproc)

    run("jax_distributed_psum", psum)
    nccl_libs()
    run("jax_distributed_jit", global_jit)
    jax.distributed.shutdown()


def main():
    import jax
    import jax.numpy as jnp
    import numpy as np
    (multi if sys.argv[1:2] == ["multi"] else local)(jax, jnp, np)
    return 0


if __name__ == "__main__":
    sys.exit(main())
