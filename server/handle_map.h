// Client handle ids ↔ the driver's real handles, for one session (protocol/messages.h, "Handles
// on the wire"). Ids are unique across handle kinds, so one map serves streams, events, modules,
// functions, contexts and the rest. Thread-safe: a session's threads share it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "protocol/messages.h"

namespace rgpu::server {

class HandleMap {
 public:
  // Looks up a client id. 0, 1 and 2 map to themselves (NULL, CU_STREAM_LEGACY,
  // CU_STREAM_PER_THREAD). Returns false for an id this session never bound. An id announced
  // with expect() and not yet bound or given up is waited for (at most kExpectWait).
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
  // Cross-thread order for one-way calls that create a handle. The session runs each client
  // thread's calls on its own worker, so a call from another thread that names the handle can
  // reach the driver before the one-way call creating it has finished on its worker (a module
  // load takes milliseconds). The reader announces the id when it routes the creating frame
  // (expect); lookups of it wait until bind() or give_up() (the creating call failed).
  void expect(uint64_t id);
  void give_up(uint64_t id);
  static constexpr auto kExpectWait = std::chrono::seconds(10);

 private:
  std::mutex mu_;
  std::condition_variable bound_cv_;
  std::unordered_set<uint64_t> expected_;
  std::unordered_map<uint64_t, void*> by_id_;
  std::unordered_map<void*, uint64_t> by_real_;
  uint64_t next_server_id_ = proto::kServerMintedBit | 1;
};

}  // namespace rgpu::server
