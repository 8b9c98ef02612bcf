// The process's one session on rgpu-opserver (protocol/torch_wire.h is the wire spec), over the
// reliable channel (protocol/channel.h): a broken connection is redialled and resumed within the
// server's grace, every call running exactly once, so a dropped network costs a pause, not the
// tensors.
//
// Contract:
// - get() connects on first use (RGPU_OPSERVER, RGPU_TOKEN, with backoff for up to
//   RGPU_CONNECT_TIMEOUT), runs the handshake and the torch version check, and throws a c10::Error
//   that tells the user what to do when any of it fails.
// - post() queues a one-way call and returns at once. Queued calls are written in order, in
//   batches: when the queue is large, shortly after it stops growing (a background flusher), or
//   ahead of the next call().
// - call() writes everything queued, then the request, and waits for its reply. A failure of an
//   earlier one-way call (kept by the server) is raised here, naming the op that failed.
// - Storage ids are minted here (mint), never by the server, so allocation is free of round trips.
// - Storage allocations and frees (allocate, release) are not messages of their own: they wait
//   here and travel in the next frame written (kWithStorage), or in a kTorchStorage frame of
//   their own when no frame follows within the flusher's delay. Ids are never reused, so a free
//   that waits cannot be overtaken by a reuse of its id.
// Thread-safe. The object is never destroyed: tensors freed by exit handlers may still post.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/channel.h"
#include "protocol/torch_wire.h"

namespace rgpu::torchdev {

// Throws the c10 error of a wire ErrorKind (protocol/torch_wire.h) with message: the Python type
// the server's torch raised (NotImplementedError, ValueError, IndexError, ...).
[[noreturn]] void raise_error(uint8_t kind, const std::string& message);

class Connection {
 public:
  // patient = false: the first connect tries for kProbeTime only (is_available, device_count).
  static Connection& get(bool patient = true);
  // The connection if one is up, else nullptr (never connects: for frees and exit paths).
  static Connection* existing();

  void post(uint16_t op, const Writer& payload);
  // post() of a frame whose payload is head then n bytes at data (host-to-device copies): the
  // bytes are copied into the channel's replay buffer and written at once.
  void post_bulk(uint16_t op, const Writer& head, const void* data, size_t n);
  // Returns the reply's body (after the status). With bulk, the reply carries u64 length and
  // then that many bytes, possibly over several frames; they are written to bulk (which must
  // hold exactly bulk_len) and the body returned is empty.
  // why names the wait in waits_by_reason() (an op's name, "read", "synchronize").
  // The bulk bytes are read from the connection straight into place (no copy).
  Bytes call(uint16_t op, const Writer& payload, const std::string& why, void* bulk = nullptr, size_t bulk_len = 0);
  // call() whose bulk reply is scattered over several buffers, in order (kTorchReadMany).
  struct Sink {
    void* p;
    size_t n;
  };
  void call_scatter(uint16_t op, const Writer& payload, const std::string& why, const std::vector<Sink>& sinks);
  // Counts the frames that may have changed a storage's bytes on the server (every one-way call,
  // every request but the read-only ones): a host copy of device bytes taken at one value is
  // still exact while the value stays the same (runtime/readahead.h).
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Reserves n consecutive storage ids; returns the first.
  uint64_t mint(uint64_t n = 1);
  // Mints a storage id and queues its allocation of nbytes on the server's device; returns the id.
  uint64_t allocate(uint64_t nbytes, uint8_t device);
  // Queues the free of a storage id (from a deleter: never throws).
  void release(uint64_t id) noexcept;

  const std::string& address() const { return address_; }
  const std::string& server_torch() const { return server_torch_; }
  const std::string& server_device() const { return server_device_; }
  // The devices the server presents (rgpu:0 .. rgpu:N-1), from its hello.
  int device_count() const { return device_count_; }

  // Calls that waited for a reply, and one-way calls posted, since connect (kTorchStorage
  // frames count as one-way calls; allocations and frees that ride in other frames do not).
  uint64_t waits() const { return waits_; }
  // The waits since connect by why (call()), to tell which calls still wait.
  std::map<std::string, uint64_t> waits_by_reason();
  uint64_t posts() const { return posts_; }
  // Bytes written to the server since connect (frame headers included).
  uint64_t bytes_sent() const { return bytes_sent_; }
  // The channel's counters (resumes, duplicates dropped, replay bytes held).
  proto::ChannelStats channel_stats() const;

  // The seed for the server's generator: sent now if connected, else at connect.
  static void seed(uint64_t seed);

 private:
  Connection() = default;
  void connect(bool patient);
  // Queues a frame on the channel, with the waiting storage changes ahead of its payload and
  // then `data` (n bytes, post_bulk's); with flush, writes everything queued.
  void append_frame(uint16_t op, uint16_t flags, uint32_t request_id, const std::vector<uint8_t>& payload,
                    const void* data = nullptr, size_t n = 0, bool flush = false);
  // The next frame from the server, which must be the reply (or a piece of it) to request id.
  void expect_reply(uint16_t op, uint32_t id, proto::FrameHeader* h);
  // Reads a kOpNotice's payload and acts on it (protocol/drain.h take_notice).
  void take_notice(const proto::FrameHeader& h);
  // Called with call_mu_ held before a call goes out: after proto::kCatchUpAfterIdle without one,
  // reads what came meanwhile (a draining server's notices) without waiting (protocol/drain.h
  // says why).
  void catch_up_after_idle_locked();
  // The same for one-way calls, when no call holds the reading role.
  void catch_up_if_free();
  // Tells the server this process is leaving (at exit): its session then ends with the connection.
  void goodbye();
  // The request part of call(): queues and writes the request; returns its id.
  uint32_t send_request(uint16_t op, const Writer& payload, const std::string& why);
  // Reads the reply's first frame; raises its own failure (and a deferred error with it).
  std::vector<uint8_t> read_reply(uint16_t op, uint32_t id, torchwire::ReplyStatus* st, size_t* body_at);
  // Reads the bulk part of a reply (u64 total already read from the first frame's rest) into sinks.
  void read_bulk(uint16_t op, uint32_t id, const uint8_t* rest, size_t rest_len, const std::vector<Sink>& sinks);
  [[noreturn]] void lost_unlocked(const std::string& what);
  static void raise_deferred(const torchwire::ReplyStatus& st);
  // Sends the waiting storage changes in a kTorchStorage frame (queued; written with the rest).
  void post_storage_locked();
  // Asks the flusher to write what is queued (and the waiting storage changes) shortly.
  void schedule_flush_locked();
  void flush_locked();
  void flusher();
  [[noreturn]] void lost(const std::string& what);

  std::unique_ptr<proto::Channel> ch_;
  int pid_ = 0;  // the process that connected
  std::string address_, server_torch_, server_device_;
  int device_count_ = 1;
  std::mutex mu_;        // sends on the channel, the storage changes waiting, the flusher's state
  std::mutex call_mu_;   // one request waiting for its reply at a time (the channel's one reader)
  std::condition_variable cv_;
  bool flush_pending_ = false;
  bool broken_ = false;
  std::string broken_why_;
  uint32_t next_request_ = 1;
  uint64_t next_id_ = 0;
  // Storage changes not yet in a frame (protocol/torch_wire.h, kWithStorage), under mu_.
  struct PendingAlloc {
    uint64_t id, nbytes;
    uint8_t device;
  };
  std::vector<PendingAlloc> pending_allocs_;
  std::vector<uint64_t> pending_frees_;
  uint64_t frames_ = 0;  // frames appended since connect, under mu_ (the flusher's idleness test)
  std::map<std::string, uint64_t> waits_by_reason_;  // under mu_
  std::atomic<uint64_t> waits_{0}, posts_{0}, bytes_sent_{0}, generation_{0};
  std::chrono::steady_clock::time_point last_call_{};  // under call_mu_ (catch_up_after_idle_locked)
};

}  // namespace rgpu::torchdev
