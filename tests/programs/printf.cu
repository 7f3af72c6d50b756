// Device-side printf: what kernels print appears on the program's stdout, in order with the
// host's own output.
#include "common.h"

__global__ void hello(int n)
{
    printf("device says %d\n", n);
}

int main()
{
    printf("host before\n");
    for (int i = 1; i <= 3; i++) {
        hello<<<1, 1>>>(i);
        CHECK(cudaDeviceSynchronize());
        printf("host after kernel %d\n", i);
    }
    printf("PASS\n");
    return 0;
}
