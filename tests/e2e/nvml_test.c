/* A user's NVML program, plain C against nvml.h, linked like any NVML program against
 * libnvidia-ml.so.1 (rgpu's shim when LD_LIBRARY_PATH points at build/lib). Prints what it found
 * and exits non-zero on the first failed check.
 *   nvml_test [EXPECTED_TOTAL_MIB]
 */
#include <nvml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    nvmlReturn_t rc_ = (call);                                                             \
    if (rc_ != NVML_SUCCESS) {                                                             \
      fprintf(stderr, "FAILED: %s -> %d (%s)\n", #call, (int)rc_, nvmlErrorString(rc_)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int main(int argc, char** argv) {
  unsigned long long expect_mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 0;
  CHECK(nvmlInit_v2());
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  CHECK(nvmlSystemGetDriverVersion(version, sizeof version));
  int cuda_version = 0;
  CHECK(nvmlSystemGetCudaDriverVersion_v2(&cuda_version));
  printf("driver %s, CUDA %d\n", version, cuda_version);

  unsigned int count = 0;
  CHECK(nvmlDeviceGetCount_v2(&count));
  printf("devices: %u\n", count);
  if (count != 1) {
    fprintf(stderr, "FAILED: expected 1 device\n");
    return 1;
  }
  nvmlDevice_t dev;
  CHECK(nvmlDeviceGetHandleByIndex_v2(0, &dev));
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  CHECK(nvmlDeviceGetName(dev, name, sizeof name));
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  CHECK(nvmlDeviceGetUUID(dev, uuid, sizeof uuid));
  printf("name: %s\nuuid: %s\n", name, uuid);
  if (!strstr(name, "H200")) {
    fprintf(stderr, "FAILED: the name does not say H200\n");
    return 1;
  }
  nvmlDevice_t by_uuid;
  CHECK(nvmlDeviceGetHandleByUUID(uuid, &by_uuid));
  if (by_uuid != dev) {
    fprintf(stderr, "FAILED: the handle by UUID differs from the handle by index\n");
    return 1;
  }
  nvmlMemory_t mem;
  CHECK(nvmlDeviceGetMemoryInfo(dev, &mem));
  printf("memory: total %llu MiB, used %llu MiB, free %llu MiB\n", mem.total >> 20, mem.used >> 20, mem.free >> 20);
  if (expect_mib && mem.total >> 20 != expect_mib) {
    fprintf(stderr, "FAILED: total memory %llu MiB, expected %llu\n", mem.total >> 20, expect_mib);
    return 1;
  }
  nvmlMemory_v2_t mem2;
  memset(&mem2, 0, sizeof mem2);
  mem2.version = nvmlMemory_v2;
  CHECK(nvmlDeviceGetMemoryInfo_v2(dev, &mem2));
  if (mem2.total != mem.total) {
    fprintf(stderr, "FAILED: nvmlDeviceGetMemoryInfo_v2 total differs\n");
    return 1;
  }
  nvmlPciInfo_t pci;
  CHECK(nvmlDeviceGetPciInfo_v3(dev, &pci));
  printf("pci: %s device id 0x%08x\n", pci.busId, pci.pciDeviceId);
  nvmlDevice_t by_pci;
  CHECK(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_pci));
  if (by_pci != dev) {
    fprintf(stderr, "FAILED: the handle by PCI bus id differs from the handle by index\n");
    return 1;
  }
  int major = 0, minor = 0;
  CHECK(nvmlDeviceGetCudaComputeCapability(dev, &major, &minor));
  nvmlUtilization_t util;
  CHECK(nvmlDeviceGetUtilizationRates(dev, &util));
  unsigned int temp = 0;
  CHECK(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp));
  printf("compute capability %d.%d, utilization %u%%, temperature %u C\n", major, minor, util.gpu, temp);
  unsigned int nproc = 8;
  nvmlProcessInfo_t procs[8];
  nvmlReturn_t rc = nvmlDeviceGetComputeRunningProcesses_v3(dev, &nproc, procs);
  printf("processes: rc %d, %u\n", (int)rc, rc == NVML_SUCCESS ? nproc : 0);
  nvmlIntNvLinkDeviceType_t link_type;
  rc = nvmlDeviceGetNvLinkRemoteDeviceType(dev, 0, &link_type);
  printf("nvlink 0 remote type: rc %d (%s)\n", (int)rc, nvmlErrorString(rc));
  /* What NCCL's init asks (src/misc/nvmlwrap.cc): it stops unless P2P status READ and WRITE of
   * every pair, the device with itself included, succeed. */
  nvmlGpuP2PStatus_t p2p_read = NVML_P2P_STATUS_UNKNOWN, p2p_write = NVML_P2P_STATUS_UNKNOWN;
  CHECK(nvmlDeviceGetP2PStatus(dev, dev, NVML_P2P_CAPS_INDEX_READ, &p2p_read));
  CHECK(nvmlDeviceGetP2PStatus(dev, dev, NVML_P2P_CAPS_INDEX_WRITE, &p2p_write));
  printf("p2p with itself: read %d write %d\n", (int)p2p_read, (int)p2p_write);
  unsigned int gen = 0, max_gen = 0, width = 0;
  CHECK(nvmlDeviceGetCurrPcieLinkGeneration(dev, &gen));
  CHECK(nvmlDeviceGetMaxPcieLinkGeneration(dev, &max_gen));
  CHECK(nvmlDeviceGetCurrPcieLinkWidth(dev, &width));
  printf("pcie: gen %u (max %u) x%u\n", gen, max_gen, width);
  if (gen < 1 || gen > max_gen || width < 1 || width > 32) {
    fprintf(stderr, "FAILED: PCIe link gen %u max %u width %u\n", gen, max_gen, width);
    return 1;
  }
  nvmlGpuFabricInfoV_t fabric;
  memset(&fabric, 0, sizeof fabric);
  fabric.version = nvmlGpuFabricInfo_v2;
  rc = nvmlDeviceGetGpuFabricInfoV(dev, &fabric);
  printf("fabric: rc %d state %u\n", (int)rc, (unsigned)fabric.state);
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED) {
    fprintf(stderr, "FAILED: nvmlDeviceGetGpuFabricInfoV -> %d (%s)\n", (int)rc, nvmlErrorString(rc));
    return 1;
  }
  nvmlFieldValue_t fields[2];
  memset(fields, 0, sizeof fields);
  fields[0].fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
  fields[1].fieldId = NVML_FI_DEV_C2C_LINK_COUNT;
  CHECK(nvmlDeviceGetFieldValues(dev, 2, fields));
  printf("fields: nvlink count rc %d, c2c count rc %d\n", (int)fields[0].nvmlReturn, (int)fields[1].nvmlReturn);
  nvmlConfComputeSystemState_t cc;
  memset(&cc, 0, sizeof cc);
  CHECK(nvmlSystemGetConfComputeState(&cc));
  printf("confidential computing: feature %u\n", cc.ccFeature);
  nvmlDevice_t bogus = (nvmlDevice_t)(uintptr_t)0x7777;
  rc = nvmlDeviceGetName(bogus, name, sizeof name);
  if (rc != NVML_ERROR_INVALID_ARGUMENT) {
    fprintf(stderr, "FAILED: a handle the server never gave out answered %d\n", (int)rc);
    return 1;
  }
  CHECK(nvmlShutdown());
  printf("NVML TEST PASSED\n");
  return 0;
}
