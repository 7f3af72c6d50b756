"""CuPy through rgpu: elementwise and reduction kernels (NVRTC-compiled at run time), a matrix
product (cuBLAS), an FFT (cuFFT), a RawKernel and random numbers; prints results rounded so that
native and rgpu output compare as text."""
import cupy as cp

cp.random.seed(0)
a = cp.random.rand(512, 512, dtype=cp.float32)
b = cp.random.rand(512, 512, dtype=cp.float32)
print("sum %.3f" % float(a.sum()))
print("matmul trace %.2f" % float(cp.trace(a @ b)))
print("fft |x|[1] %.3f" % float(cp.abs(cp.fft.fft(a[0]))[1]))
ew = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * x + 2 * y", "rgpu_ew")
print("elementwise %.3f" % float(ew(a, b).mean()))
raw = cp.RawKernel(r'''extern "C" __global__ void scale(float *x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }''', "scale")
v = cp.arange(1000, dtype=cp.float32)
raw((4,), (256,), (v, cp.float32(0.5), cp.int32(1000)))
print("raw kernel %.1f" % float(v.sum()))
print("argmax %d" % int(cp.argmax(a[3])))
print("PASS")
