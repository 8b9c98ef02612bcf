// libfakenvml.so: an NVML-shaped library for tests without a GPU, loaded by rgpu-server's sessions
// with --driver fake. It reports the same H200-shaped device as fakecuda (name, UUID, PCI ids,
// 143771 MiB), an idle GPU (no processes, fixed utilization, temperature and power), and answers
// NVML_ERROR_NOT_SUPPORTED for NVLink. Functions it does not define reach the client as
// NVML_ERROR_FUNCTION_NOT_FOUND (the server resolves each by name).
#include <nvml.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#define FAKE_NVML_API extern "C" __attribute__((visibility("default")))

// The one device's handle: any non-null address the fake owns.
struct nvmlDevice_st {
  int index;
};

namespace {

std::atomic<int> g_init{0};
nvmlDevice_st g_device{0};

constexpr const char* kName = "NVIDIA H200 (rgpu fake)";
// fakecuda/device.cpp kUuid, in NVML's text form.
constexpr const char* kUuid = "GPU-72677075-2d66-616b-652d-483230300001";
constexpr const char* kBusId = "00000000:1B:00.0";
constexpr unsigned long long kTotal = 143771ull << 20;
constexpr unsigned long long kReserved = 512ull << 20;
constexpr const char* kDriverVersion = "580.159.04";

nvmlReturn_t check(nvmlDevice_t d) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  return d == &g_device ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t put_string(const char* s, char* out, unsigned int len) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s, std::strlen(s) + 1);
  return NVML_SUCCESS;
}

void fill_pci(nvmlPciInfo_t* p) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", "0000:1B:00.0");
  std::snprintf(p->busId, sizeof p->busId, "%s", kBusId);
  p->domain = 0;
  p->bus = 0x1b;
  p->device = 0;
  p->pciDeviceId = 0x233510de;
  p->pciSubSystemId = 0x18a810de;
}

template <class P>
nvmlReturn_t no_processes(nvmlDevice_t d, unsigned int* count, P*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}

}  // namespace

FAKE_NVML_API nvmlReturn_t nvmlInit_v2(void) {
  ++g_init;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
FAKE_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int) { return nvmlInit_v2(); }
FAKE_NVML_API nvmlReturn_t nvmlShutdown(void) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  --g_init;
  return NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return put_string(kDriverVersion, version, length);
}
FAKE_NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return put_string("13.580.159.04", version, length);
}
FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  *v = 13000;  // fakecuda's cuDriverGetVersion
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) { return nvmlSystemGetCudaDriverVersion(v); }

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 1;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_device;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strcmp(uuid, kUuid) != 0) return NVML_ERROR_NOT_FOUND;
  *device = &g_device;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!bus || !device) return NVML_ERROR_INVALID_ARGUMENT;
  if (strcasecmp(bus, kBusId) != 0 && strcasecmp(bus, "0000:1B:00.0") != 0) return NVML_ERROR_NOT_FOUND;
  *device = &g_device;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = 0;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int* minor) {
  return nvmlDeviceGetIndex(d, minor);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string(kName, name, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string(kUuid, uuid, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char* serial, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string("0000000000000", serial, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, nvmlBrandType_t* brand) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!brand) return NVML_ERROR_INVALID_ARGUMENT;
  *brand = NVML_BRAND_NVIDIA;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t* arch) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = NVML_DEVICE_ARCH_HOPPER;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  m->total = kTotal;
  m->used = kReserved;
  m->free = kTotal - kReserved;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  m->total = kTotal;
  m->reserved = kReserved;
  m->used = 0;
  m->free = kTotal - kReserved;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlBAR1Memory_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  m->bar1Total = 256ull << 30;
  m->bar1Used = 2ull << 20;
  m->bar1Free = m->bar1Total - m->bar1Used;
  return NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!u) return NVML_ERROR_INVALID_ARGUMENT;
  u->gpu = 3;
  u->memory = 1;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor, unsigned int* t) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!t || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *t = 31;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
  *mw = 75000;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int* mw) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
  *mw = 700000;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int* mw) {
  return nvmlDeviceGetEnforcedPowerLimit(d, mw);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;  // an SXM module has no fan of its own
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, nvmlPstates_t* p) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!p) return NVML_ERROR_INVALID_ARGUMENT;
  *p = NVML_PSTATE_0;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, nvmlEnableState_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  *m = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  *m = NVML_COMPUTEMODE_DEFAULT;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int* mhz) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
  *mhz = type == NVML_CLOCK_MEM ? 2619 : 1980;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int* mhz) {
  return nvmlDeviceGetClockInfo(d, type, mhz);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  fill_pci(pci);
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetPciInfo_v3(d, pci);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetPciInfo_v3(d, pci);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* n,
                                                                  nvmlProcessInfo_t* p) {
  return no_processes(d, n, p);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* n,
                                                                  nvmlProcessInfo_v2_t* p) {
  return no_processes(d, n, p);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* n,
                                                               nvmlProcessInfo_v1_t* p) {
  return no_processes(d, n, p);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int* n,
                                                                   nvmlProcessInfo_t* p) {
  return no_processes(d, n, p);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int, nvmlEnableState_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int,
                                                               nvmlIntNvLinkDeviceType_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int, nvmlPciInfo_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}
