"""JAX through rgpu: jit, grad and a small MLP training loop with XLA's autotuning on (Triton
GEMMs, which on Hopper encode tensor maps). Prints the losses (--json) or compares two runs'
losses within a relative tolerance (--compare A B --rtol R): XLA's autotuner may pick different
GEMM configurations from run to run, natively too, so the last digits vary.
Usage: jax_train.py --json > out ; jax_train.py --compare native.json rgpu.json --rtol 1e-4"""
import json
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# XLA's default autotune level (4) checks redzones: a pinned host buffer written by a kernel,
# which rgpu mirrors on the worker (docs/frameworks.md, "Mapped pinned host memory"). A lower
# level in the environment would skip that path: refuse it rather than pass without it.
if "autotune_level" in os.environ.get("XLA_FLAGS", ""):
    sys.exit("jax_train.py: run it with XLA's default autotune level (XLA_FLAGS sets one)")


def train():
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = (jax.random.normal(k1, (256, 512)) * 0.05, jax.random.normal(k2, (512, 10)) * 0.05)
    x = jax.random.normal(k3, (128, 256))
    y = jax.nn.one_hot(jnp.arange(128) % 10, 10)

    def loss(p, x, y):
        h = jax.nn.relu(x @ p[0])
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ p[1]) * y, axis=-1))

    @jax.jit
    def step(p, x, y):
        g = jax.grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    losses = []
    for _ in range(20):
        params = step(params, x, y)
        losses.append(float(loss(params, x, y)))
    return {"device": str(jax.devices()[0].platform), "losses": losses}


def compare(a, b, rtol):
    la, lb = json.load(open(a))["losses"], json.load(open(b))["losses"]
    if len(la) != len(lb):
        sys.exit("different step counts: %d vs %d" % (len(la), len(lb)))
    worst = max(abs(p - q) / max(abs(p), 1e-12) for p, q in zip(la, lb))
    if worst > rtol:
        sys.exit("losses differ: worst relative difference %.3g > %.3g" % (worst, rtol))
    print("20 steps, final loss %.6f vs %.6f, worst relative difference %.2g" % (la[-1], lb[-1], worst))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3], float(sys.argv[5]) if len(sys.argv) > 5 else 1e-4)
    else:
        r = train()
        if r["device"] != "gpu":
            sys.exit("JAX runs on %s, not the GPU" % r["device"])
        print(json.dumps(r))
