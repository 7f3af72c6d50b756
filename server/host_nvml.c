/* The host's NVML, through dlopen (server/host_nvml.h). Written against the few NVML entry
 * points it needs; the structures are declared here as NVML lays them out. */
#include "server/host_nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

#define NVML_OK 0

typedef struct {
    unsigned int gpu, memory;
} host_nvml_util;
typedef struct {
    unsigned long long total, free, used;
} host_nvml_memory;

static struct {
    char path[256];
    bool tried, usable;
    void *dl;
    int (*init)(void);
    int (*by_pci)(const char *, void **);
    int (*util)(void *, host_nvml_util *);
    int (*memory)(void *, host_nvml_memory *);
    int (*pcie[4])(void *, unsigned *); /* current generation, width; maximum generation, width */
} hn;

static const char *const pcie_names[4] = {
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"};

void srv_host_nvml_configure(const char *path)
{
    memset(&hn, 0, sizeof(hn));
    snprintf(hn.path, sizeof(hn.path), "%s", path[0] != '\0' ? path : "libnvidia-ml.so.1");
}

static bool host_nvml_open(void)
{
    if (hn.tried)
        return hn.usable;
    hn.tried = true;
    if (hn.path[0] == '\0') /* never configured */
        snprintf(hn.path, sizeof(hn.path), "libnvidia-ml.so.1");
    if (strcmp(hn.path, "off") == 0 || (hn.dl = dlopen(hn.path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        rg_debug("host NVML %s not available: GPU utilization is not reported", hn.path);
        return false;
    }
    if (dlsym(hn.dl, "rgpuNvmlShim") != NULL) { /* rgpu's client-side shim, not the host's */
        rg_warn("%s is rgpu's NVML shim, not the GPU host's NVML; not used", hn.path);
        return false;
    }
    *(void **)&hn.init = dlsym(hn.dl, "nvmlInit_v2");
    *(void **)&hn.by_pci = dlsym(hn.dl, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&hn.util = dlsym(hn.dl, "nvmlDeviceGetUtilizationRates");
    *(void **)&hn.memory = dlsym(hn.dl, "nvmlDeviceGetMemoryInfo");
    for (int i = 0; i < 4; i++)
        *(void **)&hn.pcie[i] = dlsym(hn.dl, pcie_names[i]);
    if (hn.init == NULL || hn.by_pci == NULL || hn.init() != NVML_OK) {
        rg_warn("host NVML %s does not start: GPU utilization is not reported", hn.path);
        return false;
    }
    hn.usable = true;
    return true;
}

/* The PCIe link, current and maximum: all four values or none. */
static void pcie_link(void *dev, struct srv_gpu_usage *usage_p)
{
    unsigned v[4];

    for (int i = 0; i < 4; i++)
        if (hn.pcie[i] == NULL || hn.pcie[i](dev, &v[i]) != NVML_OK)
            return;
    usage_p->pcie_valid = true;
    usage_p->pcie_gen = v[0];
    usage_p->pcie_width = v[1];
    usage_p->pcie_max_gen = v[2];
    usage_p->pcie_max_width = v[3];
}

void srv_host_nvml_usage(const char *pci_bus_id, struct srv_gpu_usage *usage_p)
{
    host_nvml_util u;
    host_nvml_memory m;
    void *dev;

    memset(usage_p, 0, sizeof(*usage_p));
    if (!host_nvml_open() || hn.by_pci(pci_bus_id, &dev) != NVML_OK)
        return;
    if (hn.util != NULL && hn.util(dev, &u) == NVML_OK) {
        usage_p->util_valid = true;
        usage_p->util_gpu = u.gpu;
        usage_p->util_mem = u.memory;
    }
    if (hn.memory != NULL && hn.memory(dev, &m) == NVML_OK) {
        usage_p->mem_valid = true;
        usage_p->mem_free = m.free;
    }
    pcie_link(dev, usage_p);
}
