/* A miniature nvml.h for the NVML generator's golden tests: one function per rule and per refusal. */
#ifndef MINI_NVML_H
#define MINI_NVML_H
#define DECLDIR
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0, NVML_ERROR_NOT_SUPPORTED = 3 } nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlMemory_st { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct nvmlMemory_v2_st { unsigned int version; unsigned long long total; } nvmlMemory_v2_t;
typedef struct nvmlProcessInfo_st { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_t;
typedef struct nvmlFieldValue_st { unsigned int fieldId; union { double d; unsigned int ui; } value; } nvmlFieldValue_t;
typedef struct nvmlWithPointer_st { char *text; } nvmlWithPointer_t;
typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

nvmlReturn_t DECLDIR nvmlInit_v2(void);
nvmlReturn_t DECLDIR nvmlShutdown(void);
const char* DECLDIR nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp);
nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
nvmlReturn_t DECLDIR nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, int level, unsigned int *count, nvmlDevice_t *deviceArray);
nvmlReturn_t DECLDIR nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values);
nvmlReturn_t DECLDIR nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps, unsigned int *averageLatency);
nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses, unsigned long long *timestamps);
nvmlReturn_t DECLDIR nvmlDeviceGetWithPointer(nvmlDevice_t device, nvmlWithPointer_t *out);
nvmlReturn_t DECLDIR nvmlDeviceGetOpaque(nvmlDevice_t device, void *data);
nvmlReturn_t DECLDIR nvmlDeviceGetBareString(nvmlDevice_t device, char *version);
nvmlReturn_t DECLDIR nvmlDeviceSetPersistenceMode(nvmlDevice_t device, int mode);
nvmlReturn_t DECLDIR nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray);
#endif
