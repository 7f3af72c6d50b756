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
