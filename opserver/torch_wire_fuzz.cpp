// Fuzz target for rgpu-opserver's decoder (opserver/session.h, spec in protocol/torch_wire.h): the
// input is a series of frames a client might send after the handshake, each as
//   u16 op (added to kFirstTorchOp when below 64), u8 flags (bit 0: one-way, bit 1: the payload
//   starts with storage changes, kWithStorage; bit 2: the end of the payload is left on a socket,
//   as serve leaves a large write's bytes, and bits 3-5 say how much of it is handed over in
//   eighths), u16 length, bytes
// fed to one Session on the cpu, after a valid torch hello. A frame split so must have all of its
// socket part read or skipped by handle() unless the connection closes. Every frame must either run, fail
// with an error for the client, or close the connection with a reason: never crash, hang or
// read outside what it was given. Storages are capped at 16 MiB and views at 1M elements, so
// inputs cannot exhaust memory or time.
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/wire.h"
#include "protocol/torch_wire.h"
#include "opserver/session.h"
#include "protocol/messages.h"

using namespace rgpu::torchwire;

namespace {

// fuzz_flags as in the file comment (true: one-way).
void record(std::vector<uint8_t>* out, uint16_t op, uint8_t fuzz_flags, const rgpu::Writer& w) {
  rgpu::Writer r;
  r.put_u16(static_cast<uint16_t>(op - kFirstTorchOp));
  r.put_u8(fuzz_flags);
  r.put_u16(static_cast<uint16_t>(const_cast<rgpu::Writer&>(w).size()));
  r.append(const_cast<rgpu::Writer&>(w).buf().data(), const_cast<rgpu::Writer&>(w).size());
  out->insert(out->end(), r.buf().begin(), r.buf().end());
}

void put_desc_1d(rgpu::Writer& w, uint64_t id, int64_t n) {
  TensorDesc d;
  d.storage = id;
  d.dtype = 6;  // float
  d.sizes = {n};
  d.strides = {1};
  put_desc(w, d);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rgpu::opserver::SessionOptions opt;
  opt.max_storage_bytes = 16u << 20;
  opt.max_view_elements = 1u << 20;
  opt.device_count = 2;  // device indices are checked against the count
  rgpu::opserver::Session s(opt);
  std::vector<rgpu::Bytes> replies;
  std::string why;
  rgpu::Writer hello;
  hello.put_str(rgpu::opserver::torch_version());
  if (!s.handle(kTorchHello, 0, hello.buf().data(), hello.size(), &replies, &why)) std::abort();
  // The socket a split frame's tail waits on (flags bit 2), as in serve.
  static int sock[2] = {-1, -1};
  if (sock[0] < 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sock) != 0) std::abort();
  int stale = 0;
  if (ioctl(sock[1], FIONREAD, &stale) == 0 && stale > 0) {  // left by a closed "connection" before
    std::vector<uint8_t> drop(static_cast<size_t>(stale));
    if (read(sock[1], drop.data(), drop.size()) != stale) std::abort();
  }
  rgpu::proto::FrameReader tail_reader(sock[1], rgpu::proto::kMaxPayload, 4096);
  rgpu::Reader r(data, size);
  while (r.left() >= 5) {
    uint16_t op = r.u16();
    uint8_t flags = r.u8();
    uint16_t len = r.u16();
    const size_t n = std::min<size_t>(len, r.left());
    const uint8_t* p = r.view(n);
    if (!p) break;
    if (op < 64) op = static_cast<uint16_t>(op + kFirstTorchOp);
    replies.clear();
    why.clear();
    uint16_t frame_flags = static_cast<uint16_t>(((flags & 1) ? rgpu::proto::kNoReply : 0) | ((flags & 2) ? kWithStorage : 0));
    size_t head = n;
    if (flags & 4) {
      head = n * ((flags >> 3) & 7) / 8;
      if (rgpu::net::write_full(sock[0], p + head, n - head) != true) std::abort();
    }
    rgpu::opserver::PayloadTail tail;
    tail.read = [&tail_reader](void* dst, size_t k, std::string* w) { return tail_reader.read_rest(dst, k, w); };
    tail.missing = n - head;
    bool keep = s.handle(op, frame_flags, p, head, &replies, &why, tail);
    int unread = 0;
    if (keep && ioctl(sock[1], FIONREAD, &unread) == 0 && unread != 0) std::abort();  // the tail was not all taken
    if (!keep) {
      if (why.empty()) std::abort();  // every closed connection says why
      break;
    }
    if (!(flags & 1) && replies.empty()) std::abort();  // every request is answered
  }
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  std::vector<uint8_t> seed;
  rgpu::Writer alloc;
  alloc.put_u64(0x1000);
  alloc.put_u64(16);
  alloc.put_u8(0);  // device
  record(&seed, kTorchAlloc, true, alloc);
  rgpu::Writer write;
  put_desc_1d(write, 0x1000, 4);
  write.put_u64(16);
  write.put_u64(0);
  float vals[4] = {1, 2, 3, 4};
  write.put_bytes(vals, sizeof vals);
  record(&seed, kTorchWrite, true, write);
  // The same write again with its last half on the socket (bits 2-5: split, 4/8 handed over).
  record(&seed, kTorchWrite, 1 | 4 | (4 << 3), write);
  // aten::add.Tensor(storage 0x1000, storage 0x1000, alpha=1) into a fresh 0x1001.
  rgpu::Writer call;
  call.put_str("aten::add");
  call.put_str("Tensor");
  call.put_u32(3);
  call.put_u8(kRemoteTensor);
  put_desc_1d(call, 0x1000, 4);
  call.put_u8(kRemoteTensor);
  put_desc_1d(call, 0x1000, 4);
  call.put_u8(kInt);
  call.put<int64_t>(1);
  call.put_u32(1);
  call.put_u8(kOutTensor);
  call.put_u64(0x1001);
  call.put_u64(16);
  put_shape(call, 6, std::vector<int64_t>{4}.data(), std::vector<int64_t>{1}.data(), 1, 0);
  record(&seed, kTorchCall, true, call);
  // aten::sum.default(0x1001, dtype=None) with a reply.
  rgpu::Writer sum;
  sum.put_str("aten::sum");
  sum.put_str("");
  sum.put_u32(2);
  sum.put_u8(kRemoteTensor);
  put_desc_1d(sum, 0x1001, 4);
  sum.put_u8(kNone);
  sum.put_u64(0x2000);
  sum.put_u32(kSyncResultIds);
  record(&seed, kTorchCall, false, sum);
  rgpu::Writer cat;  // aten::cat with a list and a host tensor
  cat.put_str("aten::cat");
  cat.put_str("");
  cat.put_u32(2);
  cat.put_u8(kList);
  cat.put_u32(2);
  cat.put_u8(kRemoteTensor);
  put_desc_1d(cat, 0x1001, 4);
  cat.put_u8(kHostTensor);
  cat.put<int8_t>(6);
  cat.put_u8(0);
  cat.put_u8(1);
  cat.put<int64_t>(4);
  cat.put_bytes(vals, sizeof vals);
  cat.put_u8(kInt);
  cat.put<int64_t>(0);
  cat.put_u64(0x3000);
  cat.put_u32(kSyncResultIds);
  record(&seed, kTorchCall, false, cat);
  rgpu::Writer read;
  put_desc_1d(read, 0x1001, 4);
  record(&seed, kTorchRead, false, read);
  rgpu::Writer many;  // kTorchReadMany of two views: all of 0x1001, then 0x1000's first two floats
  many.put_u32(2);
  put_desc_1d(many, 0x1001, 4);
  put_desc_1d(many, 0x1000, 2);
  record(&seed, kTorchReadMany, false, many);
  rgpu::Writer resize;
  resize.put_u64(0x1000);
  resize.put_u64(64);
  record(&seed, kTorchResize, true, resize);
  rgpu::Writer seedmsg;
  seedmsg.put_u64(7);
  record(&seed, kTorchSeed, true, seedmsg);
  record(&seed, kTorchSync, false, rgpu::Writer());
  rgpu::Writer fr;
  fr.put_u64(0x1001);
  record(&seed, kTorchFree, true, fr);
  // A storage frame allocating 0x4000 on device 1 and freeing 0x1000 (bit 1 of the fuzz flags:
  // kWithStorage).
  rgpu::Writer changes;
  changes.put_u32(1);
  changes.put_u64(0x4000);
  changes.put_u64(16);
  changes.put_u8(1);
  changes.put_u32(1);
  changes.put_u64(0x1000);
  record(&seed, kTorchStorage, 3, changes);
  // The device queries (opserver/device_api.cpp): properties, memory, the generator, events.
  rgpu::Writer props;
  props.put<int8_t>(0);
  record(&seed, kTorchDeviceProps, false, props);
  for (uint8_t action : {kMemQuery, kMemEmptyCache, kMemResetPeak}) {
    rgpu::Writer mem;
    mem.put<int8_t>(0);
    mem.put_u8(action);
    record(&seed, kTorchMemory, action != kMemQuery, mem);
  }
  rgpu::Writer get_state;
  get_state.put<int8_t>(0);
  get_state.put_u8(kRngGetState);
  record(&seed, kTorchRng, false, get_state);
  rgpu::Writer set_state;
  set_state.put<int8_t>(0);
  set_state.put_u8(kRngSetState);
  uint8_t state[16] = {1, 2, 3};
  set_state.put_bytes(state, sizeof state);
  record(&seed, kTorchRng, true, set_state);
  for (uint64_t id : {0x9000, 0x9001}) {
    rgpu::Writer ev;
    ev.put_u8(kEventRecord);
    ev.put_u64(id);
    ev.put<int8_t>(0);
    record(&seed, kTorchEvent, true, ev);
  }
  rgpu::Writer elapsed;
  elapsed.put_u8(kEventElapsed);
  elapsed.put_u64(0x9000);
  elapsed.put_u64(0x9001);
  record(&seed, kTorchEvent, false, elapsed);
  // A compiled graph (kTorchGraph): one input, aten::mul.Tensor(input 0, input 0), result node 0;
  // then one run of it on storage 0x1000 into a fresh 0x1010.
  rgpu::Writer graph;
  graph.put_u64(1);
  graph.put_u32(1);
  graph.put_u32(1);
  graph.put_str("aten::mul");
  graph.put_str("Tensor");
  graph.put_u32(2);
  for (int k = 0; k < 2; ++k) {
    graph.put_u8(kGraphInput);
    graph.put_u32(0);
  }
  graph.put_u32(1);
  graph.put_u8(kGraphNode);
  graph.put_u32(0);
  graph.put_u32(0);
  graph.put<int32_t>(-1);
  record(&seed, kTorchGraph, true, graph);
  rgpu::Writer run;
  run.put_u64(1);
  run.put_u8(0);
  run.put_u32(1);
  run.put_u8(kRemoteTensor);
  put_desc_1d(run, 0x1000, 4);
  run.put_u32(1);
  run.put_u8(kOutTensor);
  run.put_u64(0x1010);
  run.put_u64(16);
  put_shape(run, 6, std::vector<int64_t>{4}.data(), std::vector<int64_t>{1}.data(), 1, 0);
  record(&seed, kTorchGraphRun, true, run);
  out->push_back(seed);
}
