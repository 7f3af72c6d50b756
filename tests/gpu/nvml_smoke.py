# What a framework reads through NVML, run through rgpu (the bundle's client/ folder holds the
# NVML shim beside libcuda.so.1): the shim must be the libnvidia-ml.so.1 loaded, and its device
# count, names, UUIDs and memory must agree with what PyTorch gets from the CUDA driver API.
# PyTorch's own NVML readers (utilization, list_gpu_processes) need the pynvml package; they are
# printed when it is there. Prints PASS or FAIL last.
import ctypes
import sys

import torch

NVML_SUCCESS, NVML_NOT_SUPPORTED = 0, 3
nv = ctypes.CDLL("libnvidia-ml.so.1")
ok = True


def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


check(hasattr(nv, "rgpuNvmlShim"), "libnvidia-ml.so.1 is rgpu's shim")
check(nv.nvmlInit_v2() == NVML_SUCCESS, "nvmlInit_v2")
count = ctypes.c_uint()
check(nv.nvmlDeviceGetCount_v2(ctypes.byref(count)) == NVML_SUCCESS, "nvmlDeviceGetCount_v2")
check(count.value == torch.cuda.device_count(),
      "device count %d (torch.cuda.device_count %d)" % (count.value, torch.cuda.device_count()))
for i in range(count.value):
    dev = ctypes.c_void_p()
    name = ctypes.create_string_buffer(96)
    uuid = ctypes.create_string_buffer(96)
    mem = Memory()
    util = Utilization()
    nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev))
    nv.nvmlDeviceGetName(dev, name, 96)
    nv.nvmlDeviceGetUUID(dev, uuid, 96)
    props = torch.cuda.get_device_properties(i)
    check(name.value.decode() == props.name, "device %d name %s" % (i, name.value.decode()))
    check(uuid.value.decode()[4:] == str(props.uuid).replace("GPU-", ""),
          "device %d uuid %s" % (i, uuid.value.decode()))
    check(nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem)) == NVML_SUCCESS,
          "device %d memory total %.2f GiB used %.2f GiB free %.2f GiB" %
          (i, mem.total / 2**30, mem.used / 2**30, mem.free / 2**30))
    check(mem.total == torch.cuda.mem_get_info(i)[1], "device %d memory total = cuMemGetInfo total" % i)
    r = nv.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(util))
    check(r in (NVML_SUCCESS, NVML_NOT_SUPPORTED),
          "device %d utilization: %s" % (i, "gpu %d%% memory %d%%" % (util.gpu, util.memory)
                                         if r == NVML_SUCCESS else "not supported"))
x = torch.ones(256 * 2**20, dtype=torch.uint8, device="cuda")  # 256 MiB held by this session
mem = Memory()
dev = ctypes.c_void_p()
nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem))
check(mem.used >= 256 * 2**20, "used after a 256 MiB tensor: %.2f GiB" % (mem.used / 2**30))
try:
    import pynvml  # noqa: F401
    print("torch.cuda.utilization():", torch.cuda.utilization())
    print("torch.cuda.list_gpu_processes():", torch.cuda.list_gpu_processes().replace("\n", " | "))
except ImportError:
    print("pynvml not installed: torch.cuda.utilization/list_gpu_processes not tried")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
