// The client's one connection to rgpu-server: batching of one-way calls, and replies routed to
// the threads that wait for them, over the reliable channel (protocol/channel.h): a connection
// that breaks is redialled and the session resumed, every frame delivered exactly once, so the
// program never sees the break, only a pause.
//
// Sending: frames are queued in the channel (which keeps them until the server acknowledges
// them). A one-way call only queues (written when the queue passes kFlushBytes, by the idle
// flusher within kIdleFlush, or ahead of the next waiting call); a waiting call queues and
// flushes, so everything queued before it reaches the server first.
// Receiving: no dedicated reader thread. A waiting thread that finds no other thread reading
// becomes the reader, reads frames and hands each to the thread whose request it answers, until
// its own reply arrives (a leader/follower scheme): a single-threaded program pays no thread
// switch per call.
// Host callbacks (protocol/messages.h kOpCallback) are the one kind of frame that may arrive
// while no thread waits for a reply (a program may spin on a flag its callback sets). While a
// callback is announced (expect_callback) and not yet delivered, the callback thread (started
// at the first callback) takes the reader role whenever no waiting thread holds it, polling in
// short slices so it gives the role back when the last announced callback has arrived. So the
// reply fast path is untouched for programs with no callback in flight. Delivered callbacks run
// on the callback thread, in arrival order, never on a reader (a reader must keep reading).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "protocol/channel.h"
#include "protocol/handshake.h"
#include "protocol/messages.h"

namespace rgpu::client {

// What a waiting call gets back.
struct ReplySlot {
  std::vector<uint8_t> payload;  // the reply payload (or its prefix when sinking)
  void* sink = nullptr;          // where reply bytes past sink_prefix go
  size_t sink_prefix = 0;
  size_t sink_cap = 0;
  size_t sink_got = 0;
  bool done = false;
  bool failed = false;  // the connection broke before the reply came
};

class Connection {
 public:
  // Connects to one server ("host:port" or "tls://host:port"; proto::split_server_list splits
  // RGPU_SERVER's list) and runs the handshake. With want_snapshot, asks the server to send its device
  // snapshot right behind the handshake (kCapPushedSnapshot), kept for take_pushed_snapshot. On
  // failure returns nullptr with a sentence in *err.
  static Connection* open(const std::string& server, const std::string& token, std::string* err,
                          bool want_snapshot = false);
  // A connection over a channel its caller started (no dialling, no handshake, no idle flusher:
  // one-way calls go out with the next waiting one). For the fuzz target that plays a hostile
  // server (tests/fuzz/client_frames_fuzz.cpp).
  static std::unique_ptr<Connection> over(std::unique_ptr<proto::Channel> channel, const std::string& server_name);
  // The pushed snapshot's reply payload (ReplyPrefix, CUresult, snapshot), once; false when the
  // server pushed none (an older server, or not asked).
  bool take_pushed_snapshot(std::vector<uint8_t>* payload);
  ~Connection();

  // Queues a one-way frame. `extra` is copied or already sent on return (the caller may reuse its
  // memory at once).
  // Returns false when the connection is gone.
  bool send_oneway(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                   size_t extra_len);
  // Sends a waiting frame (flushing everything queued before it) and waits for its reply.
  // `extra` is sent without copying. Returns false when the connection broke.
  bool call(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra, size_t extra_len,
            ReplySlot* slot);
  // The two halves of call(), for pipelining: submit sends and returns the request id (0 when the
  // connection broke); wait waits for that request's reply. The slot must outlive the wait.
  uint32_t submit(uint16_t op, uint32_t thread_id, const void* args, size_t args_len, const void* extra,
                  size_t extra_len, ReplySlot* slot);
  bool wait(uint32_t id, ReplySlot* slot);
  // Sends everything queued now.
  bool flush();

  // Host callbacks. The handler runs on the callback thread for each kOpCallback frame; `from`
  // is this connection, which the answer (kOpCallbackDone) goes back on.
  using CallbackHandler = void (*)(Connection& from, uint64_t id, int32_t status, bool run);
  void set_callback_handler(CallbackHandler h);
  // Mapped host memory: the handler applies each kOpMappedUpdate frame on the reading thread and
  // returns false when the update is out of bounds or names a buffer of another server's (the
  // connection then breaks). Without one, such a frame breaks the connection.
  using MappedUpdateHandler = bool (*)(const Connection& from, const uint8_t* payload, size_t n);
  void set_mapped_update_handler(MappedUpdateHandler h) { mapped_handler_.store(h); }
  // Async device-to-host data (kOpAsyncData): `dest` gives the buffer registered under the
  // delivery id for n bytes (nullptr: unknown id or wrong length, the connection then breaks);
  // `done` is called once the bytes are in it (or at once with the failure status).
  using AsyncDest = void* (*)(uint64_t id, int32_t status, size_t n);
  using AsyncDone = void (*)(uint64_t id, int32_t status);
  void set_async_data_handlers(AsyncDest dest, AsyncDone done) {
    async_done_.store(done);
    async_dest_.store(dest);
  }
  // Announces one kOpCallback frame to come (call before sending the request that causes it).
  void expect_callback();
  // Sends a one-way control frame now, behind everything queued. False when the connection is gone.
  bool send_control(uint16_t op, const void* payload, size_t len);
  // Tells the server this process is leaving (kOpGoodbye), so that the end of the connection ends
  // the session at once instead of keeping it for a reconnect. Calls made after it (from later
  // exit handlers) are still served. Every open connection says it at exit by itself.
  void goodbye();
  // The channel's counters (resumes, replay buffer; tests and RGPU_STATS).
  proto::ChannelStats channel_stats() const { return ch_->stats(); }
  // Breaks the connection as the network would (tests: RGPU_TEST_CUT_AFTER_CALLS).
  void break_connection(const std::string& why) { ch_->break_connection(why); }

  const std::string& server_name() const { return server_name_; }
  bool broken() const { return broken_.load(); }
  uint64_t round_trips() const { return round_trips_.load(); }
  uint64_t oneway_calls() const { return oneway_calls_.load(); }
  // Frame bytes (headers and payloads) queued or sent, and received, after the handshake.
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  // Microseconds the program's threads spent writing frames (not the idle flusher's): long when
  // the server reads slower than the program sends.
  uint64_t write_us() const { return write_us_.load(std::memory_order_relaxed); }
  uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }

  static constexpr size_t kFlushBytes = 256 << 10;
  // One-way payloads at least this large are written at once instead of waiting in the queue.
  static constexpr size_t kDirectSendBytes = 64 << 10;

 private:
  Connection() = default;
  void mark_broken(const std::string& why);
  // Reads one frame and completes its slot (or delivers it: callbacks, async data, printf
  // output, mapped updates). Called by the current reader only. With a timeout, *idle tells that
  // nothing arrived within it.
  bool read_one(std::chrono::milliseconds timeout = proto::kForever, bool* idle = nullptr);
  bool read_payload(void* dst, size_t n);
  // A kOpNotice frame of `length` bytes, its header read: logs it; false when it ends the session.
  bool take_notice(uint32_t length);
  // Before a call goes out after proto::kCatchUpAfterIdle without one: reads what came meanwhile
  // (a notice).
  void catch_up_after_idle();
  void idle_flusher();
  // Completes every pending slot as failed (the connection broke). recv_mu_ held.
  void fail_pending_locked();
  void callback_loop();
  bool sent(proto::Status s);

  std::unique_ptr<proto::Channel> ch_;
  std::string server_name_;
  proto::ClientHandshakeResult hs_;
  std::vector<uint8_t> pushed_snapshot_;
  bool has_pushed_snapshot_ = false;

  // send_mu_ orders request ids with the frames' place in the channel, and guards the idle
  // flusher's state.
  std::mutex send_mu_;
  uint32_t next_request_ = 1;
  std::condition_variable flush_cv_;
  bool stop_ = false;
  bool queued_ = false;  // one-way frames are waiting for the idle flusher
  std::thread flusher_;

  std::mutex recv_mu_;
  std::condition_variable recv_cv_;
  bool reading_ = false;
  std::unordered_map<uint32_t, ReplySlot*> pending_;

  // Host callbacks; guarded by recv_mu_.
  std::condition_variable cb_cv_;
  struct Notice {
    uint64_t id;
    int32_t status;
    bool run;
  };
  std::vector<Notice> ready_;  // delivered, not yet run
  size_t awaited_ = 0;                               // announced, not yet delivered
  bool cb_stop_ = false;
  CallbackHandler cb_handler_ = nullptr;
  std::atomic<MappedUpdateHandler> mapped_handler_{nullptr};
  std::atomic<AsyncDest> async_dest_{nullptr};
  std::atomic<AsyncDone> async_done_{nullptr};
  std::thread cb_thread_;

  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> round_trips_{0};
  std::atomic<uint64_t> oneway_calls_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> write_us_{0};
  std::atomic<int64_t> last_call_ns_{0};  // when the last call went out (steady clock), for catch_up_after_idle
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace rgpu::client
