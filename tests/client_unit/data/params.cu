#include <cuda.h>

// Kernels whose parameter layouts test_image_params.c reads from nvcc's cubin and fatbin.
struct Three { char c[3]; };
struct __align__(16) Wide { float f[12]; };

extern "C" __global__ void mixed(int a, double *p, char c, Three t, Wide w, short h)
{
    if (a)
        p[0] = c + t.c[1] + w.f[3] + h;
}

extern "C" __global__ void none() {}

extern "C" __global__ void wide(Wide a, Wide b, Wide c, int *o)
{
    o[0] = (int)(a.f[0] + b.f[1] + c.f[11]);
}

template <typename T> __global__ void fill(T *x, T y) { x[0] = y; }
template __global__ void fill<float>(float *, float);

// A grid-constant tensor map (64-byte aligned) after a char: nvcc leaves 111 bytes of padding.
extern "C" __global__ void tensor_map(char c, const __grid_constant__ CUtensorMap m, int *o)
{
    if (c)
        o[0] = ((const int *)&m)[3];
}

struct __align__(32) Aligned32 { double d[4]; };

extern "C" __global__ void aligned32(char c, Aligned32 a, short s)
{
    if (c)
        a.d[0] += s;
}
