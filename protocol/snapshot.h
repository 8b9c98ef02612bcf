// The device snapshot: everything about the server's devices that never changes during a session
// (names, UUIDs, memory sizes, every attribute, PCI ids, the driver version), sent once in reply
// to kOpSnapshot so the client answers those queries locally (docs/design.md §3, "asked once").
//
// Encoding (reply payload after the ReplyPrefix):
//   i32 init_result (the server's cuInit), i32 driver_version, u32 device_count, then per device:
//   str name, 16 bytes uuid, u64 total_mem, str pci_bus_id, u32 n, then n × (i32 result, i32 value)
//   for attributes 0..n-1 (attribute 0 does not exist and is sent as an error);
//   then u32 error_count and per error: i32 code, str name, str text;
//   then u32 cached_count and cached_count × 32 bytes of SHA-256 (the server's module cache);
//   then u8 module_cache_on and i32 loading_mode (each absent from older servers' snapshots).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto {

struct DeviceInfo {
  std::string name;
  std::array<uint8_t, 16> uuid{};
  uint64_t total_mem = 0;
  std::string pci_bus_id;
  struct Attr {
    int32_t result;
    int32_t value;
  };
  std::vector<Attr> attrs;
};

struct ErrorText {
  int32_t code;
  std::string name;  // cuGetErrorName
  std::string text;  // cuGetErrorString
};

struct Snapshot {
  int32_t init_result = 0;
  int32_t driver_version = 0;
  std::vector<DeviceInfo> devices;
  // Every CUresult the server's driver can name, with its own wording.
  std::vector<ErrorText> errors;
  // SHA-256 of every module image in the server's cache (server/module_cache.h), so the client
  // asks for an image by hash only when the server has it and sends the bytes at once otherwise.
  std::vector<std::array<uint8_t, 32>> cached_modules;
  // Whether the server keeps the images it loads (its cache is on): only then may the client
  // count an image it sent as one the server can load again by hash. Absent from older servers'
  // snapshots (decoded as false).
  bool module_cache_on = false;
  // cuModuleGetLoadingMode's answer (CU_MODULE_EAGER_LOADING or CU_MODULE_LAZY_LOADING), the
  // server process's setting for its life; 0 when the server could not say (and in older servers'
  // snapshots): the client asks.
  int32_t loading_mode = 0;
};

inline constexpr uint32_t kMaxSnapshotDevices = 64;
inline constexpr uint32_t kMaxSnapshotAttrs = 4096;
inline constexpr uint32_t kMaxSnapshotErrors = 4096;
inline constexpr uint32_t kMaxSnapshotModules = 1u << 16;

void encode_snapshot(const Snapshot& s, Writer& w);
// Returns false (and leaves *s partly filled) when the bytes do not decode.
bool decode_snapshot(Reader& r, Snapshot* s);

}  // namespace rgpu::proto
