// Implementation of server/session.h.
#include "server/session.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/spin_policy.h"
#include "common/wire.h"
#include "gen/ops.gen.h"
#include "protocol/channel.h"
#include "protocol/drain.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/op_classes.h"
#include "protocol/session_dir.h"
#include "protocol/session_table.h"
#include "protocol/transport.h"
#include "protocol/wire/control.h"
#include "server/dispatch.h"
#include "server/handle_map.h"
#include "server/mapped_memory.h"
#include "server/handlers/control.h"

namespace rgpu::server {
namespace {

constexpr size_t kMaxClientThreads = 1024;
// How long an idle worker may spin before it sleeps (when its SpinPolicy lets it).
constexpr auto kSpin = std::chrono::microseconds(50);
// How many payload bytes one client thread may have queued before the reader waits for it.
constexpr size_t kMaxQueuedBytes = 512u << 20;
// Replies with at least this many bulk bytes are sent by the session's writer thread.
constexpr size_t kAsyncReplyBytes = 1u << 20;
// How often the standby looks at a reading thread running a call (Session::stand_by): a call
// stuck there holds up the client's other threads for one to two ticks at most.
constexpr auto kStandbyTick = std::chrono::milliseconds(20);

// The synchronous calls the reading thread may run itself (Session::run_on_reader): queries that
// return at once, never wait for the GPU, another thread or the client (no host callback), and
// read no per-thread state of the driver but the current context. No stream calls: a stream
// argument of CU_STREAM_PER_THREAD (and the _ptsz variants) names the calling thread's own stream.
bool op_runs_on_reader(uint16_t op) {
  switch (op) {
    case op::cuMemGetInfo:
    case op::cuMemGetInfo_v2:
    case op::cuMemGetAddressRange:
    case op::cuMemGetAddressRange_v2:
    case op::cuPointerGetAttribute:
    case op::cuPointerGetAttributes:
    case op::cuFuncGetAttribute:
    case op::cuEventElapsedTime:
    case op::cuEventElapsedTime_v2:
    case op::cuCtxGetLimit:
    case op::cuCtxGetStreamPriorityRange:
    case op::cuDeviceGetAttribute:
      return true;
    default:
      return false;
  }
}

struct Frame {
  proto::FrameHeader h;
  Bytes payload;
  uint64_t seq = 0;  // the order the session read it in (Session::note_read)
};

class Session;

// Device printf: the driver prints what kernels printed to this process's stdout when a
// synchronizing call returns. The session process points its stdout at a pipe; a thread keeps
// the pipe drained (so the driver never blocks on a full pipe) and the bytes go to the client
// before the next reply (protocol/messages.h, kOpDeviceOutput).
class DeviceOutput {
 public:
  // Redirects stdout; false (stdout left alone) if the pipe cannot be made.
  bool start() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    std::fflush(stdout);
    if (dup2(fds[1], STDOUT_FILENO) < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return false;
    }
    ::close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    std::thread([this] { drain_loop(); }).detach();
    return true;
  }
  // What was printed and collected so far; with `flush`, first everything printed so far (the
  // driver's buffered stdout flushed and the pipe read here, not left to the thread).
  std::string take(bool flush) {
    if (fd_ < 0) return {};
    if (flush) std::fflush(stdout);
    std::lock_guard<std::mutex> lock(mu_);
    if (flush) read_available();
    std::string out;
    out.swap(buf_);
    return out;
  }

 private:
  void read_available() {
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return;
      // Bounded: a kernel printing without end must not exhaust the server's memory.
      if (buf_.size() < (64u << 20)) buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  void drain_loop() {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
      std::lock_guard<std::mutex> lock(mu_);
      read_available();
    }
  }
  int fd_ = -1;
  std::mutex mu_;
  std::string buf_;
};

// Runs one client thread's calls in order.
class Worker {
 public:
  Worker(Session* s, uint32_t thread_id) : session_(s), thread_id_(thread_id) {
    thread_ = std::thread([this] { loop(); });
  }
  // Queues a call. Backpressure: while this thread already has kMaxQueuedBytes waiting, the
  // session's reader waits here (and TCP slows the client down) instead of buffering without
  // bound, except while a host callback is in flight, whose answer only the reader can take.
  void push(Frame f) {
    bool wake;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (queued_bytes_ > kMaxQueuedBytes && !stop_ && !callbacks_in_flight())
        space_cv_.wait_for(lock, std::chrono::milliseconds(10));
      queued_bytes_ += f.payload.size();
      queue_.push_back(std::move(f));
      queued_.fetch_add(1, std::memory_order_release);
      wake = sleeping_;
    }
    if (wake) cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
  }

  // For the session's reading thread, which runs a short synchronous call itself when this
  // worker is parked with nothing queued (Session::run_on_reader): true when it is, and then the
  // worker takes no call until unclaim(); *ctx is the context current on this worker's thread
  // when it parked, which the reader makes current on its own thread for the call.
  bool claim(CUcontext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sleeping_ || !queue_.empty() || claimed_ || stop_ || !ctx_known_) return false;
    claimed_ = true;
    *ctx = ctx_;
    return true;
  }
  void unclaim() {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      claimed_ = false;
      wake = !queue_.empty();
    }
    if (wake) cv_.notify_one();
  }
  // Runs one call and writes its reply (if it wants one): on this worker's thread, or on the
  // reading thread while claimed. `body` and `bulk` are the running thread's buffers. False when
  // the session failed meanwhile (a malformed call, a reply that could not be written).
  bool run_call(const Frame& f, std::vector<uint8_t>& body, Bytes& bulk);
  std::thread& thread() { return thread_; }

  // A bulk buffer the session's writer has finished sending comes back for reuse.
  void release(Bytes b) {
    {
      std::lock_guard<std::mutex> lock(bulk_mu_);
      spare_.push_back(std::move(b));
      --bulk_in_flight_;
    }
    bulk_cv_.notify_one();
  }

 private:
  void loop();
  bool callbacks_in_flight() const;
  // A buffer to fill with the next bulk reply; waits while one is being sent and another filled
  // (two buffers: the device copy of chunk k+1 overlaps the sending of chunk k).
  Bytes next_bulk() {
    std::unique_lock<std::mutex> lock(bulk_mu_);
    bulk_cv_.wait(lock, [&] { return bulk_in_flight_ < 2 || !spare_.empty(); });
    if (spare_.empty()) return Bytes();
    Bytes b = std::move(spare_.back());
    spare_.pop_back();
    return b;
  }

  Session* session_;
  uint32_t thread_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Frame> queue_;
  std::atomic<size_t> queued_{0};
  SpinPolicy spin_{kSpin};  // the loop's thread only
  size_t queued_bytes_ = 0;  // payload bytes in queue_, under mu_
  std::condition_variable space_cv_;
  std::mutex bulk_mu_;
  std::condition_variable bulk_cv_;
  std::vector<Bytes> spare_;
  int bulk_in_flight_ = 0;
  bool sleeping_ = false;
  bool stop_ = false;
  bool claimed_ = false;  // the reading thread runs one of this thread's calls (claim)
  // The context current on this worker's thread when it last parked (ctx_known_: the driver said).
  CUcontext ctx_ = nullptr;
  bool ctx_known_ = false;
  // The first failure of a one-way call since the last reply on this thread.
  int32_t deferred_result_ = 0;
  uint16_t deferred_op_ = 0;
  std::thread thread_;
};

class Session : public ClientCallbacks {
 public:
  Session(int fd, const SessionOptions& o) : fd_(fd), opt_(o) {}

  int run() {
    if (opt_.transport && !opt_.channel) {
      log::warn("client %s does not speak the channel (an older rgpu release), which TLS needs; closing",
                opt_.identity.c_str());
      return 1;
    }
    if (opt_.channel && !start_channel()) return 1;
    if (!ch_) {
      reader_.emplace(fd_, proto::kMaxPayload);
      reader_->frame_time = proto::ChannelOptions{}.frame_time;  // the channel's bound on a stalled frame
    }
    if (on_reader_) {
      // The standby: it reads in this thread's place while a call run here is stuck (stand_by),
      // and the session may end on it (then it exits the process: this thread may be in the driver).
      std::thread([this] {
        ReaderBuffers buffers;
        for (;;) {
          stand_by();
          if (read_frames(buffers)) _exit(finish());
        }
      }).detach();
    }
    ReaderBuffers buffers;
    while (!read_frames(buffers)) stand_by();
    return finish();
  }

  // Whether the reading thread runs short synchronous calls itself (run_on_reader).
  bool runs_on_reader() const { return on_reader_; }

  // Logs why the peer is being dropped and closes the connection.  // Logs why the peer is being dropped and closes the connection.
  void hostile(const std::string& why) {
    if (!failed_.exchange(true)) {
      log::error("closing the connection from %s (%s): %s", opt_.peer.c_str(), opt_.identity.c_str(), why.c_str());
      if (ch_) ch_->close("the client sent something malformed: " + why);
      else ::shutdown(fd_, SHUT_RDWR);
    }
  }

  // Writes one reply: prefix, the handler's output, then its bulk bytes (if any).
  void reply(const proto::FrameHeader& req, const proto::ReplyPrefix& prefix, const std::vector<uint8_t>& body,
             const Bytes& bulk) {
    proto::FrameHeader h = proto::make_header(req.op, proto::kReply, req.request_id, req.thread_id,
                                              sizeof prefix + body.size() + bulk.size());
    iovec iov[4] = {{&h, sizeof h},
                    {const_cast<proto::ReplyPrefix*>(&prefix), sizeof prefix},
                    {const_cast<uint8_t*>(body.data()), body.size()},
                    {const_cast<uint8_t*>(bulk.data()), bulk.size()}};
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!write_iov(iov, bulk.empty() ? 3 : 4)) failed_.store(true);
  }

  // Sends a large reply from the session's writer thread, so the worker can produce the next one
  // meanwhile; the bulk buffer goes back to `owner` once sent.
  void reply_async(const proto::FrameHeader& req, const proto::ReplyPrefix& prefix, std::vector<uint8_t> body,
                   Bytes bulk, Worker* owner) {
    {
      std::lock_guard<std::mutex> lock(wq_mu_);
      wq_.push_back(AsyncReply{req, prefix, std::move(body), std::move(bulk), owner});
      if (!writer_.joinable()) writer_ = std::thread([this] { write_loop(); });
    }
    wq_cv_.notify_one();
  }

  const DriverTable& driver() const { return *opt_.driver; }
  HandleMap& handles() { return handles_; }

  // Cross-thread order (docs/design.md §3, "Ordering"). Each client thread's calls run on a worker
  // of their own, so a thread's call could reach the driver before an earlier one-way call of
  // another thread, still queued behind a slow call on its worker. On a real driver that one-way
  // call had returned, so it was enqueued first: PyTorch's backward runs on an autograd thread
  // and launches on the stream the main thread's forward was launched on, and on the H200 the
  // backward's kernels sometimes ran before the forward's (AdamW results off by 1e-2 or NaN,
  // GPT losses drifting; never with RGPU_BATCH=0). So a call runs only after every one-way call
  // read before it has run; calls that wait for an answer impose no order (their client thread
  // is blocked: no later call of another thread depends on them), so one thread's blocking
  // synchronize does not stall another. This also covers a handle created one-way on one thread
  // and named at once on another (a module loaded one-way): its creating call runs first.
  // True when no one-way call read before f is unfinished (f's wait_turn would not wait).
  bool note_read(Frame& f) {
    std::lock_guard<std::mutex> lock(order_mu_);
    f.seq = ++read_seq_;
    const bool in_turn = unfinished_one_way_.empty();
    if (f.h.flags & proto::kNoReply) unfinished_one_way_.insert(f.seq);
    return in_turn;
  }
  // A one-way call that blocks in the driver (a cuMemFree behind a kernel that spins until
  // another client thread's later call releases it) would stall that later call for good: after
  // order_wait_ (10 s) the later call runs anyway, with a warning, as the program's other
  // threads would have gone on past the blocked call on a real driver.
  void wait_turn(const Frame& f) {
    std::unique_lock<std::mutex> lock(order_mu_);
    auto turn = [&] { return unfinished_one_way_.empty() || *unfinished_one_way_.begin() >= f.seq; };
    if (order_cv_.wait_for(lock, order_wait_, turn)) return;
    if (!order_timeout_logged_) {
      order_timeout_logged_ = true;
      log::warn("a call of client thread %u waited %lld ms for an earlier one-way call of another thread that is "
                "still running in the driver; running it now, out of order (the program may depend on the "
                "two threads' calls overlapping)",
                f.h.thread_id, static_cast<long long>(order_wait_.count()));
    }
  }
  void finished(const Frame& f) {
    if (!(f.h.flags & proto::kNoReply)) return;
    {
      std::lock_guard<std::mutex> lock(order_mu_);
      unfinished_one_way_.erase(f.seq);
    }
    order_cv_.notify_all();
  }
  MappedMemory& mapped() { return mapped_; }

  // Sends what kernels printed since the last reply (kOpDeviceOutput), if anything.
  bool send_device_output(bool flush) {
    std::string text = output_.take(flush);
    if (text.empty()) return true;
    proto::FrameHeader h = proto::make_header(proto::kOpDeviceOutput, 0, 0, 0, text.size());
    iovec iov[2] = {{&h, sizeof h}, {text.data(), text.size()}};
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!write_iov(iov, 2)) failed_.store(true);
    return !failed_.load();
  }
  DeviceOutput& output() { return output_; }

  // Sends kOpMappedUpdate frames for what the GPU changed in mapped host memory;
  // `finished_up_to` as in MappedMemory::send_updates.
  bool send_mapped_updates(const uint64_t* finished_up_to) {
    if (mapped_.empty()) return true;
    return mapped_.send_updates([this](const std::vector<uint8_t>& payload) { return send_mapped_update(payload); },
                                finished_up_to);
  }
  bool send_mapped_update(const std::vector<uint8_t>& payload) {
    proto::FrameHeader h = proto::make_header(proto::kOpMappedUpdate, 0, 0, 0, payload.size());
    iovec iov[2] = {{&h, sizeof h}, {const_cast<uint8_t*>(payload.data()), payload.size()}};
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!write_iov(iov, 2)) failed_.store(true);
    return !failed_.load();
  }

  void run(uint64_t id, int32_t status) override {
    {
      std::lock_guard<std::mutex> lock(cb_mu_);
      cb_waiting_[id] = false;
    }
    cb_in_flight_.fetch_add(1);
    // The work ahead of the host function has finished: what it wrote to mapped memory (an
    // async copy into it, say) reaches the client before the function runs there.
    send_mapped_updates(nullptr);
    notify(id, status, 1);
    std::unique_lock<std::mutex> lock(cb_mu_);
    cb_cv_.wait(lock, [&] { return cb_waiting_[id] || failed_.load() || ended_; });
    cb_waiting_.erase(id);
    cb_in_flight_.fetch_sub(1);
  }
  bool callbacks_in_flight() const { return cb_in_flight_.load() > 0; }
  void drop(uint64_t id, int32_t status) override { notify(id, status, 0); }
  bool send_frame(uint16_t op, const void* head, size_t head_len, const void* data, size_t n) override {
    proto::FrameHeader h = proto::make_header(op, 0, 0, 0, head_len + n);
    iovec iov[3] = {{&h, sizeof h}, {const_cast<void*>(head), head_len}, {const_cast<void*>(data), n}};
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!write_iov(iov, 3)) failed_.store(true);
    return !failed_.load();
  }

  // The session is over: release host functions waiting for answers that will not come.
  void end() {
    std::lock_guard<std::mutex> lock(cb_mu_);
    ended_ = true;
    cb_cv_.notify_all();
  }

  // One handler's time; the session's last log line gives the sums (where a slow client start goes).
  void note_handler_time(uint16_t op, std::chrono::steady_clock::duration d) {
    const auto us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    handler_us_.fetch_add(us, std::memory_order_relaxed);
    if (op == op::cuModuleLoadData || op == op::cuLibraryLoadData || op == proto::kOpModuleByHash)
      load_us_.fetch_add(us, std::memory_order_relaxed);
  }

 private:
  // The buffers a thread of the reading role runs calls with (run_on_reader).
  struct ReaderBuffers {
    std::vector<uint8_t> body;
    Bytes bulk;
  };

  // The reading role: reads frames and hands each call to the worker of its client thread, or
  // runs it here (run_on_reader). True when the session ended (status_ says how), false when this
  // thread lost the role to the standby while it ran a call.
  bool read_frames(ReaderBuffers& buffers) {
    std::string why;
    for (;;) {
      Frame f;
      if (ch_) {
        if (ch_->receive_frame(&f.h, &f.payload, proto::Wait::kPassive) != proto::Status::kOk) {
          lost_why_ = ch_->why();
          return true;
        }
      } else {
        proto::ReadResult rr = reader_->next(&f.h, &f.payload, &why);
        if (rr == proto::ReadResult::kClosed) return true;
        if (rr == proto::ReadResult::kError) {
          hostile(why);
          status_ = 1;
          return true;
        }
      }
      if (f.h.op == proto::kOpGoodbye) {
        // The client is leaving: on the channel, its connection's end is the session's end
        // (not a break to wait out); calls it still makes from exit handlers are served.
        if (!ch_) return true;
        ch_->end_on_break();
        continue;
      }
      if (f.h.op == proto::kOpCallbackDone) {
        // Answered here, not by a worker: the worker of that client thread may be the one
        // blocked behind the callback.
        Reader r(f.payload.data(), f.payload.size());
        uint64_t id = 0;
        if (!proto::wire::read_callback_done(r, &id)) {
          hostile("a malformed host-callback answer");
          status_ = 1;
          return true;
        }
        callback_done(id);
        continue;
      }
      if (f.h.op == proto::kOpPeerCancel && (f.h.flags & proto::kNoReply)) {
        // Taken here too: the worker of that client thread is the one waiting in the copy's receive.
        if (!handlers::peer_cancel(f.payload.data(), f.payload.size())) {
          hostile("a malformed cancel of a copy between servers");
          status_ = 1;
          return true;
        }
        continue;
      }
      if (f.h.flags & proto::kReply) {
        hostile("the client sent a reply frame");
        status_ = 1;
        return true;
      }
      Worker* w = worker(f.h.thread_id);
      if (!w) {
        hostile(log::format("more than %zu client threads", kMaxClientThreads));
        status_ = 1;
        return true;
      }
      ++calls_;
      counters_->call(f.h.op, !(f.h.flags & proto::kNoReply), sizeof f.h + f.payload.size());
      const bool in_turn = note_read(f);
      CUcontext ctx = nullptr;
      if (on_reader_ && in_turn && !(f.h.flags & proto::kNoReply) && op_runs_on_reader(f.h.op) && w->claim(&ctx)) {
        if (!run_on_reader(w, f, ctx, buffers)) return false;
      } else {
        w->push(std::move(f));
      }
      if (failed_.load()) {
        status_ = 1;
        return true;
      }
    }
  }

  // Runs f, a short synchronous call (op_runs_on_reader) of w's client thread, on this reading
  // thread instead of waking w's thread for it and sleeping until the next frame: a thread
  // hand-off less per call (two futex calls and a wake-up, which on a loaded 2-core machine was
  // what a small call cost over a TCP round trip; bench/recorded/cpu-2026-12-06-loaded2). It runs
  // only where the worker would run it at once, so that nothing changes but the thread:
  // - w is claimed: parked, nothing queued (its client thread's earlier calls have all run), and
  //   it takes no call until this one is done;
  // - no other thread's one-way call read before f is unfinished (note_read: wait_turn would not
  //   wait);
  // - the context current on w's thread is made current here (the driver's per-thread state a
  //   listed call reads is its current context and nothing else).
  // The call may still block in the driver (a suspended process, a driver lock held by another
  // thread): then the standby takes the reading role within two ticks (stand_by), and false says
  // this thread lost it.
  bool run_on_reader(Worker* w, Frame& f, CUcontext ctx, ReaderBuffers& buffers) {
    const uint64_t turn = reader_turn_.load(std::memory_order_relaxed);  // even: no call running here
    reader_turn_.store(turn + 1);
    if (standby_asleep_.load()) {
      std::lock_guard<std::mutex> lock(standby_mu_);
      standby_cv_.notify_one();
    }
    const DriverTable& drv = driver();
    CUcontext current = nullptr;
    const bool ready = drv.cuCtxGetCurrent(&current) == CUDA_SUCCESS &&
                       (current == ctx || drv.cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    if (ready) {
      ++calls_on_reader_;
      w->run_call(f, buffers.body, buffers.bulk);  // a failure sets failed_
    }
    w->unclaim();
    if (!ready) w->push(std::move(f));
    uint64_t expected = turn + 1;
    return reader_turn_.compare_exchange_strong(expected, turn + 2);
  }

  // The thread not reading waits here while the reader runs calls (run_on_reader), looking once a
  // tick, and takes the reading role when one call has held the reader for a whole tick, so that
  // heartbeats, host-callback answers and other client threads' calls are read on. It sleeps
  // without ticking while the reader runs none. Returns holding the role.
  void stand_by() {
    std::unique_lock<std::mutex> lock(standby_mu_);
    uint64_t seen = reader_turn_.load();
    bool quiet = false;
    for (;;) {
      if (quiet) {
        standby_asleep_.store(true);
        standby_cv_.wait(lock, [&] { return reader_turn_.load() != seen; });
        standby_asleep_.store(false);
      } else {
        standby_cv_.wait_for(lock, kStandbyTick);
      }
      uint64_t now = reader_turn_.load();
      if ((now & 1) && now == seen && reader_turn_.compare_exchange_strong(now, now + 1)) {
        if (!takeover_logged_) {
          takeover_logged_ = true;
          log::info("a call run on the reading thread has been in the driver for over %lld ms (a suspended "
                    "session, or a driver lock held elsewhere); another thread reads the client's frames meanwhile",
                    static_cast<long long>(kStandbyTick.count()));
        }
        return;
      }
      quiet = now == seen;
      seen = now;
    }
  }

  // The session is over: logs it and returns the process's exit status.
  int finish() {
    // The client is gone: its process's GPU state goes with ours. Exit without waiting for
    // workers that may be blocked in the driver.
    end();
    door_.close();
    log::info("session for %s ended after %llu calls (%llu run on the reading thread; %.0f ms in the driver, %.0f ms "
              "of it loading modules)%s%s",
              opt_.identity.c_str(), static_cast<unsigned long long>(calls_),
              static_cast<unsigned long long>(calls_on_reader_), handler_us_.load() / 1e3, load_us_.load() / 1e3,
              lost_why_.empty() ? "" : ": ", lost_why_.c_str());
    unregister_session(opt_.sessions_dir, getpid());
    return failed_.load() ? 1 : status_;
  }

  struct AsyncReply {
    proto::FrameHeader req;
    proto::ReplyPrefix prefix;
    std::vector<uint8_t> body;
    Bytes bulk;
    Worker* owner;
  };

  void write_loop() {
    for (;;) {
      AsyncReply r;
      {
        std::unique_lock<std::mutex> lock(wq_mu_);
        wq_cv_.wait(lock, [&] { return !wq_.empty(); });
        r = std::move(wq_.front());
        wq_.pop_front();
      }
      reply(r.req, r.prefix, r.body, r.bulk);
      r.bulk.clear();
      r.owner->release(std::move(r.bulk));
    }
  }

  // Writes one frame (iov[0] is its header, the rest its payload), write_mu_ held: into the
  // channel when there is one (a broken connection is not an error there: the frame goes out
  // after the resume), else straight to the socket.
  bool write_iov(iovec* iov, int count) {
    size_t bytes = 0;
    for (int i = 0; i < count; ++i) bytes += iov[i].iov_len;
    counters_->sent(bytes);
    if (!ch_) return net::writev_full(fd_, iov, count);
    proto::FrameHeader h;
    std::memcpy(&h, iov[0].iov_base, sizeof h);
    return ch_->send(h.op, h.flags, h.request_id, h.thread_id, iov + 1, count - 1, true) == proto::Status::kOk;
  }

  // Puts the channel on the connection and opens the door resuming clients come back through.
  bool start_channel() {
    proto::ServerChannelSetup setup;
    setup.session = opt_.session;
    setup.token = opt_.token;
    setup.grace = opt_.grace;
    setup.door_dir = opt_.door_dir;
    setup.identity = opt_.identity;
    setup.transport = opt_.transport;
    setup.tls = opt_.tls;
    setup.on_connection = [this](bool connected) {
      const long long ends = connected ? 0 : static_cast<long long>(time(nullptr)) + opt_.grace.count();
      proto::table::set_connected(connected);
      write_session_entry(opt_.sessions_dir, opt_.identity, opt_.peer, start_time_, ends);
    };
    ch_ = proto::start_server_channel(fd_, setup, &door_);
    return ch_ != nullptr;
  }

  void notify(uint64_t id, int32_t status, uint32_t run) {
    std::vector<uint8_t> payload;
    Writer w(&payload);
    proto::wire::put_callback(w, {id, status, run});
    proto::FrameHeader h = proto::make_header(proto::kOpCallback, 0, 0, 0, payload.size());
    iovec iov[2] = {{&h, sizeof h}, {payload.data(), payload.size()}};
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!write_iov(iov, 2)) failed_.store(true);
  }

  void callback_done(uint64_t id) {
    std::lock_guard<std::mutex> lock(cb_mu_);
    auto it = cb_waiting_.find(id);
    if (it == cb_waiting_.end()) {
      log::warn("the client answered host callback %llu, which is not waiting; ignoring it",
                static_cast<unsigned long long>(id));
      return;
    }
    it->second = true;
    cb_cv_.notify_all();
  }

  Worker* worker(uint32_t tid) {
    auto it = workers_.find(tid);
    if (it != workers_.end()) return it->second.get();
    if (workers_.size() >= kMaxClientThreads) return nullptr;
    auto w = std::make_unique<Worker>(this, tid);
    Worker* raw = w.get();
    workers_.emplace(tid, std::move(w));
    return raw;
  }

  int fd_;
  SessionOptions opt_;
  std::optional<proto::FrameReader> reader_;  // without the channel: the reading role's reader
  int status_ = 0;  // the exit status the reading role ended the session with
  // The reading thread runs short synchronous calls itself (run_on_reader; RGPU_INLINE_CALLS).
  const bool on_reader_ = env::get().inline_calls && opt_.driver->cuCtxGetCurrent && opt_.driver->cuCtxSetCurrent;
  // Bumped by two per call run on the reader: odd while one runs. The standby makes it even to
  // take the reading role from a reader stuck in a call (stand_by).
  std::atomic<uint64_t> reader_turn_{0};
  std::mutex standby_mu_;
  std::condition_variable standby_cv_;
  std::atomic<bool> standby_asleep_{false};
  bool takeover_logged_ = false;  // standby_mu_
  uint64_t calls_on_reader_ = 0;
  // This process's row of counters in the listener's table (rgpu-server --metrics-listen).
  proto::table::Counters* const counters_ = proto::table::my_counters();
  const long long start_time_ = static_cast<long long>(time(nullptr));
  std::unique_ptr<proto::Channel> ch_;  // with kCapChannel: every frame goes through it
  proto::SessionDoor door_;
  std::string lost_why_;  // why the channel ended the session
  HandleMap handles_;
  MappedMemory mapped_;
  DeviceOutput output_;
  std::mutex write_mu_;
  std::atomic<bool> failed_{false};
  uint64_t calls_ = 0;
  // Time in handlers (the driver, mostly), summed over workers, and the part of it in module loads.
  std::atomic<uint64_t> handler_us_{0};
  std::atomic<uint64_t> load_us_{0};
  // Cross-thread order (note_read, wait_turn, finished): one-way frames read and not yet run.
  std::mutex order_mu_;
  std::condition_variable order_cv_;
  uint64_t read_seq_ = 0;
  std::set<uint64_t> unfinished_one_way_;
  bool order_timeout_logged_ = false;
  // How long a call waits for earlier one-way calls of other threads (wait_turn): 10 s;
  // RGPU_ORDER_WAIT_MS shortens it (tests).
  const std::chrono::milliseconds order_wait_{env::get().order_wait_ms};
  std::unordered_map<uint32_t, std::unique_ptr<Worker>> workers_;
  // Host callbacks waiting for the client's answer: id -> answered.
  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  std::unordered_map<uint64_t, bool> cb_waiting_;
  std::atomic<int> cb_in_flight_{0};
  std::mutex wq_mu_;
  std::condition_variable wq_cv_;
  std::deque<AsyncReply> wq_;
  std::thread writer_;
  bool ended_ = false;
};

bool Worker::callbacks_in_flight() const { return session_->callbacks_in_flight(); }

void Worker::loop() {
  std::vector<uint8_t> body;
  Bytes bulk;  // reused: bulk replies (device-to-host data) are never zeroed or re-faulted
  const bool note_context = session_->runs_on_reader();
  for (;;) {
    // Spin a little before sleeping where it pays (common/spin_policy.h): the next call of an
    // active client thread usually arrives within microseconds, and on an idle many-core host
    // waking a sleeping thread costs more than the call itself; on a busy or small machine the
    // spin would take the core the client needs.
    if (queued_.load(std::memory_order_acquire) == 0) {
      if (auto spin = spin_.before_wait(); spin.count() > 0) {
        auto until = std::chrono::steady_clock::now() + spin;
        while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
        }
        spin_.after_spin(queued_.load(std::memory_order_acquire) != 0);
      }
    }
    // About to park: note this thread's current context, for a call the reader may run meanwhile
    // (claim). One cheap driver call per park, none while calls keep coming.
    CUcontext ctx = nullptr;
    const bool ctx_known = note_context && queued_.load(std::memory_order_acquire) == 0 &&
                           session_->driver().cuCtxGetCurrent(&ctx) == CUDA_SUCCESS;
    Frame f;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ctx_ = ctx;
      ctx_known_ = ctx_known;
      sleeping_ = true;
      cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !claimed_); });
      sleeping_ = false;
      ctx_known_ = false;
      if (stop_) return;
      f = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      queued_bytes_ -= f.payload.size();
    }
    space_cv_.notify_one();
    if (!run_call(f, body, bulk)) return;
  }
}

bool Worker::run_call(const Frame& f, std::vector<uint8_t>& body, Bytes& bulk) {
  session_->wait_turn(f);
  struct Finish {  // on every way out
    Session* s;
    const Frame& f;
    ~Finish() { s->finished(f); }
  } finish{session_, f};
  body.clear();
  bulk.clear();
  Writer out(&body);
  Reader in(f.payload.data(), f.payload.size());
  bool wants_reply = !(f.h.flags & proto::kNoReply);
  MappedMemory& mapped = session_->mapped();
  const uint64_t mapped_generation = mapped.generation();  // what a cuCtxSynchronize will have seen finish
  if (Handler h = find_handler(f.h.op)) {  // every op the server accepts (server/dispatch.cpp)
    Dispatch d{session_->driver(), session_->handles(), in, out, f.h.op, session_, &bulk, &mapped};
    d.one_way = !wants_reply;
    const auto start = std::chrono::steady_clock::now();
    h(d);
    session_->note_handler_time(f.h.op, std::chrono::steady_clock::now() - start);
    if (!in.ok() || body.size() < sizeof(int32_t)) {
      const char* name = op_name(f.h.op);
      session_->hostile(log::format("malformed arguments for %s (op %u, %u bytes)", name ? name : "?", f.h.op,
                                    f.h.length));
      return false;
    }
  } else {
    // Unknown op: answered (or, one-way, deferred) as NOT_SUPPORTED; the connection stays.
    const char* name = op_name(f.h.op);
    log::warn("%s (op %u) has no handler in this server; answering CUDA_ERROR_NOT_SUPPORTED",
              name ? name : "unknown op", f.h.op);
    out.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  }
  int32_t result;
  std::memcpy(&result, body.data(), sizeof result);
  // kOpMappedCopy marks what it writes itself.
  if (f.h.op != proto::kOpMappedCopy && !mapped.empty() && op_touches_memory(f.h.op))
    mapped.note_gpu_work(f.h.op, f.payload.data(), f.payload.size());
  if (wants_reply) {
    // What kernels wrote to mapped host memory, and what they printed, reaches the client
    // before this reply does. Only synchronizing calls compare mapped pages and read the
    // printf pipe themselves; other replies send what the pipe's thread has already collected.
    const bool sync = op_synchronizes(f.h.op);
    const bool all_finished = f.h.op == op::cuCtxSynchronize && result == CUDA_SUCCESS;
    if ((sync && !session_->send_mapped_updates(all_finished ? &mapped_generation : nullptr)) ||
        !session_->send_device_output(sync))
      return false;
    proto::ReplyPrefix prefix{deferred_result_, deferred_op_, 0};
    deferred_result_ = 0;
    deferred_op_ = 0;
    if (bulk.size() >= kAsyncReplyBytes) {
      {
        std::lock_guard<std::mutex> lock(bulk_mu_);
        ++bulk_in_flight_;
      }
      session_->reply_async(f.h, prefix, body, std::move(bulk), this);
      bulk = next_bulk();
    } else {
      session_->reply(f.h, prefix, body, bulk);
    }
  } else if (result != CUDA_SUCCESS && deferred_result_ == 0) {
    deferred_result_ = result;
    deferred_op_ = f.h.op;
    const char* name = op::name(f.h.op);
    log::debug("one-way %s failed with %d; reporting it with the next reply", name ? name : "?", result);
  }
  return true;
}

}  // namespace

namespace {
std::string g_sessions_dir;  // this session process's SessionOptions::sessions_dir
std::string g_tenant;        // and its SessionOptions::tenant

// An entry's fields: identity, peer, start, grace end, tenant (an entry from a release before
// tenants has four: the "" tenant's).
std::vector<std::string> entry_fields(const std::string& line) {
  std::vector<std::string> f;
  size_t at = 0;
  for (;;) {
    size_t tab = line.find('\t', at);
    f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
    if (tab == std::string::npos) break;
    at = tab + 1;
  }
  if (!f.empty() && !f.back().empty() && f.back().back() == '\n') f.back().pop_back();
  return f;
}

// The tenant of listed session pid, or false when its entry cannot be read.
bool entry_tenant(const std::string& dir, long pid, std::string* tenant) {
  std::FILE* f = std::fopen((dir + "/" + std::to_string(pid)).c_str(), "r");
  if (!f) return false;
  char line[1024] = {};
  bool got = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!got) return false;
  std::vector<std::string> fields = entry_fields(line);
  if (fields.size() < 4) return false;
  *tenant = fields.size() > 4 ? fields[4] : "";
  return true;
}
}  // namespace

bool same_tenant_session(const std::string& dir, int pid) {
  std::string tenant;
  return !dir.empty() && entry_tenant(dir, pid, &tenant) && tenant == g_tenant;
}

void write_session_entry(const std::string& dir, const std::string& identity, const std::string& peer,
                         long long start, long long grace_ends) {
  if (dir.empty()) return;
  // Written whole under another name and renamed: kOpSessions never reads half an entry.
  std::string path = dir + "/" + std::to_string(getpid());
  std::string tmp = dir + "/." + std::to_string(getpid());
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    // identity and peer hold no tabs or newlines (the handshake's identity is printable text), nor
    // does a tenant's name (protocol/accept_loop.h, parse_token_file).
    std::fprintf(f, "%s\t%s\t%lld\t%lld\t%s\n", identity.c_str(), peer.c_str(), start, grace_ends, g_tenant.c_str());
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

void register_session(const std::string& dir, const std::string& identity, const std::string& peer) {
  write_session_entry(dir, identity, peer, static_cast<long long>(time(nullptr)), 0);
}

void unregister_session(const std::string& dir, int pid) {
  if (dir.empty()) return;
  ::unlink((dir + "/" + std::to_string(pid)).c_str());
  ::unlink(session_gpu_file(dir, pid).c_str());
}

const std::string& listed_sessions_dir() { return g_sessions_dir; }

namespace handlers {
// kOpSessions (protocol/messages.h): the live sessions, from the sessions directory.
void sessions(Dispatch& d) {
  std::vector<proto::wire::SessionEntry> list;
  if (DIR* dir = g_sessions_dir.empty() ? nullptr : opendir(g_sessions_dir.c_str())) {
    while (dirent* e = readdir(dir)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (!*e->d_name || *end || pid <= 0 || list.size() >= proto::wire::kMaxSessions) continue;
      if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) continue;  // died unannounced
      std::FILE* f = std::fopen((g_sessions_dir + "/" + e->d_name).c_str(), "r");
      if (!f) continue;
      char line[1024] = {};
      bool got = std::fgets(line, sizeof line, f) != nullptr;
      std::fclose(f);
      if (!got) continue;
      std::vector<std::string> fields = entry_fields(line);
      if (fields.size() < 3) continue;
      // Another tenant's sessions are not shown: a client learns nothing of other tenants.
      if ((fields.size() > 4 ? fields[4] : "") != g_tenant) continue;
      std::string peer = fields[1];
      // A session whose connection broke: how long it waits for its client (protocol/channel.h).
      long long ends = fields.size() > 3 ? std::atoll(fields[3].c_str()) : 0;
      if (ends > 0)
        peer += log::format(" (disconnected; ends in %lld s unless its client comes back)",
                            std::max(0ll, ends - static_cast<long long>(time(nullptr))));
      if (static_cast<pid_t>(pid) != getpid()) peer += session_state_note(d.drv, g_sessions_dir, static_cast<int>(pid));
      proto::wire::SessionEntry entry{static_cast<uint32_t>(pid), fields[0], peer,
                                      std::strtoull(fields[2].c_str(), nullptr, 10), static_cast<pid_t>(pid) == getpid()};
      // The counts of a session of this listener (protocol/session_table.h); an earlier
      // listener's sessions are not in its table.
      proto::table::SessionInfo info;
      if (proto::table::session_info(static_cast<pid_t>(pid), &info)) {
        entry.counted = true;
        entry.gpu_bytes = info.gpu_bytes;
        entry.calls = info.counts.calls;
        entry.calls_per_s_milli = static_cast<uint64_t>(info.calls_per_s * 1000 + 0.5);
      }
      list.push_back(std::move(entry));
    }
    closedir(dir);
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_sessions(d.reply, list);
}
}  // namespace handlers

bool push_snapshot(proto::Transport& t, const DriverTable& driver) {
  HandleMap handles;
  std::vector<uint8_t> body;
  Writer out(&body);
  Reader in(nullptr, 0);
  Dispatch d{driver, handles, in, out, proto::kOpSnapshot};
  handlers::snapshot(d);
  proto::ReplyPrefix prefix{};
  proto::FrameHeader h = proto::make_header(proto::kOpSnapshot, proto::kReply, 0, 0, sizeof prefix + body.size());
  iovec iov[3] = {{&h, sizeof h}, {&prefix, sizeof prefix}, {body.data(), body.size()}};
  return t.write(iov, 3);
}

int run_session(int fd, const SessionOptions& options) {
  g_sessions_dir = options.sessions_dir;
  g_tenant = options.tenant;
  proto::table::set_identity(options.identity);
  register_session(options.sessions_dir, options.identity, options.peer);
  // Bulk frames (8 MiB copy chunks) come and go all session long: keep them on the heap, where
  // freed ones are reused, instead of fresh mmap()s that page-fault on every byte.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // Workers are left running at exit on purpose (see Session::run), so the session is leaked.
  handlers::peer_copy_setup(fd, options.transport ? options.tls : nullptr);
  auto* s = new Session(fd, options);
  if (!s->output().start()) log::warn("cannot capture device printf output (pipe: %s); it stays on this server's stdout", strerror(errno));
  return s->run();
}

}  // namespace rgpu::server
