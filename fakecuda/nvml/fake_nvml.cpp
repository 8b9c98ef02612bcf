// libfakenvml.so: an NVML-shaped library for tests without a GPU, loaded by rgpu-server's sessions
// with --driver fake. It reports the same H200-shaped device as fakecuda (name, UUID, PCI ids,
// 143771 MiB), an idle GPU (no processes, fixed utilization, temperature and power), and answers
// NVML_ERROR_NOT_SUPPORTED for NVLink, and what NCCL's init, JAX and nvidia-smi ask (P2P status,
// PCIe link, fabric info, field values, confidential computing) as a lone H200 SXM answers it.
// Functions it does not define reach the client as NVML_ERROR_FUNCTION_NOT_FOUND (the server
// resolves each by name).
#include <nvml.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/env.h"
#include "common/nvml_error_text.h"

#define FAKE_NVML_API extern "C" __attribute__((visibility("default")))

// The devices' handles: any non-null addresses the fake owns, one per GPU of fakecuda
// (RGPU_FAKE_DEVICES, read through common/env.h as fakecuda reads it).
struct nvmlDevice_st {
  unsigned index;
};

namespace {

std::atomic<int> g_init{0};
constexpr unsigned kMaxDevices = 8;
nvmlDevice_st g_devices[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

unsigned device_count() {
  static const unsigned n = static_cast<unsigned>(rgpu::env::get().fake_devices);
  return n;
}

constexpr const char* kName = "NVIDIA H200 (rgpu fake)";
constexpr unsigned long long kTotal = 143771ull << 20;
constexpr unsigned long long kReserved = 512ull << 20;
constexpr const char* kDriverVersion = "580.159.04";

// fakecuda/device.cpp's UUID and PCI bus of device i, in NVML's text forms.
std::string uuid_of(unsigned i) {
  char text[64];
  std::snprintf(text, sizeof text, "GPU-72677075-2d66-616b-652d-48323030%02x%02x", rgpu::env::get().fake_address_slot, 1 + i);
  return text;
}
unsigned bus_of(unsigned i) { return 0x1b + 0x10 * i; }
std::string bus_id_of(unsigned i, bool legacy) {
  char text[32];
  std::snprintf(text, sizeof text, legacy ? "0000:%02X:00.0" : "00000000:%02X:00.0", bus_of(i));
  return text;
}

nvmlReturn_t check(nvmlDevice_t d) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  return d >= g_devices && d < g_devices + device_count() ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t put_string(const char* s, char* out, unsigned int len) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s, std::strlen(s) + 1);
  return NVML_SUCCESS;
}

void fill_pci(nvmlDevice_t d, nvmlPciInfo_t* p) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", bus_id_of(d->index, true).c_str());
  std::snprintf(p->busId, sizeof p->busId, "%s", bus_id_of(d->index, false).c_str());
  p->domain = 0;
  p->bus = bus_of(d->index);
  p->device = 0;
  p->pciDeviceId = 0x233510de;
  p->pciSubSystemId = 0x18bf10de;
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
  *count = device_count();
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < device_count(); ++i) {
    if (uuid_of(i) != uuid) continue;
    *device = &g_devices[i];
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!bus || !device) return NVML_ERROR_INVALID_ARGUMENT;
  // Another bus id is refused as an invalid argument, as the H200's NVML does (not NOT_FOUND).
  for (unsigned i = 0; i < device_count(); ++i) {
    if (strcasecmp(bus, bus_id_of(i, false).c_str()) != 0 && strcasecmp(bus, bus_id_of(i, true).c_str()) != 0) continue;
    *device = &g_devices[i];
    return NVML_SUCCESS;
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = d->index;
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
  return put_string(uuid_of(d->index).c_str(), uuid, length);
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
  fill_pci(d, pci);
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

// ---------- what NCCL's init, JAX (XLA) and nvidia-smi ask ----------
// An H200 SXM alone in its machine: no peer, no NVLink partner, no fabric manager, PCIe Gen5 x16,
// confidential computing off. tests/conformance compares each answer with the real one's.


// NCCL's init asks every pair of devices, the device with itself included, for READ and WRITE.
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t index,
                                                  nvmlGpuP2PStatus_t* status) {
  if (nvmlReturn_t rc = check(a)) return rc;
  if (nvmlReturn_t rc = check(b)) return rc;
  if (!status || index > NVML_P2P_CAPS_INDEX_UNKNOWN) return NVML_ERROR_INVALID_ARGUMENT;
  // The device with itself, as driver 580 answers on the H200: not supported for every capability,
  // and OK for the UNKNOWN index. Two devices of the fake are an NVLinked pair: OK for all.
  if (a != b) *status = NVML_P2P_STATUS_OK;
  else *status = index == NVML_P2P_CAPS_INDEX_UNKNOWN ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                               nvmlGpuTopologyLevel_t* level) {
  if (nvmlReturn_t rc = check(a)) return rc;
  if (nvmlReturn_t rc = check(b)) return rc;
  if (!level) return NVML_ERROR_INVALID_ARGUMENT;
  if (a == b) return NVML_ERROR_NOT_SUPPORTED;  // the device with itself, as on the H200
  *level = NVML_TOPOLOGY_NODE;  // two GPUs of one board: under one NUMA node's host bridges
  return NVML_SUCCESS;
}

namespace {
nvmlReturn_t put_uint(nvmlDevice_t d, unsigned int* out, unsigned int v) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  *out = v;
  return NVML_SUCCESS;
}
}  // namespace

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int* g) { return put_uint(d, g, 5); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int* g) { return put_uint(d, g, 5); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int* g) { return put_uint(d, g, 5); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int* w) { return put_uint(d, w, 16); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int* w) { return put_uint(d, w, 16); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t d, unsigned int* mbps) { return put_uint(d, mbps, 32000); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;  // the GPU's memory is no NUMA node (no coherent C2C link)
}

// No fabric: the state says so (NCCL and XLA then leave multi-node NVLink alone).
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t* info) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!info) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(info, 0, sizeof *info);
  info->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  info->status = NVML_SUCCESS;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfoV_t* info) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!info) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3)
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned int version = info->version;
  std::memset(info, 0, version == nvmlGpuFabricInfo_v2 ? sizeof(nvmlGpuFabricInfo_v2_t) : sizeof *info);
  info->version = version;
  info->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  info->status = NVML_SUCCESS;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t d, nvmlPlatformInfo_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;  // Blackwell and later
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int, unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int, nvmlNvLinkCapability_t,
                                                         unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t* pci) {
  return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

// Fields: each answered in its own nvmlReturn, the call itself succeeds.
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t* values) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t& v = values[i];
    v.timestamp = 0;
    v.latencyUsec = 0;
    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v.value.ullVal = 0;
    if (v.fieldId == 0 || v.fieldId >= NVML_FI_MAX) {
      v.valueType = NVML_VALUE_TYPE_DOUBLE;  // 0: what the H200 leaves in an unknown field
      v.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
    } else if (v.fieldId == NVML_FI_DEV_ECC_CURRENT || v.fieldId == NVML_FI_DEV_ECC_PENDING) {
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v.value.ullVal = 1;
      v.nvmlReturn = NVML_SUCCESS;
    } else {
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;  // NVLink and C2C link counts included: none here
    }
  }
  return NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int n, unsigned long* set) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (n == 0 || !set) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(set, 0, n * sizeof *set);
  set[0] = ~0ul;  // every CPU of the first 64
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int* is_mig) { return put_uint(d, is_mig, 0); }
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* n) { return put_uint(d, n, 0); }
// Instance ids belong to MIG device handles; this one is the whole GPU.
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_INVALID_ARGUMENT;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_INVALID_ARGUMENT;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;  // MIG devices only
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t*) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return NVML_ERROR_NOT_SUPPORTED;  // Hopper remaps rows instead
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int* corr, unsigned int* unc,
                                                     unsigned int* pending, unsigned int* failure) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
  *corr = *unc = *pending = *failure = 0;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char* version, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string("96.00.00.00.00", version, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t d, char* part, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string("692-2G520-0280-000", part, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t d, char* version, unsigned int length) {
  if (nvmlReturn_t rc = check(d)) return rc;
  return put_string("G520.0280.00.01", version, length);
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t d, nvmlConfComputeMemSizeInfo_t* info) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!info) return NVML_ERROR_INVALID_ARGUMENT;
  info->protectedMemSizeKib = 0;
  info->unprotectedMemSizeKib = kTotal >> 10;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, nvmlEnableState_t* current, nvmlEnableState_t* pending) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, nvmlEnableState_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  *m = NVML_FEATURE_ENABLED;  // as the H200 reports it, though no display is attached
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, nvmlEnableState_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  *m = NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t d, nvmlGpuVirtualizationMode_t* m) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  *m = NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH;  // the H200 machine is a VM with the GPU passed through
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* reasons) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = nvmlClocksEventReasonGpuIdle;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long* mj) {
  if (nvmlReturn_t rc = check(d)) return rc;
  if (!mj) return NVML_ERROR_INVALID_ARGUMENT;
  *mj = 1000000;
  return NVML_SUCCESS;
}

// Confidential computing: off.
FAKE_NVML_API nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t* state) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!state) return NVML_ERROR_INVALID_ARGUMENT;
  state->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
  state->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
  state->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
  return NVML_SUCCESS;
}
FAKE_NVML_API nvmlReturn_t nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t* s) {
  if (g_init.load() <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!s) return NVML_ERROR_INVALID_ARGUMENT;
  if (s->version != nvmlSystemConfComputeSettings_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned int version = s->version;
  std::memset(s, 0, sizeof *s);
  s->version = version;
  s->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
  s->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
  s->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
  s->multiGpuMode = NVML_CC_SYSTEM_MULTIGPU_NONE;
  return NVML_SUCCESS;
}

FAKE_NVML_API const char* nvmlErrorString(nvmlReturn_t result) { return rgpu::nvml_error_text(result); }
