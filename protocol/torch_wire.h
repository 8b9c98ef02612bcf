// The wire spec of the PyTorch device path (docs/design.md §5): what the rgpu PyTorch backend
// (python/rgpu/csrc) sends to rgpu-opserver, and what comes back. Torch-free on purpose: both
// ends include it, and the fuzz target decodes it.
//
// Transport, framing and authentication are the driver path's (protocol/messages.h,
// protocol/frame.h, protocol/handshake.h): 16-byte frame headers, the HMAC-SHA256 handshake,
// frames with kNoReply get no answer, every other request gets exactly one reply frame
// (kReply set, same op and request id). Ops are numbered from kFirstTorchOp so that a frame sent
// to the wrong server is refused as an unknown op, not misread.
//
// Connection life:
//   1. Handshake (protocol/handshake.h).
//   2. kTorchHello: the client's torch version; the server refuses (and closes) when major.minor
//      differ, naming both versions.
//   3. Calls. Storage ids are minted by the client (from kFirstStorageId up): allocating costs no
//      round trip. One-way calls (kNoReply) are queued and written in batches; their errors are
//      kept by the server (the first one since the last reply) and handed to the next reply as
//      its deferred error, naming the op that failed.
//   4. Storage allocations and frees do not travel as messages of their own: the client queues
//      them and sends them ahead of its next frame's payload, in that frame (kWithStorage), or,
//      when nothing else follows for a while, in a kTorchStorage frame. Ids are never reused, so
//      the server applies the allocations, then the frees, then the frame's op.
//
// kWithStorage (a frame flag of this path, clear of the protocol's FrameFlags): the payload
// starts with the storage changes queued since the client's previous frame, then the op's own
// payload follows as described below:
//   u32 nalloc, nalloc x (u64 storage id, u64 nbytes, u8 device); u32 nfree, nfree x u64 storage id
// An allocation or free fails (deferred, named "alloc") as kTorchAlloc would; the op still runs.
//
// Devices: the server presents device count devices (the hello says how many): the GPUs of its
// host on `--device cuda`, `--devices N` copies of the CPU on `--device cpu` (tests). A storage
// lives on the device its allocation names (u8 device, below the count); an op's fresh outputs
// live on the device the op ran on (its tensors', or the device it names). kDevice values of
// kind kDeviceRemote name a device by its index (never -1: the client resolves the current
// device). Tensors of one op on different devices are the client's to refuse, as torch does.
//
// Every reply payload starts with the deferred error, then this request's own status:
//   u8 has_deferred; [str op, str message, u8 ErrorKind]  u8 failed; [str message, u8 ErrorKind]
//   ...request's reply fields
// The ErrorKind is the class of the server's torch error (c10::NotImplementedError, ...), so that
// the client raises the Python type the same op raises on a local device (NotImplementedError,
// ValueError, IndexError, TypeError, torch.OutOfMemoryError, ...); unknown values read as kErrRuntime.
//
// Value encoding (ATen boxed arguments), one u8 Tag then:
//   kNone -; kBool u8; kInt i64; kDouble f64; kComplex f64 re, f64 im; kString str;
//   kDevice u8 DeviceKind, i8 index; kList u32 n, n values;
//   kRemoteTensor TensorDesc (a view of a storage the server holds);
//   kHostTensor i8 dtype, u8 flags (bit 0: a wrapped Python number, which type promotion
//     treats apart), u8 ndim, i64 sizes[ndim], bytes (contiguous data, by value);
// TensorDesc: u64 storage id, i8 dtype (c10::ScalarType), u8 ndim, i64 sizes[ndim],
//   i64 strides[ndim], i64 storage_offset (elements). The server checks that the view lies
//   inside the storage before it builds a tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"

namespace rgpu::torchwire {

inline constexpr uint16_t kFirstTorchOp = 12288;

enum Op : uint16_t {
  // Request: str client torch version ("2.11.0"). Reply: prefix, str server torch version,
  // str device ("cuda" or "cpu"), i32 device count. A major.minor mismatch fails the request with
  // a message naming both versions, then the server closes.
  kTorchHello = kFirstTorchOp,
  // One-way: u64 storage id, u64 nbytes, u8 device. The server allocates lazily (at first use),
  // so an op's output never costs a second allocation. Clients send allocations in kWithStorage.
  kTorchAlloc = kFirstTorchOp + 1,
  // One-way: u64 storage id. Clients send frees in kWithStorage.
  kTorchFree = kFirstTorchOp + 2,
  // One-way: u64 storage id, u64 nbytes; grows (never shrinks) the storage, keeping its bytes.
  kTorchResize = kFirstTorchOp + 3,
  // One-way: TensorDesc dst, u64 total, u64 at, bytes (dst's elements from byte `at` on, of
  // `total` in all, contiguous, dst's dtype): host to device, in chunks sent in order. The bytes
  // end the frame and begin within its first kWriteHeadBytes.
  kTorchWrite = kFirstTorchOp + 4,
  // Request: TensorDesc src. Reply: prefix, u64 total, then total bytes (src's elements,
  // contiguous) over one or more frames: the bytes that do not fit the first frame follow in
  // frames of their own (same op, request id, kReply), whose payloads are nothing but data. Servers
  // send the data in frames of their own only, so the client reads it in place: device to host.
  kTorchRead = kFirstTorchOp + 5,
  // An ATen op. str name ("aten::add"), str overload ("Tensor"), u32 nargs, nargs values, then
  // the outputs:
  //   one-way (kNoReply): u32 nret, per return u8 OutKind then
  //     kOutIgnore -; kOutTensor OutSpec; kOutTensorList u32 n, n OutSpec
  //     OutSpec: u64 storage id, u64 storage nbytes, i8 dtype, u8 ndim, i64 sizes, i64 strides,
  //     i64 offset: what the client computed on the meta device; the server binds the result
  //     to that id, copying it into that layout if the op produced another.
  //   with reply: u64 first id, u32 max ids: the server names fresh result storages
  //     first id, first id + 1, ... and replies prefix, u32 nret, nret results, where a result
  //     is a value as above except that tensors are kResultTensor.
  kTorchCall = kFirstTorchOp + 6,
  // One-way: u64 seed for the server's generator(s) (torch.manual_seed).
  kTorchSeed = kFirstTorchOp + 7,
  // Request: nothing. Reply: prefix, after every earlier call finished on the device.
  kTorchSync = kFirstTorchOp + 8,
  // One-way: nothing of its own; carries queued storage changes (kWithStorage) when no other
  // frame follows them soon.
  kTorchStorage = kFirstTorchOp + 9,
  // What torch.cuda's device queries answer, for torch.rgpu (python/rgpu/device.py). Requests
  // name the client's device index (i8, rgpu:N); an index the server does not have fails the
  // request.
  // Request: i8 device. Reply: prefix, str name, u64 total_memory, then kPropCount i32 (PropIndex
  // order), str uuid ("" for a cpu device). A cpu server describes its host: the CPU's model
  // name, its memory, its hardware threads as multiprocessors, compute capability 0.0. The
  // answers never change: clients ask once per device.
  kTorchDeviceProps = kFirstTorchOp + 11,
  // i8 device, u8 MemoryAction. As a request (kMemQuery): reply prefix, u64 free, u64 total (the
  // device's memory: cudaMemGetInfo; the host's MemAvailable and MemTotal on a cpu server), u8
  // cached, then when cached (the server has a caching allocator: cuda) its u64 reserved bytes
  // current, peak, u64 segments current, peak; without one, what it reserves is what the client
  // allocated. One-way: kMemEmptyCache (torch.cuda.empty_cache), kMemResetPeak (the peaks).
  kTorchMemory = kFirstTorchOp + 12,
  // The server's generator of a device: i8 device, u8 RngAction, then per action
  //   kRngGetState (request): reply prefix, bytes (the generator's state, as get_rng_state);
  //   kRngSetState (one-way): bytes (a state from kRngGetState);
  //   kRngSeed (request): seeds it from a random source; reply prefix, u64 the seed;
  //   kRngInitialSeed (request): reply prefix, u64 its seed;
  //   kRngManualSeed (one-way): u64 seed, for this device only (kTorchSeed seeds them all).
  kTorchRng = kFirstTorchOp + 13,
  // Timing events (torch.Event(enable_timing=True)), ids minted by the client like storages:
  // u8 EventAction, then kEventRecord (one-way): u64 id, i8 device: the server records the
  // event where it has run every call before it (on the device's current stream on cuda);
  // kEventElapsed (request): u64 id1, u64 id2: reply prefix, f64 milliseconds from id1 to id2,
  // after both completed; kEventDestroy (one-way): u64 id.
  kTorchEvent = kFirstTorchOp + 14,
  // One-way: a compiled graph (torch.compile(backend="rgpu"), python/rgpu/compile.py;
  // opserver/graph.h runs it). u64 graph id (minted by the client, never reused), u32 ninputs,
  // u32 nnodes, per node: str name ("aten::mm"), str overload, u32 nargs, nargs values (every
  // argument of the schema, defaults filled in by the client); then u32 nout, nout values (the
  // graph's results). Values are as above plus kGraphInput and kGraphNode (references), and
  // hold no tensors of their own (kRemoteTensor, kHostTensor are refused). A node may only
  // reference earlier nodes. Failures (an op this server does not run, a reused id) are deferred,
  // named "compiled graph <id>".
  kTorchGraph = kFirstTorchOp + 15,
  // One-way: runs a compiled graph. u64 graph id, u8 device (the client's index the graph runs
  // on), u32 nin, nin values (kRemoteTensor, kInt, kDouble, kBool: the graph's inputs), u32 nout,
  // per graph result u8 OutKind (kOutIgnore or kOutTensor OutSpec, as kTorchCall's one-way
  // outputs): the server binds each result to the storage id the client minted for it, in the
  // layout the client recorded (copied into it when the server made another). The server runs the
  // graph's ops one by one or code Inductor generated for it (opserver/inductor.h); the wire is
  // the same.
  kTorchGraphRun = kFirstTorchOp + 16,
  // Request: u32 n (at most kMaxReadMany), n TensorDesc. Reply: prefix, u64 total (the sum of
  // the views' element bytes), then each view's elements, contiguous, one after the other in
  // request order, possibly over several frames (as kTorchRead): many device-to-host copies for
  // one round trip (torch.save of a state_dict reads every storage; python/rgpu/__init__.py).
  kTorchReadMany = kFirstTorchOp + 17,
};

enum PropIndex : uint8_t {
  kPropMajor, kPropMinor, kPropMultiProcessors, kPropWarpSize, kPropMaxThreadsPerMultiProcessor,
  kPropL2CacheSize, kPropRegistersPerMultiProcessor, kPropIntegrated, kPropMultiGpuBoard, kPropCount
};
enum MemoryAction : uint8_t { kMemQuery = 0, kMemEmptyCache = 1, kMemResetPeak = 2 };
enum RngAction : uint8_t { kRngGetState = 0, kRngSetState = 1, kRngSeed = 2, kRngInitialSeed = 3, kRngManualSeed = 4 };
enum EventAction : uint8_t { kEventRecord = 0, kEventElapsed = 1, kEventDestroy = 2 };
inline constexpr size_t kMaxRngState = 1u << 20;

inline constexpr uint16_t kWithStorage = 1 << 8;

enum Tag : uint8_t {
  kNone = 0,
  kBool = 1,
  kInt = 2,
  kDouble = 3,
  kComplex = 4,
  kString = 5,
  kDevice = 6,
  kList = 7,
  kRemoteTensor = 8,
  kHostTensor = 9,
  // Results only: u64 storage id, u8 fresh (1: a new storage, u64 nbytes follows; 0: a view of
  // the existing storage id), then i8 dtype, u8 ndim, i64 sizes, i64 strides, i64 offset.
  kResultTensor = 10,
  // Compiled graphs only (kTorchGraph): u32 index of a graph input.
  kGraphInput = 11,
  // Compiled graphs only: u32 node, u32 return index, i32 element (-1: the whole return; else
  // the element of a returned list).
  kGraphNode = 12,
};

enum DeviceKind : uint8_t { kDeviceRemote = 0, kDeviceHost = 1, kDeviceMeta = 2 };
enum OutKind : uint8_t { kOutIgnore = 0, kOutTensor = 1, kOutTensorList = 2 };

// Bounds every decoder enforces.
inline constexpr uint32_t kMaxDims = 64;
inline constexpr uint32_t kMaxString = 4096;
inline constexpr uint32_t kMaxNameString = 256;
inline constexpr uint32_t kMaxListDepth = 4;
inline constexpr uint32_t kMaxSyncResults = 4096;
// Most storage changes (allocations and frees) a client puts in front of one frame (kWithStorage).
inline constexpr uint32_t kMaxStorageChanges = 4096;
// How much of a kTorchWrite frame rgpu-opserver reads before it knows where the bytes go: the
// rest goes from the socket straight into the tensor. Room for the most storage changes (two u32
// counts, 17 bytes an allocation, 8 a free), the widest TensorDesc and the three u64 in front of
// the bytes.
inline constexpr uint32_t kWriteHeadBytes = 128 << 10;
static_assert(8 + 17 * kMaxStorageChanges + (8 + 2 + 16 * kMaxDims + 8) + 3 * 8 <= kWriteHeadBytes);
inline constexpr uint64_t kFirstStorageId = 0x1000;
inline constexpr uint8_t kHostWrappedNumber = 1;
// Storage ids a call that waits reserves for its fresh results.
inline constexpr uint32_t kSyncResultIds = 64;
// Most devices a server presents (device indices are i8 in kDevice values).
inline constexpr int kMaxDevices = 64;
// Most nodes of one compiled graph, and most compiled graphs a session keeps.
inline constexpr uint32_t kMaxGraphNodes = 1u << 16;
inline constexpr uint32_t kMaxGraphs = 1u << 12;
// Most views of one kTorchReadMany.
inline constexpr uint32_t kMaxReadMany = 1u << 16;

struct TensorDesc {
  uint64_t storage = 0;
  int8_t dtype = 0;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

inline void put_shape(Writer& w, int8_t dtype, const int64_t* sizes, const int64_t* strides, size_t ndim,
                      int64_t offset) {
  w.put<int8_t>(dtype);
  w.put_u8(static_cast<uint8_t>(ndim));
  for (size_t i = 0; i < ndim; ++i) w.put<int64_t>(sizes[i]);
  for (size_t i = 0; i < ndim; ++i) w.put<int64_t>(strides[i]);
  w.put<int64_t>(offset);
}

inline void put_desc(Writer& w, const TensorDesc& d) {
  w.put_u64(d.storage);
  put_shape(w, d.dtype, d.sizes.data(), d.strides.data(), d.sizes.size(), d.offset);
}

// Reads dtype, ndim, sizes, strides, offset. False (and r !ok) on truncation or ndim > kMaxDims.
inline bool get_shape(Reader& r, TensorDesc* d) {
  d->dtype = r.get<int8_t>();
  uint32_t nd = r.u8();
  if (!r.ok() || nd > kMaxDims || nd * 16ull + 8 > r.left()) return r.fail();
  d->sizes.resize(nd);
  d->strides.resize(nd);
  for (auto& s : d->sizes) s = r.get<int64_t>();
  for (auto& s : d->strides) s = r.get<int64_t>();
  d->offset = r.get<int64_t>();
  return r.ok();
}

inline bool get_desc(Reader& r, TensorDesc* d) {
  d->storage = r.u64();
  return r.ok() && get_shape(r, d);
}

// The class of a failure (the reply prefix above): c10's error classes, which torch turns into
// these Python types.
enum ErrorKind : uint8_t {
  kErrRuntime = 0,         // c10::Error and anything else: RuntimeError
  kErrNotImplemented = 1,  // NotImplementedError
  kErrValue = 2,           // ValueError
  kErrIndex = 3,           // IndexError
  kErrType = 4,            // TypeError
  kErrOutOfMemory = 5,     // torch.OutOfMemoryError (a RuntimeError)
  kErrLinAlg = 6,          // torch.linalg.LinAlgError (a RuntimeError)
  kErrAccelerator = 7,     // torch.AcceleratorError (a RuntimeError): a CUDA error on the server
  kErrKindCount
};

// The reply prefix (see above).
struct ReplyStatus {
  bool has_deferred = false;
  std::string deferred_op, deferred_message;
  uint8_t deferred_kind = kErrRuntime;
  bool failed = false;
  std::string message;
  uint8_t kind = kErrRuntime;
};

inline void put_status(Writer& w, const ReplyStatus& s) {
  w.put_u8(s.has_deferred ? 1 : 0);
  if (s.has_deferred) {
    w.put_str(s.deferred_op);
    w.put_str(s.deferred_message);
    w.put_u8(s.deferred_kind);
  }
  w.put_u8(s.failed ? 1 : 0);
  if (s.failed) {
    w.put_str(s.message);
    w.put_u8(s.kind);
  }
}

inline bool get_status(Reader& r, ReplyStatus* s) {
  s->has_deferred = r.u8() != 0;
  if (s->has_deferred) {
    s->deferred_op = r.str(kMaxNameString);
    s->deferred_message = r.str(1 << 16);
    s->deferred_kind = r.u8();
    if (s->deferred_kind >= kErrKindCount) s->deferred_kind = kErrRuntime;
  }
  s->failed = r.u8() != 0;
  if (s->failed) {
    s->message = r.str(1 << 16);
    s->kind = r.u8();
    if (s->kind >= kErrKindCount) s->kind = kErrRuntime;
  }
  return r.ok();
}

}  // namespace rgpu::torchwire
