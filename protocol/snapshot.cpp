// Implementation of protocol/snapshot.h.
#include "protocol/snapshot.h"

#include <cuda.h>

namespace rgpu::proto {

void encode_snapshot(const Snapshot& s, Writer& w) {
  w.put<int32_t>(s.init_result);
  w.put<int32_t>(s.driver_version);
  w.put_u32(static_cast<uint32_t>(s.devices.size()));
  for (const DeviceInfo& d : s.devices) {
    w.put_str(d.name);
    w.append(d.uuid.data(), d.uuid.size());
    w.put_u64(d.total_mem);
    w.put_str(d.pci_bus_id);
    w.put_u32(static_cast<uint32_t>(d.attrs.size()));
    for (const auto& a : d.attrs) {
      w.put<int32_t>(a.result);
      w.put<int32_t>(a.value);
    }
  }
  w.put_u32(static_cast<uint32_t>(s.errors.size()));
  for (const ErrorText& e : s.errors) {
    w.put<int32_t>(e.code);
    w.put_str(e.name);
    w.put_str(e.text);
  }
  w.put_u32(static_cast<uint32_t>(s.cached_modules.size()));
  for (const auto& h : s.cached_modules) w.append(h.data(), h.size());
  w.put_u8(s.module_cache_on ? 1 : 0);
  w.put<int32_t>(s.loading_mode);
}

// The fewest bytes a device (two empty strings, the UUID, the memory size, no attributes) and an
// error (its code, two empty strings) take on the wire.
constexpr uint64_t kMinDeviceBytes = 4 + 16 + 8 + 4 + 4;
constexpr uint64_t kMinErrorBytes = 4 + 4 + 4;

bool decode_snapshot(Reader& r, Snapshot* s) {
  s->init_result = r.get<int32_t>();
  s->driver_version = r.get<int32_t>();
  uint32_t n = r.u32();
  // Each count is checked against the bytes left (at the smallest an entry can be encoded in)
  // before anything is sized by it: 20 bytes must not make the client allocate megabytes.
  if (!r.ok() || n > kMaxSnapshotDevices || n * kMinDeviceBytes > r.left()) return false;
  s->devices.resize(n);
  for (DeviceInfo& d : s->devices) {
    d.name = r.str(256);
    r.take(d.uuid.data(), d.uuid.size());
    d.total_mem = r.u64();
    d.pci_bus_id = r.str(64);
    uint32_t na = r.u32();
    if (!r.ok() || na > kMaxSnapshotAttrs || na * 8ull > r.left()) return false;
    d.attrs.resize(na);
    for (auto& a : d.attrs) {
      a.result = r.get<int32_t>();
      a.value = r.get<int32_t>();
    }
  }
  uint32_t ne = r.u32();
  if (!r.ok() || ne > kMaxSnapshotErrors || ne * kMinErrorBytes > r.left()) return false;
  s->errors.resize(ne);
  for (ErrorText& e : s->errors) {
    e.code = r.get<int32_t>();
    e.name = r.str(256);
    e.text = r.str(1024);
  }
  uint32_t nm = r.u32();
  if (!r.ok() || nm > kMaxSnapshotModules || nm * 32ull > r.left()) return false;
  s->cached_modules.resize(nm);
  for (auto& h : s->cached_modules) r.take(h.data(), h.size());
  s->module_cache_on = r.left() > 0 && r.u8() != 0;
  s->loading_mode = r.left() >= 4 ? r.get<int32_t>() : 0;
  if (s->loading_mode != CU_MODULE_EAGER_LOADING && s->loading_mode != CU_MODULE_LAZY_LOADING) s->loading_mode = 0;
  return r.ok();
}

}  // namespace rgpu::proto
