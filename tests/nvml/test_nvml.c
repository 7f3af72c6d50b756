/* The NVML shim in a client process, as a framework uses it: dlopen libnvidia-ml.so.1, then
 * count, handles, name, UUID, PCI, compute capability, memory (the session's quota and what it
 * holds), utilization (from the server host's NVML, or not supported without one), processes
 * (none) and an unsupported entry point; against gpu-server on the fake driver
 * (run_nvml.sh). argv[1]: "util" when the server has a host NVML, "noutil" when not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>

#include "nvml/nvml_abi.h"

#define QUOTA (256ull << 20)

static void *nvml, *cuda;
static bool with_util;

#define NV(name, ...) (((nvmlReturn_t(*)())dlsym_checked(nvml, #name))(__VA_ARGS__))
#define CU(name, ...) (((CUresult(*)())dlsym_checked(cuda, #name))(__VA_ARGS__))

static void *dlsym_checked(void *dl, const char *name)
{
    void *f = dlsym(dl, name);

    if (f == NULL)
        fail_msg("%s is not exported", name);
    return f;
}

static void test_devices(void **state)
{
    unsigned count = 0, index = 9;
    nvmlDevice_t dev, again;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvmlPciInfo_t pci;
    int major = 0, minor = 0, version = 0;

    assert_int_equal(NV(nvmlDeviceGetCount_v2, &count), NVML_SUCCESS);
    assert_int_equal(count, 1);
    assert_int_equal(NV(nvmlDeviceGetHandleByIndex_v2, 0, &dev), NVML_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetHandleByIndex_v2, 1, &again), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(NV(nvmlDeviceGetIndex, dev, &index), NVML_SUCCESS);
    assert_int_equal(index, 0);
    assert_int_equal(NV(nvmlDeviceGetName, dev, name, sizeof(name)), NVML_SUCCESS);
    assert_string_equal(name, "rgpu fake device");
    assert_int_equal(NV(nvmlDeviceGetName, dev, name, 4), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(NV(nvmlDeviceGetUUID, dev, uuid, sizeof(uuid)), NVML_SUCCESS);
    /* "rgpu-fake-uuid-0" as bytes, in NVML's form */
    assert_string_equal(uuid, "GPU-72677075-2d66-616b-652d-757569642d30");
    assert_int_equal(NV(nvmlDeviceGetHandleByUUID, uuid, &again), NVML_SUCCESS);
    assert_ptr_equal(again, dev);
    assert_int_equal(NV(nvmlDeviceGetPciInfo_v3, dev, &pci), NVML_SUCCESS);
    assert_string_equal(pci.busId, "00000000:01:00.0");
    assert_string_equal(pci.busIdLegacy, "0000:01:00.0");
    assert_int_equal(NV(nvmlDeviceGetHandleByPciBusId_v2, "0000:01:00.0", &again), NVML_SUCCESS);
    assert_ptr_equal(again, dev);
    assert_int_equal(NV(nvmlDeviceGetHandleByPciBusId_v2, "0000:02:00.0", &again),
                     NVML_ERROR_NOT_FOUND);
    assert_int_equal(NV(nvmlDeviceGetCudaComputeCapability, dev, &major, &minor), NVML_SUCCESS);
    assert_true(major >= 7);
    assert_int_equal(NV(nvmlSystemGetCudaDriverVersion_v2, &version), NVML_SUCCESS);
    assert_int_equal(version, 13000);
    assert_int_equal(NV(nvmlSystemGetDriverVersion, name, sizeof(name)), NVML_SUCCESS);
    assert_string_equal(name, "13.0");
    assert_int_equal(NV(nvmlDeviceGetIndex, (nvmlDevice_t)&count, &index),
                     NVML_ERROR_INVALID_ARGUMENT);
}

/* Memory is the session's: the tenant's quota, and what this process allocated. */
static void test_memory(void **state)
{
    nvmlMemory_t m;
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    nvmlDevice_t dev;
    CUcontext ctx;
    CUdeviceptr d;

    assert_int_equal(NV(nvmlDeviceGetHandleByIndex_v2, 0, &dev), NVML_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetMemoryInfo, dev, &m), NVML_SUCCESS);
    assert_int_equal(m.total, QUOTA);
    assert_int_equal(m.used, 0);
    assert_int_equal(CU(cuDevicePrimaryCtxRetain, &ctx, 0), CUDA_SUCCESS);
    assert_int_equal(CU(cuCtxSetCurrent, ctx), CUDA_SUCCESS);
    assert_int_equal(CU(cuMemAlloc_v2, &d, (size_t)64 << 20), CUDA_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetMemoryInfo, dev, &m), NVML_SUCCESS);
    assert_int_equal(m.used, 64ull << 20);
    assert_int_equal(m.free, QUOTA - (64ull << 20));
    assert_int_equal(NV(nvmlDeviceGetMemoryInfo_v2, dev, &m2), NVML_SUCCESS);
    assert_int_equal(m2.total, QUOTA);
    assert_int_equal(m2.used + m2.free, QUOTA);
    m2.version = 1;
    assert_int_equal(NV(nvmlDeviceGetMemoryInfo_v2, dev, &m2),
                     NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    assert_int_equal(CU(cuMemFree_v2, d), CUDA_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetMemoryInfo, dev, &m), NVML_SUCCESS);
    assert_int_equal(m.used, 0);
}

/* The PCIe link from the server host's NVML (fake: gen 4 x8 of gen 5 x16), not supported
 * without one; field values: the call succeeds, each field not supported. */
static void pcie_and_fields(nvmlDevice_t dev)
{
    static const char *const names[4] = {
        "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"};
    static const unsigned want[4] = {4, 8, 5, 16};
    nvmlFieldValue_t f[2];
    unsigned v;

    for (int i = 0; i < 4; i++) {
        nvmlReturn_t (*fn)(nvmlDevice_t, unsigned *) =
            (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))dlsym(nvml, names[i]);
        assert_non_null(fn);
        v = 0;
        assert_int_equal(fn(dev, &v), with_util ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
        if (with_util)
            assert_int_equal(v, want[i]);
    }
    memset(f, 0, sizeof(f));
    f[0].fieldId = 91; /* an NVLink field */
    f[1].fieldId = 1;
    f[1].nvmlReturn = NVML_SUCCESS;
    assert_int_equal(NV(nvmlDeviceGetFieldValues, dev, 2, f), NVML_SUCCESS);
    assert_int_equal(f[0].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(f[1].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(f[1].fieldId, 1);
}

static void test_utilization_processes_unsupported(void **state)
{
    nvmlUtilization_t u = {0, 0};
    nvmlDevice_t dev;
    unsigned n = 5, power;

    assert_int_equal(NV(nvmlDeviceGetHandleByIndex_v2, 0, &dev), NVML_SUCCESS);
    if (with_util) {
        assert_int_equal(NV(nvmlDeviceGetUtilizationRates, dev, &u), NVML_SUCCESS);
        assert_int_equal(u.gpu, 37);
        assert_int_equal(u.memory, 11);
    } else {
        assert_int_equal(NV(nvmlDeviceGetUtilizationRates, dev, &u), NVML_ERROR_NOT_SUPPORTED);
    }
    pcie_and_fields(dev);
    assert_int_equal(NV(nvmlDeviceGetComputeRunningProcesses_v3, dev, &n, NULL), NVML_SUCCESS);
    assert_int_equal(n, 0);
    assert_int_equal(NV(nvmlDeviceGetPowerUsage, dev, &power), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(NV(nvmlDeviceGetPowerUsage, dev, &power), NVML_ERROR_NOT_SUPPORTED);
    assert_string_equal(
        ((const char *(*)(nvmlReturn_t))dlsym(nvml, "nvmlErrorString"))(NVML_ERROR_NOT_SUPPORTED),
        "Not Supported");
}

static void test_shutdown(void **state)
{
    unsigned count;

    assert_int_equal(NV(nvmlInit, ), NVML_SUCCESS); /* counted: two inits, two shutdowns */
    assert_int_equal(NV(nvmlShutdown, ), NVML_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetCount_v2, &count), NVML_SUCCESS);
    assert_int_equal(NV(nvmlShutdown, ), NVML_SUCCESS);
    assert_int_equal(NV(nvmlDeviceGetCount_v2, &count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(NV(nvmlShutdown, ), NVML_ERROR_UNINITIALIZED);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_utilization_processes_unsupported),
        cmocka_unit_test(test_shutdown),
    };

    with_util = argc > 1 && strcmp(argv[1], "util") == 0;
    if ((nvml = dlopen(NVML_SHIM_PATH, RTLD_NOW)) == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", NVML_SHIM_PATH, dlerror());
        return 1;
    }
    if (((nvmlReturn_t(*)(void))dlsym(nvml, "nvmlInit_v2"))() != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit_v2 failed\n");
        return 1;
    }
    /* The client the shim started its session in. */
    if ((cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) == NULL) {
        fprintf(stderr, "the shim did not load libcuda.so.1\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
