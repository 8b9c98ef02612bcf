// One client's session in rgpu-opserver: the storages it holds by id and the ATen ops it runs on
// them (protocol/torch_wire.h is the spec). Transport-free: handle() takes one frame's payload and
// produces the reply payload, so the socket loop (serve) and the fuzz target drive the same code.
//
// Two kinds of failure, kept apart on purpose:
// - the bytes do not decode (truncated, a length past the end, an unknown tag or op): the peer is
//   broken or hostile, handle() returns false and the connection is closed;
// - the bytes decode but the op fails (a shape error, an unknown storage id, an operator this
//   server does not run): the error goes back to the client, deferred for one-way calls.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "opserver/graph.h"
#include "opserver/inductor.h"
#include "protocol/frame.h"
#include "protocol/session_dir.h"
#include "protocol/torch_wire.h"

namespace rgpu::opserver {

// The bytes do not decode: the connection closes.
struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The call decodes but cannot run: reported to the client (deferred for one-way calls).
struct CallError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A failure that keeps the class of torch's error it came from (torchwire::ErrorKind), for the
// places that add words to a c10::Error's message before it goes back.
struct KindError : std::runtime_error {
  KindError(uint8_t kind, const std::string& message) : std::runtime_error(message), kind(kind) {}
  uint8_t kind;
};
// The wire class of a c10 error (NotImplementedError, ValueError, ...; kErrRuntime for the rest).
uint8_t error_kind(const c10::Error& e);
// The message of a result the wire cannot describe: a sparse (or other non-strided) tensor.
// Raised as NotImplementedError on the client.
std::string sparse_refusal(const std::string& what);

// Bulk replies (kTorchRead) travel in frames of this many bytes, each written as it is made
// (serve.cpp): the copy into the channel's replay buffer is still in cache when the socket takes
// it, and the client receives the first MiB while the server copies the next. With 8 MiB frames
// written only at the end of the reply (or when the replay buffer filled) a 1 GiB `.cpu()` moved
// 1.9 to 2.1 GiB/s on the 2-core CPU machine; like this 2.4 to 3.0 (bench/torch_bench.py).
inline constexpr size_t kReadChunk = 1u << 20;

struct SessionOptions {
  // The device type ops run on (kCPU or kCUDA), and how many devices clients see: cuda:0 ..
  // cuda:N-1, or N names for the one CPU (`--devices N`, tests of several devices).
  c10::Device device{c10::kCPU};
  int device_count = 1;
  // Reported as this server's torch version in the hello (tests of the version check).
  std::string torch_version;
  // Largest single storage a client may allocate.
  uint64_t max_storage_bytes = 1ull << 40;
  // Most elements a tensor view may have (views with zero strides can name far more elements
  // than their storage holds); the fuzz target lowers it so that no input is merely slow.
  uint64_t max_view_elements = 1ull << 62;
  // Compiled graphs run Inductor's code (opserver/inductor.h), generated in the Python of this
  // python's environment, instead of their ops one by one (`--compile inductor`). Off here, so the
  // fuzz target never starts Python.
  bool inductor = false;
  std::string python;
};

// The end of a frame's payload that is still on the connection when Session::handle() is called:
// serve reads only the head of a large kTorchWrite, so that its bytes go from the connection
// straight into the tensor instead of through a buffer (that copy took as long as the receive
// itself, bench/torch_bench.py). Empty for other frames, and in the fuzz target, which hands over
// whole frames.
struct PayloadTail {
  // Reads the next n bytes of the payload into dst; false with *why when the session is lost.
  std::function<bool(void* dst, size_t n, std::string* why)> read;
  size_t missing = 0;
};

class Session {
 public:
  explicit Session(SessionOptions opt);
  ~Session();  // destroys the timing events it holds (opserver/device_api.cpp)

  // Handles one frame. Returns false when the connection must close, with *why for the log
  // (the reply, if any, is still to be sent: a refused hello explains itself). *reply_frames gets
  // the reply payloads to send, in order (empty for a one-way call; one frame for most replies,
  // several for a large read).
  // `tail` is the end of the payload still on the socket (PayloadTail); handle() reads or skips
  // all of it.
  bool handle(uint16_t op, uint16_t flags, const uint8_t* data, size_t len, std::vector<Bytes>* reply_frames,
              std::string* why, PayloadTail tail = {});

  size_t storage_count() const { return storages_.size(); }

  // After handle(): the data of a bulk reply (kTorchRead, kTorchReadMany), to send after
  // reply_frames in frames of its own, straight from host memory the session keeps until the
  // next handle(). Empty for other replies.
  struct BulkPiece {
    const uint8_t* p;
    size_t n;
  };
  const std::vector<BulkPiece>& bulk_reply() const { return bulk_; }

 private:
  struct Slot {
    c10::Storage storage;  // undefined until first use (allocation is lazy)
    uint64_t nbytes = 0;
    int device = 0;        // the client's device index
  };

  bool hello(Reader& r, torchwire::ReplyStatus* st, Writer* w, std::string* why);
  void alloc(uint64_t id, uint64_t nbytes, int device);
  // Where the client's device index runs ops (throws CallError past the count).
  c10::Device device(int index) const;
  void free_storage(uint64_t id);
  // The kWithStorage prefix (protocol/torch_wire.h): decodes it (Malformed when truncated), then allocates
  // and frees; allocation failures are deferred.
  void apply_storage_changes(Reader& r);
  void resize(uint64_t id, uint64_t nbytes);
  c10::Storage& storage(uint64_t id);
  at::Tensor tensor(const torchwire::TensorDesc& d);
  void call(Reader& r, bool want_reply, Writer* w);
  // kTorchGraph and kTorchGraphRun (opserver/graph.cpp).
  void graph_define(Reader& r);
  void graph_run(Reader& r);
  // At a graph's first run: Inductor's code for it (compiled now, with these inputs as example
  // inputs), or op by op for good, said once in the log.
  void decide_mode(uint64_t id, Graph& g, const std::vector<c10::IValue>& inputs);
  // A run's results (one per graph output) from Inductor's code: false when this run goes op by
  // op (graph_run_ops, which computes only the results in `wanted`) instead.
  bool graph_run_inductor(uint64_t id, Graph& g, const std::vector<c10::IValue>& inputs, std::vector<c10::IValue>* out);
  std::vector<c10::IValue> graph_run_ops(const Graph& g, const std::vector<c10::IValue>& inputs,
                                         const std::vector<bool>& wanted);
  c10::IValue graph_arg(const GraphValue& v, const c10::TypePtr& type, const std::vector<c10::IValue>& inputs,
                        const std::vector<torch::jit::Stack>& results, const std::string& where);
  // Binds an op's fresh output to the storage id the client minted for it; op_device is the
  // client's index of the device the op ran on (what a CPU server records for it). False when
  // the result was not adopted as it is (copied into the promised layout, or an empty scratch).
  bool bind(const torchwire::TensorDesc& spec, uint64_t nbytes, const at::Tensor& result, int op_device);
  // The client's index for a tensor on d produced by an op on op_device.
  int index_of(c10::Device d, int op_device) const;

  // The device queries (opserver/device_api.cpp): kTorchDeviceProps, kTorchMemory, kTorchRng,
  // kTorchEvent. Replies go to *w after the prefix.
  void device_props(Reader& r, Writer* w);
  void memory(Reader& r, bool want_reply, Writer* w);
  void rng(Reader& r, bool want_reply, Writer* w);
  void event(Reader& r, bool want_reply, Writer* w);
  void drop_event(uint64_t id);

  // Remembers the first failure of a one-way call until the next reply.
  void defer(const std::string& op, const std::string& message, uint8_t kind = torchwire::kErrRuntime);
  torchwire::ReplyStatus take_status();

  SessionOptions opt_;
  std::unordered_map<uint64_t, Slot> storages_;
  std::unordered_map<const c10::StorageImpl*, uint64_t> ids_by_impl_;
  // An operator clients called, looked up once: kTorchCall names it by name and overload on
  // every call, and the lookup, the full name and the arguments' names for errors would
  // otherwise be worked out per call.
  struct OpEntry {
    c10::OperatorHandle op;
    std::string full;                 // "aten::add.Tensor"
    std::vector<std::string> where;   // per argument: "aten::add.Tensor argument 'self'"
    bool index_put_impl = false;      // aten::_index_put_impl_ (its unsafe flag is cleared)
  };
  // By name, '.', overload (what op_key_ holds during a lookup: no allocation per call).
  std::unordered_map<std::string, OpEntry> ops_;
  std::string op_key_;
  std::unordered_map<uint64_t, Graph> graphs_;
  Inductor inductor_;
  bool told_no_python_ = false;  // logged that Python did not start (once a session)
  // At the session's end (~Session): per graph, how its runs went (graph.cpp).
  void log_graph_summary() const;
  bool hello_done_ = false;
  uint8_t deferred_kind_ = torchwire::kErrRuntime;
  bool has_deferred_ = false;
  std::string deferred_op_, deferred_message_;
  // Timing events by the client's id (kTorchEvent): a device event on cuda, a time on cpu.
  struct EventSlot {
    c10::Device device{c10::kCPU};
    void* native = nullptr;
    std::chrono::steady_clock::time_point at;
  };
  static constexpr size_t kMaxEvents = 1u << 16;
  std::unordered_map<uint64_t, EventSlot> events_;
  // kTorchWrite's chunks, and kTorchRead(Many)'s replies (reply_frames gets the prefix, bulk_ the data).
  // p holds the chunk's first n - tail_.missing bytes; the rest come from tail_.
  void write_chunk(const torchwire::TensorDesc& d, uint64_t total, uint64_t at, const uint8_t* p, size_t n);
  // The tail's next n bytes into dst (nullptr: thrown away); throws TailBroken if the
  // connection broke.
  void take_tail(void* dst, size_t n);
  // The whole chunk in one place: p itself when nothing is on the socket, else gathered in scratch_.
  const uint8_t* whole_chunk(const uint8_t* p, size_t n);
  PayloadTail tail_;
  std::string tail_why_;
  Bytes scratch_;
  void read_many(const std::vector<torchwire::TensorDesc>& descs, std::vector<Bytes>* reply_frames);
  // A host-to-device write arriving in several frames: written into the tensor as it comes, or
  // gathered in staging_ when the tensor does not take the bytes in order.
  Bytes staging_;
  uint64_t staging_total_ = 0, staging_at_ = 0;
  bool write_in_place_ = false;
  std::vector<BulkPiece> bulk_;
  std::vector<at::Tensor> bulk_hold_;
};

// Serves one client's session (after the handshake, on the reliable channel started on fd:
// protocol/session_dir.h start_server_channel, which resumes it across broken connections) until
// the client leaves, misbehaves, or stays away past the grace. Returns the process exit status.
int serve(int fd, const SessionOptions& opt, const proto::ServerChannelSetup& channel);

// The torch version this server was built against, "major.minor.patch".
std::string torch_version();

}  // namespace rgpu::opserver
