/* A stand-in for a GPU host's libnvidia-ml.so.1 under gpu-server's worker (test double, never
 * installed): one GPU at PCI 0000:01:00.0, 37% busy, 11% memory activity, 1 GiB free, its PCIe
 * link at generation 4 x8 of a generation 5 x16 maximum. */
#include <string.h>

static int the_gpu;

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **device)
{
    if (strcmp(bus_id, "0000:01:00.0") != 0)
        return 6; /* NVML_ERROR_NOT_FOUND */
    *device = &the_gpu;
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *device, unsigned int util[2])
{
    if (device != &the_gpu)
        return 2;
    util[0] = 37;
    util[1] = 11;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *device, unsigned long long mem[3])
{
    if (device != &the_gpu)
        return 2;
    mem[0] = 4ull << 30;
    mem[1] = 1ull << 30;
    mem[2] = 3ull << 30;
    return 0;
}

static int link_value(void *device, unsigned int *v, unsigned int value)
{
    if (device != &the_gpu)
        return 2;
    *v = value;
    return 0;
}

int nvmlDeviceGetCurrPcieLinkGeneration(void *device, unsigned int *v)
{
    return link_value(device, v, 4);
}

int nvmlDeviceGetCurrPcieLinkWidth(void *device, unsigned int *v)
{
    return link_value(device, v, 8);
}

int nvmlDeviceGetMaxPcieLinkGeneration(void *device, unsigned int *v)
{
    return link_value(device, v, 5);
}

int nvmlDeviceGetMaxPcieLinkWidth(void *device, unsigned int *v)
{
    return link_value(device, v, 16);
}
