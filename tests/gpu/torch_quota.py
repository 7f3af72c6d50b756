# Run with a 4 GiB tenant quota: PyTorch must see 4 GiB and fail cleanly beyond it.
import torch

free, total = torch.cuda.mem_get_info()
print("mem_get_info total GiB:", total / 2**30)
x = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    print("allocated beyond the quota: FAIL")
except torch.OutOfMemoryError:
    print("out of memory beyond the quota: yes")
z = torch.ones(1024, device="cuda").sum().item()
print("still works after OOM:", z == 1024.0)
print("PASS" if total == 4 * 2**30 and z == 1024.0 else "FAIL")
