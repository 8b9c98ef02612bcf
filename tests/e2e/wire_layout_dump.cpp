// Prints what tests/e2e/rgpu_wire.py (the Python client side the hostile and wire tests speak
// through) must agree with, as the C++ compiler and protocol/wire/ see it: every constant of
// protocol/messages.h by name ("const NAME VALUE"), the frame and reply-prefix layouts, and the
// bytes the codecs write for the payloads rgpu_wire.py builds ("bytes NAME HEX").
// tests/e2e/check_rgpu_wire.py compares; the ctest rgpu_wire_layout fails on any difference, or
// on a constant of messages.h missing here.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "common/wire.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"
#include "protocol/wire/launch.h"
#include "protocol/wire/module.h"

namespace {

using namespace rgpu::proto;

void constant(const char* name, unsigned long long v) { std::printf("const %s %llu\n", name, v); }

void bytes(const char* name, const rgpu::Writer& w) {
  std::printf("bytes %s ", name);
  for (uint8_t b : const_cast<rgpu::Writer&>(w).buf()) std::printf("%02x", b);
  std::printf("\n");
}

}  // namespace

int main() {
#define C(x) constant(#x, static_cast<unsigned long long>(x))
  C(kMagic), C(kProtocolVersion), C(kHeaderSize), C(kMaxPayload), C(kMaxHandshakePayload);
  C(kTlsPreambleMagic), C(kTlsPreambleSize), C(kTlsNew), C(kTlsResume);
  C(kReply), C(kNoReply);
  C(kCapDeferredErrors), C(kCapClientHandles), C(kCapBulkSink), C(kCapPushedSnapshot), C(kCapChannel), C(kOurCapabilities);
  C(kOpInvalid), C(kOpHello), C(kOpChallenge), C(kOpAuth), C(kOpWelcome), C(kOpRefused), C(kOpSnapshot);
  C(kOpGoodbye), C(kOpCallback), C(kOpCallbackDone), C(kOpModuleByHash), C(kOpToolsContextObject);
  C(kOpModuleFunctions), C(kOpMappedAlloc), C(kOpMappedFree), C(kOpMappedWrite), C(kOpMappedUpdate);
  C(kOpDeviceOutput), C(kOpAsyncData), C(kOpExportTableInfo), C(kOpSessions), C(kOpMappedCopy);
  C(kOpChannelOpen), C(kOpHeartbeat), C(kOpResume), C(kOpResumeChallenge), C(kOpResumeProof), C(kOpResumed),
      C(kChannelVersion);
  C(kOpNotice), C(kNoticeDraining), C(kNoticeEnded), C(kMaxNoticeText);
  C(kOpManagedAlloc), C(kOpParamLayout), C(kOpFuncAttributes), C(kOpClusterOccupancyTable), C(kOpAllocAhead);
  C(kOpAllocMany), C(kOpClusterTopology), C(kOpHandleSpace), C(kFirstCudaOp), C(kFirstNvmlOp), C(kFirstNcclOp);
  C(kOpPeerTicket), C(kOpPeerSend), C(kOpPeerReceive), C(kPeerLinkMagic), C(kPeerTicketBytes), C(kPeerChunk);
  C(kPeerChunkFailed), C(kMaxPeerSendError), C(kOpPeerCancel), C(kPeerChunkPending);
  C(kNvmlMaxArray), C(kMaxParamLayout), C(kMaxFuncAttributes), C(kMaxClusterTable), C(kMaxClusterTopology);
  C(kMaxAllocAhead), C(kMaxAllocAheadBytes), C(kMaxAllocMany), C(kMaxAllocManyCount), C(kMaxAllocManyBytes);
  C(kNvmlMaxString), C(kFirstClientHandle), C(kServerMintedBit), C(kHandleServerShift), C(kMaxServers),
      C(kHandleServerMask);
  C(kOpSessionControl), C(kSessionSuspend), C(kSessionResume), C(kSessionMigrate), C(kMaxSessionControlMessage);
  C(kSessionStateUnknown);
  // What rgpu_wire.py names from cuda.h.
  C(CUDA_SUCCESS), C(CUDA_ERROR_INVALID_VALUE), C(CUDA_ERROR_NOT_INITIALIZED), C(CUDA_ERROR_INVALID_CONTEXT);
  C(CUDA_ERROR_INVALID_HANDLE), C(CUDA_ERROR_NOT_SUPPORTED);
#undef C
  // Layouts (offsets and sizes) that rgpu_wire.py packs by struct format.
  std::printf("layout FrameHeader %zu %zu %zu %zu %zu %zu\n", sizeof(FrameHeader), offsetof(FrameHeader, length),
              offsetof(FrameHeader, op), offsetof(FrameHeader, flags), offsetof(FrameHeader, request_id),
              offsetof(FrameHeader, thread_id));
  std::printf("layout ReplyPrefix %zu %zu %zu\n", sizeof(ReplyPrefix), offsetof(ReplyPrefix, deferred_result),
              offsetof(ReplyPrefix, deferred_op));
  // The payloads rgpu_wire.py builds, from fixed inputs that check_rgpu_wire.py repeats.
  rgpu::Writer by_hash, image, lookup, layout, ahead;
  wire::ModuleByHash h{0x2000, rgpu::op::cuModuleLoadData, {}};
  for (size_t i = 0; i < h.hash.size(); ++i) h.hash[i] = static_cast<uint8_t>(i);
  wire::put_module_by_hash(by_hash, h);
  bytes("module_by_hash", by_hash);
  wire::put_image_load_head(image, 0x3000, 4);
  image.append("\x7f" "ELF", 4);
  bytes("image_load", image);
  wire::put_symbol_lookup(lookup, 0x3001, 0x3000, "rgpu_vec_add");
  bytes("symbol_lookup", lookup);
  wire::put_param_layout_ask(layout, {0x3101, 2});
  bytes("param_layout_ask", layout);
  wire::put_alloc_ahead(ahead, {4096, 3});
  bytes("alloc_ahead", ahead);
  rgpu::Writer control;
  wire::put_session_control(control, {kSessionMigrate, 1234, 1});
  bytes("session_control", control);
  return 0;
}
