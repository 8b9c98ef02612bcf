// NVML calls in a session (op >= proto::kFirstNvmlOp): the NVML library the session loads, the
// handle ids it hands out, and the generated handlers (gen/nvml_server_dispatch.gen.cpp).
//
// The library is opened lazily, by the first NVML call of a session, in the session's own process
// (rgpu-server never loads NVML itself). Handles (nvmlDevice_t, nvmlUnit_t, ...) cross the wire as
// ids: the server records every handle NVML gives it and answers NVML_ERROR_INVALID_ARGUMENT for
// an id it did not hand out, or one of another handle type, so no client value ever reaches NVML
// as a pointer.
#pragma once

#include <nvml.h>

#include <cstdint>
#include <string>

#include "gen/nvml_server_table.gen.h"
#include "protocol/messages.h"
#include "server/dispatch.h"

namespace rgpu::server::nvml {

inline constexpr unsigned int kMaxArray = proto::kNvmlMaxArray;
inline constexpr unsigned int kMaxString = proto::kNvmlMaxString;

// The NVML library sessions load (set by rgpu-server's --nvml before any session starts).
void set_library(const std::string& path);
// In a spare session process (server/prewarm.h): the library's load also initialises NVML, and
// the client's first nvmlInit takes that init over (no second init; its last nvmlShutdown really
// shuts NVML down). Call before table().
void set_init_ahead();
// The loaded library's functions, or nullptr when it cannot be loaded (logged once).
const NvmlTable* table();
// The result for a call whose library or function is missing (logged once per name).
nvmlReturn_t library_missing(const char* name);

// Handle ids: 0 is NULL both ways.
uint64_t handle_to_id(const void* p, const void* type_tag);
bool handle_from_id(uint64_t id, const void* type_tag, void** out);
template <class H>
inline const void* type_tag() {
  static const char tag = 0;
  return &tag;
}
template <class H>
uint64_t to_id(H h) {
  return handle_to_id(h, type_tag<H>());
}
template <class H>
bool from_id(uint64_t id, H* out) {
  void* p = nullptr;
  if (!handle_from_id(id, type_tag<H>(), &p)) return false;
  *out = static_cast<H>(p);
  return true;
}

// The handler of an NVML op, or nullptr for an op this server does not know. (generated)
Handler find_handler(uint16_t op);
// The name of an NVML op, for log lines, or nullptr. (generated)
const char* op_name(uint16_t op);

}  // namespace rgpu::server::nvml
