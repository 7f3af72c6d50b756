# Model parallelism across two devices through whatever libcuda.so.1 comes first: an MLP whose
# first half lives on --dev0 and second half on --dev1, activations moved between them forward
# and gradients backward (cross-device copies), trained with SGD momentum on seeded data.
# Natively on one GPU both halves are on cuda:0; through rgpu with two servers on cuda:0 and
# cuda:1, so every move crosses servers. The losses must agree (torch_train.py --compare).
#   python3 torch_model_parallel.py --dev0 cuda:0 --dev1 cuda:1 [--steps N] [--json]
import argparse
import json
import sys


def main(argv):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dev0", default="cuda:0")
    p.add_argument("--dev1", default="cuda:1")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    first = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU()).to(a.dev0)
    second = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(),
                                 torch.nn.Linear(256, 10)).to(a.dev1)
    opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=0.05,
                          momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 256, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    losses = []
    for _ in range(a.steps):
        opt.zero_grad()
        h = first(x.to(a.dev0))
        out = second(h.to(a.dev1))  # the activation crosses devices; its gradient comes back
        loss = torch.nn.functional.cross_entropy(out, y.to(a.dev1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"model_parallel": losses}) if a.json else
          "\n".join("%.4g" % v for v in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
