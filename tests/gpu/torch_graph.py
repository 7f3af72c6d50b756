# A PyTorch CUDA graph (capture, replay with new input) compared with eager execution.
import torch

torch.manual_seed(0)
x = torch.randn(1024, device="cuda")
lin = torch.nn.Linear(1024, 1024).cuda()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = lin(x).relu()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = lin(x).relu()
x.copy_(torch.ones(1024, device="cuda"))
g.replay()
torch.cuda.synchronize()
ref = lin(torch.ones(1024, device="cuda")).relu()
print("cuda graph replay matches eager:", torch.allclose(y, ref, atol=1e-5))
print("PASS")
