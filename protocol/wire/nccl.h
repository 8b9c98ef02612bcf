// NCCL on the wire: rgpu's libnccl.so.2 (client/nccl/) forwards the NCCL API to the real NCCL in
// the rank's rgpu-server session (server/nccl/), over the CUDA shim's connection to the server of
// the communicator's device, so device pointers and streams name that session's objects
// (docs/design.md §6, "NCCL"). Ops are numbered from proto::kFirstNcclOp (messages.h); ids are
// never reused.
//
// Layout (every request here is one of these; NcclCollective's ops are one-way, the rest wait):
//  kNcclGetVersion: nothing. Reply: NcclReply, i32 version.
//  kNcclGetUniqueId: nothing. Reply: NcclReply, 128 bytes id (made by the server's NCCL; opaque).
//  kNcclCommInit: 128 bytes id, i32 nranks, i32 rank, NcclConfig. Reply: NcclReply, u64 comm id,
//    i32 the comm's device (the server's ordinal). Runs on the thread's current context.
//  kNcclCommInitAll: u32 n (1..kMaxNcclDevices), n × i32 server device ordinals. Reply: NcclReply,
//    u32 n, n × u64 comm ids.
//  kNcclCommSplit: u64 comm, i32 color, i32 key, NcclConfig. Reply: NcclReply, u64 comm id (0 for
//    NCCL_SPLIT_NOCOLOR), i32 nranks, i32 rank, i32 device.
//  kNcclCommFinalize, kNcclCommDestroy, kNcclCommAbort: u64 comm. Reply: NcclReply.
//  kNcclCommGetAsyncError: u64 comm. Reply: NcclReply, i32 the comm's asynchronous error.
//  kNcclRedOpCreatePreMulSum: u64 comm, i32 datatype, i32 residence, u64 scalar: a device address
//    (ncclScalarDevice) or the scalar's bytes, little-endian, zero-padded (ncclScalarHostImmediate).
//    Reply: NcclReply, i32 op.
//  kNcclRedOpDestroy: u64 comm, i32 op. Reply: NcclReply.
//  kNcclAllReduce ... kNcclRecv: NcclCollective. One-way: a failure the server sees is kept as
//    the session's deferred NCCL error, reported by the next waiting NCCL call (NcclReply) and by
//    ncclCommGetAsyncError of its communicator.
//  kNcclGroupStart: nothing, one-way. kNcclGroupEnd: nothing; one-way, or waiting (the client
//    waits when the group created communicators). Reply: NcclReply.
//
//  NcclReply, first after the CUresult every handler writes (always CUDA_SUCCESS: NCCL's own
//    result is here): i32 ncclResult_t, i32 deferred ncclResult_t (0: none), u16 the op that
//    failed, str message (empty on success; at most kMaxNcclMessage bytes): what the server's
//    NCCL said (ncclGetLastError), or why the server refused.
//  NcclConfig: u8 present; when 1: u32 the caller's config version, 10 × i32 (blocking,
//    cgaClusterSize, minCTAs, maxCTAs, splitShare, trafficClass, collnetEnable, CTAPolicy,
//    shrinkShare, nvlsCTAs; NCCL_CONFIG_UNDEF_INT where the caller's struct ends before it or left
//    it undefined), u8 has netName, str netName, u8 has commName, str commName (each at most
//    kMaxNcclName bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/messages.h"

namespace rgpu::proto::wire {

enum NcclOp : uint16_t {
  kNcclGetVersion = kFirstNcclOp,
  kNcclGetUniqueId = kFirstNcclOp + 1,
  kNcclCommInit = kFirstNcclOp + 2,
  kNcclCommInitAll = kFirstNcclOp + 3,
  kNcclCommSplit = kFirstNcclOp + 4,
  kNcclCommFinalize = kFirstNcclOp + 5,
  kNcclCommDestroy = kFirstNcclOp + 6,
  kNcclCommAbort = kFirstNcclOp + 7,
  kNcclCommGetAsyncError = kFirstNcclOp + 8,
  kNcclRedOpCreatePreMulSum = kFirstNcclOp + 9,
  kNcclRedOpDestroy = kFirstNcclOp + 10,
  kNcclAllReduce = kFirstNcclOp + 11,
  kNcclBroadcast = kFirstNcclOp + 12,
  kNcclReduce = kFirstNcclOp + 13,
  kNcclAllGather = kFirstNcclOp + 14,
  kNcclReduceScatter = kFirstNcclOp + 15,
  kNcclAlltoAll = kFirstNcclOp + 16,
  kNcclSend = kFirstNcclOp + 17,
  kNcclRecv = kFirstNcclOp + 18,
  kNcclGroupStart = kFirstNcclOp + 19,
  kNcclGroupEnd = kFirstNcclOp + 20,
  kNcclLastOp = kNcclGroupEnd,
};
// The name of an NCCL op ("ncclAllReduce"), nullptr for others.
const char* nccl_op_name(uint16_t op);
inline bool nccl_collective(uint16_t op) { return op >= kNcclAllReduce && op <= kNcclRecv; }

inline constexpr size_t kNcclIdBytes = 128;
inline constexpr uint32_t kMaxNcclMessage = 4096;
inline constexpr uint32_t kMaxNcclName = 256;
inline constexpr uint32_t kMaxNcclDevices = 64;

struct NcclReply {
  int32_t result = 0;
  int32_t deferred = 0;
  uint16_t deferred_op = 0;
  std::string message;
};
void put_nccl_reply(Writer& w, const NcclReply& v);
bool read_nccl_reply(Reader& r, NcclReply* out);

// ncclConfig_t's fields that cross the wire (INT_MIN: undefined, as NCCL_CONFIG_UNDEF_INT).
struct NcclConfig {
  bool present = false;
  uint32_t version = 0;
  int32_t blocking = INT32_MIN, cga_cluster_size = INT32_MIN, min_ctas = INT32_MIN, max_ctas = INT32_MIN,
          split_share = INT32_MIN, traffic_class = INT32_MIN, collnet_enable = INT32_MIN, cta_policy = INT32_MIN,
          shrink_share = INT32_MIN, nvls_ctas = INT32_MIN;
  bool has_net_name = false, has_comm_name = false;
  std::string net_name, comm_name;
};
void put_nccl_config(Writer& w, const NcclConfig& v);
bool read_nccl_config(Reader& r, NcclConfig* out);

struct NcclCommInit {
  uint8_t id[kNcclIdBytes] = {};
  int32_t nranks = 0, rank = 0;
  NcclConfig config;
};
void put_nccl_comm_init(Writer& w, const NcclCommInit& v);
bool read_nccl_comm_init(Reader& r, NcclCommInit* out);

// kNcclCommInitAll's request (devices) and its reply (comm ids) after NcclReply.
void put_nccl_devices(Writer& w, const std::vector<int32_t>& v);
bool read_nccl_devices(Reader& r, std::vector<int32_t>* out);
void put_nccl_comms(Writer& w, const std::vector<uint64_t>& v);
bool read_nccl_comms(Reader& r, std::vector<uint64_t>* out);

struct NcclCommSplit {
  uint64_t comm = 0;
  int32_t color = 0, key = 0;
  NcclConfig config;
};
void put_nccl_comm_split(Writer& w, const NcclCommSplit& v);
bool read_nccl_comm_split(Reader& r, NcclCommSplit* out);

struct NcclPreMulSum {
  uint64_t comm = 0;
  int32_t datatype = 0, residence = 0;
  uint64_t scalar = 0;  // a device address, or the host scalar's bytes
};
void put_nccl_premulsum(Writer& w, const NcclPreMulSum& v);
bool read_nccl_premulsum(Reader& r, NcclPreMulSum* out);

// Every collective and point-to-point call. Unused fields are 0 (op) or -1 (root: the root of
// broadcast and reduce, the peer of send and recv).
struct NcclCollective {
  uint64_t comm = 0, sendbuff = 0, recvbuff = 0, count = 0;
  int32_t datatype = 0, op = 0, root = -1;
  uint64_t stream = 0;  // client handle (0 NULL, 1 legacy, 2 per-thread)
};
inline constexpr size_t kNcclCollectiveBytes = 52;
void put_nccl_collective(Writer& w, const NcclCollective& v);
bool read_nccl_collective(Reader& r, NcclCollective* out);

// Bytes per element of an NCCL data type, 0 for one out of range.
size_t nccl_type_size(int32_t datatype);

}  // namespace rgpu::proto::wire
