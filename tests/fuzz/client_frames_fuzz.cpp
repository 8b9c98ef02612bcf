// Fuzz target for what the CUDA shim reads from its server (client/connection.cpp read_one): a
// hostile or broken server's whole stream after the handshake, through the client's channel
// (protocol/channel.h) into the connection's frame routing: host-callback frames, async
// device-to-host data for a registered buffer, kernels' printf output, mapped-memory updates,
// notices, and the reply to the one call waiting, its head kept and its tail sunk into the
// caller's buffer when the call asks (bulk downloads). The reply is then read as the shim reads
// every reply (client/call.cpp Call::finish: ReplyPrefix, CUresult) and, being kOpSnapshot's, as
// the device snapshot (client/runtime.cpp fetch_snapshot).
//
// The first input byte: bit 0, the call sinks its reply past a 12-byte head into a 4 KiB buffer;
// bit 1, an async copy (delivery id 7, 256 bytes) is registered. The rest is the server's stream
// (channel headers and frames, its opening first), then the end of the stream
// (tests/fuzz/scripted_transport.h). Every run must end with the reply delivered within the
// buffers the call gave, or the connection broken, never a crash or a hang.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "client/connection.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "common/wire.h"
#include "protocol/channel.h"
#include "protocol/drain.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/snapshot.h"
#include "protocol/wire/control.h"
#include "protocol/wire/copy.h"
#include "protocol/wire/mapped.h"
#include "tests/fuzz/scripted_transport.h"

namespace {

using namespace rgpu;

constexpr uint64_t kDelivery = 7;
constexpr size_t kAsyncBytes = 256;
constexpr size_t kSinkPrefix = 12;  // as a download's: ReplyPrefix, CUresult, then the bytes
constexpr size_t kSinkBytes = 4096;

uint8_t g_async[kAsyncBytes];
bool g_async_wanted = false;

void* async_dest(uint64_t id, int32_t, size_t n) {
  return g_async_wanted && id == kDelivery && n <= kAsyncBytes ? g_async : nullptr;
}
void async_done(uint64_t id, int32_t) {
  if (id != kDelivery) std::abort();  // only the registered id may complete
}
// The shim's handler (client/mapped_memory.cpp apply_update) decodes with read_mapped_bytes and
// refuses an update outside its buffers; here there are none, so any update that decodes is one.
bool mapped_update(const client::Connection&, const uint8_t* payload, size_t n) {
  Reader in(payload, n);
  proto::wire::MappedBytes got;
  return proto::wire::read_mapped_bytes(in, &got);
}

proto::SessionId fixed_session() {
  proto::SessionId id;
  std::memset(id.data(), 7, id.size());
  return id;
}

const crypto::KeyPair& client_keys() {
  static const crypto::KeyPair keys = crypto::x25519_keypair();  // see channel_fuzz: once, not per input
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("RGPU_SPIN", "0", 1);  // as channel_fuzz: no /proc/stat read per input
  env::reload();
  log::set_level(log::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  proto::ChannelOptions o;
  o.heartbeat = std::chrono::milliseconds(5);
  o.silent_heartbeats = 2;
  o.resume_window = std::chrono::milliseconds(1);
  o.replay_max_bytes = 1 << 20;
  o.max_payload = 64 << 10;  // no input holds a longer frame (channel_fuzz says why)
  o.peer = "fuzz server";
  auto ch = std::make_unique<proto::Channel>(proto::Side::kClient, fixed_session(), "", o, client_keys());
  ch->start(std::make_unique<fuzz::ScriptedTransport>(data, size));
  std::unique_ptr<client::Connection> conn = client::Connection::over(std::move(ch), "fuzz server");
  conn->set_mapped_update_handler(mapped_update);
  g_async_wanted = mode & 2;
  conn->set_async_data_handlers(async_dest, async_done);

  static uint8_t sink[kSinkBytes];
  client::ReplySlot slot;
  if (mode & 1) {
    slot.sink = sink;
    slot.sink_prefix = kSinkPrefix;
    slot.sink_cap = sizeof sink;
  }
  const bool ok = conn->call(proto::kOpSnapshot, 1, nullptr, 0, nullptr, 0, &slot);
  if (!ok) {
    if (!conn->broken()) std::abort();  // a failed call leaves the connection marked broken
    return 0;
  }
  if (!slot.done || slot.sink_got > slot.sink_cap || (!(mode & 1) && slot.sink_got)) std::abort();
  if ((mode & 1) && slot.sink_got && slot.payload.size() != kSinkPrefix) std::abort();
  // As Call::finish and fetch_snapshot read it.
  Reader r(slot.payload.data(), slot.payload.size());
  r.get<proto::ReplyPrefix>();
  const int32_t rc = r.get<int32_t>();
  if (!r.ok() || rc != 0) return 0;
  proto::Snapshot s;
  if (proto::decode_snapshot(r, &s) &&
      (s.devices.size() > proto::kMaxSnapshotDevices || s.errors.size() > proto::kMaxSnapshotErrors))
    std::abort();
  return 0;
}

// Seeds: the server's opening, then frames of each kind the connection routes, then the reply.
void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  using namespace rgpu::proto;
  std::vector<uint8_t> stream;
  uint64_t seq = 0;
  auto add = [&](bool numbered, uint16_t op, uint16_t flags, uint32_t request, const std::vector<uint8_t>& p) {
    ChannelHeader chh{numbered ? ++seq : 0, 1};
    FrameHeader fh = make_header(op, flags, request, 0, p.size());
    const auto* a = reinterpret_cast<const uint8_t*>(&chh);
    const auto* b = reinterpret_cast<const uint8_t*>(&fh);
    stream.insert(stream.end(), a, a + sizeof chh);
    stream.insert(stream.end(), b, b + sizeof fh);
    stream.insert(stream.end(), p.begin(), p.end());
  };
  auto emit = [&](uint8_t mode) {
    std::vector<uint8_t> s{mode};
    s.insert(s.end(), stream.begin(), stream.end());
    out->push_back(std::move(s));
  };
  Writer open;
  encode(ChannelOpen{kChannelVersion, crypto::x25519_keypair().public_key, 600}, &open);
  add(false, kOpChannelOpen, 0, 0, open.buf());
  // The reply: ReplyPrefix, CUDA_SUCCESS, a snapshot of one device.
  Snapshot snap;
  snap.driver_version = 13000;
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.pci_bus_id = "0000:01:00.0";
  d.attrs.push_back({0, 1});
  snap.devices.push_back(d);
  Writer reply;
  reply.put(ReplyPrefix{});
  reply.put_i32(0);
  encode_snapshot(snap, reply);
  const std::vector<uint8_t> opening = stream;
  add(true, kOpSnapshot, kReply, 1, reply.buf());
  emit(0);
  emit(1);
  // Each unasked frame before the reply.
  stream = opening;
  seq = 0;
  uint8_t cb[wire::kCallbackFrame] = {};
  add(true, kOpCallback, 0, 0, std::vector<uint8_t>(cb, cb + sizeof cb));
  uint8_t head[wire::kAsyncDataHead];
  wire::put_async_data_head(head, kDelivery, 0);
  std::vector<uint8_t> async(head, head + sizeof head);
  async.resize(async.size() + 64, 0x5a);
  add(true, kOpAsyncData, 0, 0, async);
  const char text[] = "printf from a kernel\n";
  add(true, kOpDeviceOutput, 0, 0, std::vector<uint8_t>(text, text + sizeof text - 1));
  uint8_t mh[wire::kMappedBytesHead];
  wire::put_mapped_bytes_head(mh, 0x5a0000400000ull, 0);
  std::vector<uint8_t> mapped(mh, mh + sizeof mh);
  mapped.resize(mapped.size() + 16, 1);
  add(true, kOpMappedUpdate, 0, 0, mapped);
  Writer notice;
  encode(Notice{kNoticeDraining, 60, "rgpu-server at 127.0.0.1:9713 is shutting down; 60 s to finish"}, &notice);
  add(true, kOpNotice, 0, 0, notice.buf());
  add(false, kOpHeartbeat, 0, 0, {});
  add(true, kOpSnapshot, kReply, 1, reply.buf());
  emit(2);
  emit(3);
}
