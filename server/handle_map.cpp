// Implementation of server/handle_map.h.
#include "server/handle_map.h"

namespace rgpu::server {

bool HandleMap::get_raw(uint64_t id, void** out) {
  if (id <= 2) {  // NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
    *out = reinterpret_cast<void*>(id);
    return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  *out = it->second;
  return true;
}

bool HandleMap::bind(uint64_t id, void* real) {
  if (id < proto::kFirstClientHandle || (id & proto::kServerMintedBit)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!by_id_.emplace(id, real).second) return false;
  by_real_[real] = id;
  return true;
}

uint64_t HandleMap::id_for(void* real) {
  if (reinterpret_cast<uint64_t>(real) <= 2) return reinterpret_cast<uint64_t>(real);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_real_.find(real);
  if (it != by_real_.end()) return it->second;
  uint64_t id = next_server_id_++;
  by_id_[id] = real;
  by_real_[real] = id;
  return id;
}

void HandleMap::unbind(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  auto r = by_real_.find(it->second);
  if (r != by_real_.end() && r->second == id) by_real_.erase(r);
  by_id_.erase(it);
}

void HandleMap::set_space(uint8_t space) {
  std::lock_guard<std::mutex> lock(mu_);
  next_server_id_ = (next_server_id_ & ~proto::kHandleServerMask) | (uint64_t{space} << proto::kHandleServerShift);
}

}  // namespace rgpu::server
