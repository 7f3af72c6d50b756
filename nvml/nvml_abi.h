/* The part of the NVML ABI (libnvidia-ml.so.1) that the shim implements: result codes, buffer
 * sizes and the layouts of the structures it fills, as applications compiled against NVIDIA's
 * nvml.h lay them out. Written for this project; the toolkit on CI ships no nvml.h. */
#ifndef RGPU_NVML_ABI_H
#define RGPU_NVML_ABI_H

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvml_dev *nvmlDevice_t;

#define NVML_DEVICE_NAME_BUFFER_SIZE           64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96
#define NVML_DEVICE_UUID_BUFFER_SIZE           80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE        96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80

/* Versioned structures carry (sizeof | version << 24) in their first field. */
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))

typedef struct {
    char busIdLegacy[16]; /* "DDDD:BB:DD.0" */
    unsigned int domain, bus, device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[32]; /* "DDDDDDDD:BB:DD.0" */
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version; /* nvmlMemory_v2 */
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvmlUtilization_t;

/* nvmlDeviceGetFieldValues: one field asked (fieldId, scopeId in) and its answer. */
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    union {
        double dVal;
        unsigned long long ullVal;
    } value;
} nvmlFieldValue_t;

#endif
