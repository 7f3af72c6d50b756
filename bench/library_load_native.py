# Native cost of cuLibraryLoadData, cuLibraryUnload and cuMemGetInfo for the images a gpu-server
# module cache holds (those a workload loaded through rgpu), timed in a torch process with ctypes.
# Usage (on the GPU host, natively): python3 bench/library_load_native.py /tmp/rgpu-cache-UID
import ctypes, glob, os, sys, time, statistics as st
import torch
torch.zeros(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
d = sys.argv[1]
files = [f for f in glob.glob(d + "/**", recursive=True) if os.path.isfile(f)]
print("files", len(files))
rows = []
for f in files:
    data = open(f, "rb").read()
    buf = ctypes.create_string_buffer(data)
    lib = ctypes.c_void_p()
    free, tot = ctypes.c_size_t(), ctypes.c_size_t()
    t0 = time.perf_counter()
    r = cu.cuLibraryLoadData(ctypes.byref(lib), buf, None, None, 0, None, None, 0)
    t1 = time.perf_counter()
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(tot))
    t2 = time.perf_counter()
    if r == 0:
        cu.cuLibraryUnload(lib)
    t3 = time.perf_counter()
    rows.append((len(data), r, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
small = [r for r in rows if r[0] < (1 << 20) and r[1] == 0]
big = [r for r in rows if r[0] >= (1 << 20) and r[1] == 0]
for name, rs in (("small<1MiB", small), ("big", big)):
    if rs:
        print(name, len(rs), "load ms median %.3f max %.3f" % (st.median(r[2] for r in rs), max(r[2] for r in rs)),
              "memgetinfo ms median %.3f" % st.median(r[3] for r in rs), "unload ms median %.3f" % st.median(r[4] for r in rs),
              "bytes median", st.median(r[0] for r in rs))
print("failed", [(r[0], r[1]) for r in rows if r[1] != 0][:10])
