"""Kernel parameter layouts as cuFuncGetParamInfo gives them, for every kernel of a cubin: run
natively and through rgpu (whose client reads them from the image, client/api/image_params.c) and
compare the outputs. Usage: python3 param_layouts.py CUBIN NAME..."""
import ctypes
import sys


def main(path, names):
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx, mod = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    image = open(path, "rb").read()
    assert cu.cuInit(0) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image)) == 0
    for name in names:
        f = ctypes.c_void_p()
        assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0, name
        params, i = [], 0
        while True:
            off, size = ctypes.c_size_t(), ctypes.c_size_t()
            if cu.cuFuncGetParamInfo(f, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size)) != 0:
                break
            params.append("%d+%d" % (off.value, size.value))
            i += 1
        print("%s: %s" % (name, " ".join(params) or "(none)"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
