# PyTorch through whatever libcuda.so.1 comes first: prints only deterministic facts, so the
# output through rgpu can be compared with the native one.
import torch

torch.manual_seed(0)
print("cuda available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
x = torch.randn(512, 512)
print("matmul matches CPU:", torch.allclose((x.cuda() @ x.cuda()).cpu(), x @ x, atol=1e-2, rtol=1e-3))
conv = torch.nn.Conv2d(3, 16, 3)
img = torch.randn(4, 3, 64, 64)
ref = conv(img)
out = conv.cuda()(img.cuda()).cpu()
print("conv2d (cuDNN) matches CPU:", torch.allclose(out, ref, atol=1e-3, rtol=1e-3))
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
data = torch.randn(64, 64)
m_gpu = torch.nn.Sequential(*[l for l in m]).cuda()
loss = m_gpu(data.cuda()).pow(2).mean()
loss.backward()
print("mlp loss matches CPU:", abs(loss.item() - m.cpu()(data).pow(2).mean().item()) < 1e-4)
print("grad finite:", bool(torch.isfinite(m_gpu[0].weight.grad).all()))
print("PASS")
