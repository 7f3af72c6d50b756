"""torch.compile through rgpu: a small model compiled by Inductor (Triton kernels built and
loaded at run time), forward and backward; prints results rounded for a text comparison."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                            torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step_model = torch.compile(model)
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
for i in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(step_model(x), y)
    loss.backward()
    opt.step()
    if i % 3 == 0:
        print("step %d loss %.4f" % (i, loss.item()))
print("final loss %.4f" % loss.item())
print("PASS")
