/* The GPU host's own NVML (libnvidia-ml.so.1), opened by a worker on first use to read what
 * only NVML tells: GPU utilization and the card's free memory. Absent (or rgpu's own shim,
 * which a worker must never take for the host's) means "not available", never an error. */
#ifndef RGPU_SERVER_HOST_NVML_H
#define RGPU_SERVER_HOST_NVML_H

#include <stdbool.h>
#include <stdint.h>

/* The library to open: cfg's host_nvml, "" = libnvidia-ml.so.1, "off" = none. */
void srv_host_nvml_configure(const char *path);

struct srv_gpu_usage {
    bool util_valid;
    unsigned util_gpu, util_mem; /* percent */
    bool mem_valid;
    uint64_t mem_free; /* the whole card's */
    bool pcie_valid;
    unsigned pcie_gen, pcie_width, pcie_max_gen, pcie_max_width; /* current and maximum link */
};

/* Usage of the GPU at PCI bus id ("0000:01:00.0"); fields not known are marked invalid. */
void srv_host_nvml_usage(const char *pci_bus_id, struct srv_gpu_usage *usage_p);

#endif
