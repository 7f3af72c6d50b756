/* Initialization, shutdown, system queries and error strings of the NVML shim. nvmlInit finds
 * the client libcuda.so.1 already in the process (or the one installed beside this library),
 * starts its session with cuInit and takes a snapshot of the devices; the snapshot stays for the
 * life of the process, and nvmlShutdown only counts down. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nvml/nvml_shim.h"

/* Its presence tells gpu-server's worker that a libnvidia-ml.so.1 is this shim. */
NVML_EXPORT const int rgpuNvmlShim = 1;

static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvml_state state;
static bool loaded;
static int refs; /* nvmlInit calls not yet matched by nvmlShutdown */

const struct nvml_state *nvml_state(void)
{
    return __atomic_load_n(&refs, __ATOMIC_ACQUIRE) > 0 ? &state : NULL;
}

/* The client library: the libcuda.so.1 the process already has, else the one beside us. */
static void *open_client(void)
{
    static const char name[] = "/libcuda.so.1";
    Dl_info self;
    char path[4096], *slash;
    void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

    if (dl == NULL && dladdr((void *)&rgpuNvmlShim, &self) != 0 && self.dli_fname != NULL &&
        strlen(self.dli_fname) + sizeof(name) < sizeof(path)) {
        snprintf(path, sizeof(path), "%s", self.dli_fname);
        if ((slash = strrchr(path, '/')) != NULL) {
            memcpy(slash, name, sizeof(name));
            dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        }
    }
    if (dl == NULL)
        dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    return dl;
}

static nvmlReturn_t bind_client(struct nvml_client *c)
{
    if ((c->dl = open_client()) == NULL) {
        rg_error("nvml: cannot load the rgpu client libcuda.so.1: %s", dlerror());
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
#define BIND(sym) (*(void **)&c->sym = dlsym(c->dl, #sym)) != NULL
    if (!(BIND(cuInit) && BIND(cuDriverGetVersion) && BIND(cuDeviceGetCount) && BIND(cuDeviceGet) &&
          BIND(cuDeviceGetName) && BIND(cuDeviceGetUuid) && BIND(cuDeviceGetPCIBusId) &&
          BIND(cuDeviceGetAttribute) && BIND(rgpuDeviceStatus))) {
        rg_error("nvml: the libcuda.so.1 in this process is not rgpu's client (it lacks %s)",
                 RGPU_DEVICE_STATUS_SYMBOL);
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
#undef BIND
    return NVML_SUCCESS;
}

static void fill_pci(struct nvml_dev *d, const char *bus_id)
{
    unsigned domain = 0, bus = 0, device = 0;

    sscanf(bus_id, "%x:%x:%x", &domain, &bus, &device);
    d->pci.domain = domain;
    d->pci.bus = bus;
    d->pci.device = device;
    d->pci.pciDeviceId = 0x10de; /* NVIDIA's vendor id; the device id is not known here */
    snprintf(d->pci.busId, sizeof(d->pci.busId), "%08X:%02X:%02X.0", domain, bus, device);
    snprintf(d->pci.busIdLegacy, sizeof(d->pci.busIdLegacy), "%04X:%02X:%02X.0", domain & 0xffff,
             bus, device);
}

static nvmlReturn_t snapshot_device(const struct nvml_client *c, int i, struct nvml_dev *d)
{
    const uint8_t *b;
    char bus_id[32];
    CUuuid u;
    CUdevice dev;

    if (c->cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
        c->cuDeviceGetName(d->name, sizeof(d->name), dev) != CUDA_SUCCESS ||
        c->cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS ||
        c->cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), dev) != CUDA_SUCCESS ||
        c->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
            CUDA_SUCCESS ||
        c->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) !=
            CUDA_SUCCESS)
        return NVML_ERROR_UNKNOWN;
    b = (const uint8_t *)u.bytes;
    snprintf(d->uuid, sizeof(d->uuid),
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    fill_pci(d, bus_id);
    d->index = i;
    return NVML_SUCCESS;
}

static nvmlReturn_t load_state(void)
{
    struct nvml_client *c = &state.cl;
    nvmlReturn_t ret = bind_client(c);
    CUresult res;

    if (ret != NVML_SUCCESS)
        return ret;
    if ((res = c->cuInit(0)) != CUDA_SUCCESS) {
        rg_error("nvml: the rgpu session did not start (cuInit: %d)", (int)res);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (c->cuDriverGetVersion(&state.cuda_version) != CUDA_SUCCESS ||
        c->cuDeviceGetCount(&state.count) != CUDA_SUCCESS)
        return NVML_ERROR_UNKNOWN;
    if (state.count > NVML_SHIM_MAX_DEVICES)
        state.count = NVML_SHIM_MAX_DEVICES;
    for (int i = 0; i < state.count; i++)
        if ((ret = snapshot_device(c, i, &state.devs[i])) != NVML_SUCCESS)
            return ret;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t ret = NVML_SUCCESS;

    pthread_mutex_lock(&nvml_lock);
    if (!loaded) {
        rg_log_set_level_str(getenv("RGPU_LOG_LEVEL"));
        ret = load_state();
        loaded = ret == NVML_SUCCESS;
    }
    if (ret == NVML_SUCCESS)
        __atomic_add_fetch(&refs, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nvml_lock);
    return ret;
}

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

/* The first ABI of nvmlInit has the same signature. */
NVML_EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;

    pthread_mutex_lock(&nvml_lock);
    if (refs == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        __atomic_sub_fetch(&refs, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nvml_lock);
    return ret;
}

static nvmlReturn_t version_string(char *buf, unsigned int len, int version)
{
    const struct nvml_state *s = nvml_state();

    if (s == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned)snprintf(buf, len, "%d.%d", version / 1000, version % 1000 / 10) >= len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

/* The server's CUDA driver version (e.g. "13.0"): the kernel driver's own number is not known
 * on the client host. */
NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return version_string(version, length, state.cuda_version);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return version_string(version, length, state.cuda_version);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (nvml_state() == NULL)
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = state.cuda_version;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
        return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_MEMORY:
        return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
        return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN:
        return "Unknown Error";
    default:
        return "Unknown Error";
    }
}
