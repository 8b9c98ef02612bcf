// Fuzz target for rgpu::proto::decode_snapshot (protocol/snapshot.h): the client decodes the
// server's snapshot reply, so any bytes must decode or be refused without reading past the end
// or allocating past the limits. What decodes must survive an encode/decode round trip.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <cuda.h>

#include "common/wire.h"
#include "protocol/snapshot.h"

namespace {

bool same(const rgpu::proto::Snapshot& a, const rgpu::proto::Snapshot& b) {
  if (a.init_result != b.init_result || a.driver_version != b.driver_version || a.devices.size() != b.devices.size() ||
      a.errors.size() != b.errors.size() || a.cached_modules != b.cached_modules ||
      a.module_cache_on != b.module_cache_on || a.loading_mode != b.loading_mode)
    return false;
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const auto &x = a.devices[i], &y = b.devices[i];
    if (x.name != y.name || x.uuid != y.uuid || x.total_mem != y.total_mem || x.pci_bus_id != y.pci_bus_id ||
        x.attrs.size() != y.attrs.size())
      return false;
    for (size_t k = 0; k < x.attrs.size(); ++k)
      if (x.attrs[k].result != y.attrs[k].result || x.attrs[k].value != y.attrs[k].value) return false;
  }
  for (size_t i = 0; i < a.errors.size(); ++i)
    if (a.errors[i].code != b.errors[i].code || a.errors[i].name != b.errors[i].name ||
        a.errors[i].text != b.errors[i].text)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> buf(data, data + size);  // exact size, so ASan sees any over-read
  rgpu::Reader r(buf.data(), buf.size());
  rgpu::proto::Snapshot s;
  if (!rgpu::proto::decode_snapshot(r, &s)) return 0;
  if (s.devices.size() > rgpu::proto::kMaxSnapshotDevices || s.errors.size() > rgpu::proto::kMaxSnapshotErrors)
    std::abort();
  if (s.loading_mode != 0 && s.loading_mode != CU_MODULE_EAGER_LOADING && s.loading_mode != CU_MODULE_LAZY_LOADING)
    std::abort();  // the client hands it to programs as a CUmoduleLoadingMode
  rgpu::Writer w;
  rgpu::proto::encode_snapshot(s, w);
  rgpu::Reader r2(w.buf().data(), w.size());
  rgpu::proto::Snapshot t;
  if (!rgpu::proto::decode_snapshot(r2, &t) || r2.left() != 0 || !same(s, t)) std::abort();
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  rgpu::proto::Snapshot s;
  s.driver_version = 13000;
  rgpu::proto::DeviceInfo d;
  d.name = "NVIDIA H200";
  d.uuid[0] = 0x42;
  d.total_mem = 143771ull << 20;
  d.pci_bus_id = "0000:01:00.0";
  for (int a = 0; a < 8; ++a) d.attrs.push_back({a == 0 ? 1 : 0, a * 7});
  s.devices.push_back(d);
  s.devices.push_back(d);
  s.errors.push_back({0, "CUDA_SUCCESS", "no error"});
  s.errors.push_back({801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"});
  s.cached_modules.push_back({0x11, 0x22});
  s.module_cache_on = true;
  s.loading_mode = CU_MODULE_LAZY_LOADING;
  for (size_t devs : {0, 1, 2}) {
    rgpu::proto::Snapshot c = s;
    c.devices.resize(devs);
    rgpu::Writer w;
    rgpu::proto::encode_snapshot(c, w);
    out->push_back(w.buf());
  }
}
