// Client handle ids ↔ the driver's real handles, for one session (protocol/messages.h, "Handles
// on the wire"). Ids are unique across handle kinds, so one map serves streams, events, modules,
// functions, contexts and the rest. Thread-safe: a session's threads share it.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "protocol/messages.h"

namespace rgpu::server {

class HandleMap {
 public:
  // Looks up a client id. 0, 1 and 2 map to themselves (NULL, CU_STREAM_LEGACY,
  // CU_STREAM_PER_THREAD). Returns false for an id this session never bound. (A one-way call
  // that creates a handle has always run before any later call that names it: the session keeps
  // that order across client threads, server/session.cpp note_read.)
  template <class H>
  bool get(uint64_t id, H* out) {
    void* p = nullptr;
    if (!get_raw(id, &p)) return false;
    *out = reinterpret_cast<H>(p);
    return true;
  }
  bool get_raw(uint64_t id, void** out);
  // Binds an id the client minted to the handle the driver returned. Returns false (and binds
  // nothing) if the id is already bound or is not a client id: the caller answers
  // CUDA_ERROR_INVALID_VALUE.
  bool bind(uint64_t id, void* real);
  // The id of a real handle the client did not name: an existing id, or a new server-minted one.
  uint64_t id_for(void* real);
  // Forgets an id (after a destroy/unload call succeeded).
  void unbind(uint64_t id);
  // The ids id_for mints from now on carry server number `space` (protocol/messages.h
  // kOpHandleSpace): this session serves the client's server of that number.
  void set_space(uint8_t space);

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, void*> by_id_;
  std::unordered_map<void*, uint64_t> by_real_;
  uint64_t next_server_id_ = proto::kServerMintedBit | 1;
};

}  // namespace rgpu::server
