// INTEGRITY_CHECK (see integrity_check.h for the construction). The inputs come from the shim's
// own answers (cuDriverGetVersion, cuDeviceGetCount, cuDeviceGetUuid, cuDeviceGetAttribute: the
// connect-time snapshot), because those are what the checking library reads back through the same
// shim when it computes the value it expects.
#include "client/dark_api/integrity_check.h"

#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>

#include "client/dark_api/dark_api.h"
#include "client/dark_api/md2.h"

namespace rgpu::client::dark {
namespace {

#pragma pack(push, 1)
struct Header {
  uint32_t driver_version;
  uint32_t version;
  uint32_t process_id;
  uint32_t thread_id;
  uint64_t cudart_interface_table;
  uint64_t integrity_check_table;
  uint64_t integrity_check_fn;
  uint64_t unix_seconds;
};
#pragma pack(pop)
static_assert(sizeof(Header) == 48);

CUresult gather(IntegrityInputs* in) {
  int driver = 0;
  CUresult rc = cuDriverGetVersion(&driver);
  if (rc != CUDA_SUCCESS) return rc;
  int count = 0;
  rc = cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) return rc;
  in->driver_version = static_cast<uint32_t>(driver);
  in->process_id = static_cast<uint32_t>(getpid());
  in->thread_id = integrity_thread_id();
  auto table_address = [](const void* t) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t)); };
  in->cudart_interface_table = table_address(cudart_interface_table());
  in->integrity_check_table = table_address(integrity_check_table());
  in->integrity_check_fn = table_address(static_cast<const void* const*>(integrity_check_table())[1]);
  in->devices.resize(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    IntegrityDevice& dev = in->devices[static_cast<size_t>(d)];
    CUuuid uuid;
    if ((rc = cuDeviceGetUuid(&uuid, d)) != CUDA_SUCCESS) return rc;
    std::memcpy(dev.uuid, uuid.bytes, sizeof dev.uuid);
    if ((rc = cuDeviceGetAttribute(&dev.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d)) != CUDA_SUCCESS) return rc;
    if ((rc = cuDeviceGetAttribute(&dev.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d)) != CUDA_SUCCESS) return rc;
    if ((rc = cuDeviceGetAttribute(&dev.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d)) != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI integrity_check(unsigned version, uint64_t unix_seconds, uint64_t* result) {
  if (!result) return CUDA_ERROR_INVALID_VALUE;
  IntegrityInputs in;
  if (version % 10 > 1) {  // the fixed answers need no inputs
    CUresult rc = gather(&in);
    if (rc != CUDA_SUCCESS) return rc;
  }
  auto answer = integrity_answer(version, unix_seconds, in);
  result[0] = answer[0];
  result[1] = answer[1];
  return CUDA_SUCCESS;
}

}  // namespace

uint32_t integrity_thread_id() { return static_cast<uint32_t>(static_cast<uint64_t>(pthread_self())); }

std::array<uint64_t, 2> integrity_answer(uint32_t version, uint64_t unix_seconds, const IntegrityInputs& in) {
  // Fixed answers; callers that ask with these versions accept nothing else.
  if (version % 10 == 0) return {0x3341181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};
  if (version % 10 == 1) return {0x1841181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};
  Header h{in.driver_version, version, in.process_id, in.thread_id, in.cudart_interface_table,
           in.integrity_check_table, in.integrity_check_fn, unix_seconds};
  std::vector<uint8_t> msg(sizeof h + in.devices.size() * sizeof(IntegrityDevice));
  std::memcpy(msg.data(), &h, sizeof h);
  if (!in.devices.empty()) std::memcpy(msg.data() + sizeof h, in.devices.data(), in.devices.size() * sizeof(IntegrityDevice));
  Md2Digest mac = hmac_md2(kIntegrityKey, msg.data(), msg.size());
  std::array<uint64_t, 2> out;
  std::memcpy(out.data(), mac.data(), sizeof out);
  return out;
}

const void* integrity_check_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kIntegrityCheck, 3>(true);
    t[1] = slot_fn(&integrity_check);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
