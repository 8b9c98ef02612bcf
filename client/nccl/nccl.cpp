// rgpu's libnccl.so.2: the NCCL API, forwarded to the real NCCL inside each rank's rgpu-server
// session (docs/design.md §6, "NCCL"). A rank's buffers and streams live in its session on the
// server of its device, so NCCL must run there too: the calls go over libcuda.so.1's connection
// to that server (client/nccl/bridge.h), ranks on different servers talk to each other with NCCL's
// own transports, and no collective's bytes pass through the client.
//
// What is answered here: the communicator's size, rank and device (recorded when it is made),
// error strings, argument checks that NCCL would fail at once (a bad type, op, root or peer, a
// stream of another server), and refusals of what cannot be forwarded (memory NCCL allocates or
// registers for itself, device communicators, shrinking). Collectives and point-to-point calls
// are one-way, batched like kernel launches; a failure the server sees comes back with the next
// waiting NCCL call (as a deferred CUDA error does) and from ncclCommGetAsyncError. Calls that
// make communicators wait. Groups: ncclGroupStart is sent to a server just before the first call
// of the group that goes there, ncclGroupEnd to each server the group reached.
#include "protocol/nccl.h"

#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/nccl/bridge.h"
#include "common/log.h"
#include "common/wire.h"
#include "protocol/messages.h"
#include "protocol/wire/nccl.h"

#define NCCL_API extern "C" __attribute__((visibility("default")))

namespace {

namespace w = rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

// What the client knows of a communicator it made.
struct Comm {
  int server = 0;
  int nranks = 0, rank = 0;
  int device = -1;            // the client's ordinal
  std::set<int> premul_ops;  // ncclRedOpCreatePreMulSum's, until destroyed
};
std::mutex g_mu;
auto& g_comms = *new std::unordered_map<uint64_t, Comm>();

// The thread's group (ncclGroupStart/End): its depth, the servers told of it, and those that made
// communicators in it (their ncclGroupEnd waits).
struct Group {
  int depth = 0;
  std::set<int> started, creating;
};
thread_local Group t_group;
thread_local std::string t_last_error;

ncclResult_t fail(ncclResult_t rc, const std::string& why) {
  t_last_error = why;
  rgpu::log::warn("NCCL: %s", why.c_str());
  return rc;
}

bool find_comm(ncclComm_t comm, Comm* out) {
  std::lock_guard lk(g_mu);
  auto it = g_comms.find(reinterpret_cast<uint64_t>(comm));
  if (it == g_comms.end()) return false;
  *out = it->second;
  return true;
}

ncclResult_t unknown_comm(const char* call) {
  return fail(ncclInvalidArgument, rgpu::log::format("%s: the communicator is not one rgpu's NCCL made (or it was destroyed)", call));
}

ncclResult_t ensure_init() {
  const CUresult rc = cuInit(0);
  if (rc == CUDA_SUCCESS) return ncclSuccess;
  return fail(ncclUnhandledCudaError,
              rgpu::log::format("cuInit failed (CUDA error %d): rgpu's NCCL needs the rgpu-server of RGPU_SERVER", rc));
}

// The result of a reply: the call's own, else a deferred one; *out reads what follows.
ncclResult_t take_reply(uint16_t op, const std::vector<uint8_t>& buf, size_t len, Reader* out) {
  *out = Reader(buf.data(), len);
  w::NcclReply rep;
  if (!w::read_nccl_reply(*out, &rep))
    return fail(ncclInternalError, rgpu::log::format("%s: rgpu-server sent a malformed reply", w::nccl_op_name(op)));
  if (rep.result != ncclSuccess)
    return fail(static_cast<ncclResult_t>(rep.result),
                rgpu::log::format("%s failed on the server: %s", w::nccl_op_name(op), rep.message.c_str()));
  if (rep.deferred != ncclSuccess) {
    const char* name = w::nccl_op_name(rep.deferred_op);
    return fail(static_cast<ncclResult_t>(rep.deferred),
                rgpu::log::format("an earlier %s failed on the server: %s", name ? name : "NCCL call",
                                  rep.message.c_str()));
  }
  return ncclSuccess;
}

// A one-way call: queued, or with RGPU_BATCH=0 sent and answered (its result is then the reply's).
ncclResult_t one_way(uint16_t op, int server, uint64_t stream, const Writer* args) {
  std::vector<uint8_t> reply(w::kMaxNcclMessage + 64);
  size_t len = 0;
  auto* a = args ? &const_cast<Writer*>(args)->buf() : nullptr;
  const int rc = rgpu_nccl_call(op, server, 1, stream, a ? a->data() : nullptr, a ? a->size() : 0, reply.data(),
                                reply.size(), &len);
  if (rc != CUDA_SUCCESS)
    return fail(ncclSystemError,
                rgpu::log::format("%s: rgpu-server could not be reached (CUDA error %d)", w::nccl_op_name(op), rc));
  if (len == 0) return ncclSuccess;  // queued
  Reader r(nullptr, 0);
  return take_reply(op, reply, len, &r);
}

// In a group, tells `server` that the group has begun before the group's first call goes there.
ncclResult_t group_reaches(int server) {
  if (t_group.depth == 0 || t_group.started.count(server)) return ncclSuccess;
  if (ncclResult_t rc = one_way(w::kNcclGroupStart, server, ~uint64_t{0}, nullptr)) return rc;
  t_group.started.insert(server);
  return ncclSuccess;
}

// A call that waits for its reply; *out reads what follows the NcclReply.
ncclResult_t waiting(uint16_t op, int server, const Writer& args, std::vector<uint8_t>* buf, Reader* out) {
  if (ncclResult_t r = ensure_init()) return r;
  if (ncclResult_t r = group_reaches(server >= 0 ? server : rgpu_nccl_current_server())) return r;
  buf->resize(w::kMaxNcclMessage + 4096);
  size_t len = 0;
  auto& a = const_cast<Writer&>(args).buf();
  const int rc = rgpu_nccl_call(op, server, 0, ~uint64_t{0}, a.data(), a.size(), buf->data(), buf->size(), &len);
  if (rc != CUDA_SUCCESS)
    return fail(ncclSystemError, rgpu::log::format("%s: rgpu-server could not be reached or refused the call (CUDA "
                                                   "error %d); see rgpu's log lines above",
                                                   w::nccl_op_name(op), rc));
  return take_reply(op, *buf, len, out);
}

ncclResult_t comm_made(uint64_t id, int server, int nranks, int rank, int server_device, ncclComm_t* out) {
  Comm c;
  c.server = server;
  c.nranks = nranks;
  c.rank = rank;
  c.device = rgpu_nccl_client_device(server_device, server);
  {
    std::lock_guard lk(g_mu);
    g_comms[id] = c;
  }
  *out = reinterpret_cast<ncclComm_t>(id);
  return ncclSuccess;
}

w::NcclConfig wire_config(const ncclConfig_t* config) {
  w::NcclConfig c;
  if (!config) return c;
  c.present = true;
  c.version = config->version;
  // Fields past the caller's struct (an older nccl.h) stay undefined.
  auto field = [config](const int& f) {
    const size_t end = reinterpret_cast<const char*>(&f) - reinterpret_cast<const char*>(config) + sizeof f;
    return end <= config->size ? f : NCCL_CONFIG_UNDEF_INT;
  };
  auto name = [config](const char* const& f, bool* has, std::string* s) {
    const size_t end = reinterpret_cast<const char*>(&f) - reinterpret_cast<const char*>(config) + sizeof f;
    *has = end <= config->size && f != nullptr;
    if (*has) *s = std::string(f).substr(0, w::kMaxNcclName);
  };
  c.blocking = field(config->blocking);
  c.cga_cluster_size = field(config->cgaClusterSize);
  c.min_ctas = field(config->minCTAs);
  c.max_ctas = field(config->maxCTAs);
  c.split_share = field(config->splitShare);
  c.traffic_class = field(config->trafficClass);
  c.collnet_enable = field(config->collnetEnable);
  c.cta_policy = field(config->CTAPolicy);
  c.shrink_share = field(config->shrinkShare);
  c.nvls_ctas = field(config->nvlsCTAs);
  name(config->netName, &c.has_net_name, &c.net_name);
  name(config->commName, &c.has_comm_name, &c.comm_name);
  return c;
}

ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, ncclConfig_t* config,
                       const char* call) {
  if (!comm) return fail(ncclInvalidArgument, rgpu::log::format("%s: comm is NULL", call));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, rgpu::log::format("%s: rank %d of %d ranks is out of range", call, rank, nranks));
  if (config && (config->size < offsetof(ncclConfig_t, blocking) || config->magic != NCCL_CONFIG_MAGIC))
    return fail(ncclInvalidArgument,
                rgpu::log::format("%s: config was not set up with NCCL_CONFIG_INITIALIZER", call));
  if (ncclResult_t r = ensure_init()) return r;
  w::NcclCommInit m;
  std::memcpy(m.id, id.internal, sizeof m.id);
  m.nranks = nranks;
  m.rank = rank;
  m.config = wire_config(config);
  Writer a;
  w::put_nccl_comm_init(a, m);
  const int server = rgpu_nccl_current_server();
  if (t_group.depth > 0) t_group.creating.insert(server);
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclCommInit, server, a, &buf, &r)) return rc;
  const uint64_t cid = r.u64();
  const int32_t dev = r.i32();
  if (!r.ok() || cid == 0) return fail(ncclInternalError, rgpu::log::format("%s: rgpu-server sent a malformed reply", call));
  return comm_made(cid, server, nranks, rank, dev, comm);
}

// Checks shared by the collectives, then sends one (one-way).
ncclResult_t collective(uint16_t op, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int redop, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* call = w::nccl_op_name(op);
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm(call);
  if (w::nccl_type_size(datatype) == 0)
    return fail(ncclInvalidArgument, rgpu::log::format("%s: datatype %d is not an NCCL data type", call, datatype));
  if (op == w::kNcclAllReduce || op == w::kNcclReduce || op == w::kNcclReduceScatter) {
    const bool builtin = redop >= 0 && redop < ncclNumOps;
    if (!builtin && !c.premul_ops.count(redop))
      return fail(ncclInvalidArgument, rgpu::log::format("%s: reduction %d is neither built in nor made by "
                                                         "ncclRedOpCreatePreMulSum on this communicator",
                                                         call, redop));
  }
  if (root >= c.nranks || (root < 0 && (op == w::kNcclBroadcast || op == w::kNcclReduce || op == w::kNcclSend ||
                                        op == w::kNcclRecv)))
    return fail(ncclInvalidArgument,
                rgpu::log::format("%s: %s %d is not a rank of this %d-rank communicator", call,
                                  op == w::kNcclSend || op == w::kNcclRecv ? "peer" : "root", root, c.nranks));
  const uint64_t sid = reinterpret_cast<uint64_t>(stream);
  const int stream_server = rgpu_nccl_handle_server(sid);
  if (stream_server >= 0 && stream_server != c.server)
    return fail(ncclInvalidUsage, rgpu::log::format("%s: the stream belongs to another server than the communicator's "
                                                    "device; use a stream of that device",
                                                    call));
  if (ncclResult_t r = group_reaches(c.server)) return r;
  w::NcclCollective m;
  m.comm = reinterpret_cast<uint64_t>(comm);
  m.sendbuff = reinterpret_cast<uint64_t>(sendbuff);
  m.recvbuff = reinterpret_cast<uint64_t>(recvbuff);
  m.count = count;
  m.datatype = datatype;
  m.op = redop;
  m.root = root;
  m.stream = sid;
  Writer a;
  w::put_nccl_collective(a, m);
  return one_way(op, c.server, sid, &a);
}

ncclResult_t not_forwarded(const char* call, const char* what) {
  return fail(ncclInvalidUsage, rgpu::log::format("%s is not supported through rgpu (%s); rgpu forwards the "
                                                  "communicator and collective calls only",
                                                  call, what));
}

}  // namespace

NCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  static std::mutex mu;
  static int cached = 0;
  std::lock_guard lk(mu);
  if (cached == 0) {
    std::vector<uint8_t> buf;
    Reader r(nullptr, 0);
    if (ncclResult_t rc = waiting(w::kNcclGetVersion, 0, Writer(), &buf, &r)) return rc;
    cached = r.i32();
    if (!r.ok()) return fail(ncclInternalError, "ncclGetVersion: rgpu-server sent a malformed reply");
  }
  *version = cached;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (ncclResult_t r = ensure_init()) return r;
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclGetUniqueId, rgpu_nccl_current_server(), Writer(), &buf, &r)) return rc;
  if (!r.take(uniqueId->internal, sizeof uniqueId->internal))
    return fail(ncclInternalError, "ncclGetUniqueId: rgpu-server sent a malformed reply");
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                             ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}

NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId == 1 && commIds) return init_rank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
  return not_forwarded("ncclCommInitRankScalable with several unique ids", "one id is forwarded as ncclCommInitRankConfig");
}

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1 || static_cast<uint32_t>(ndev) > w::kMaxNcclDevices)
    return fail(ncclInvalidArgument, rgpu::log::format("ncclCommInitAll: comms is NULL or ndev %d is out of range", ndev));
  if (ncclResult_t r = ensure_init()) return r;
  std::vector<int32_t> devs;
  int server = -1;
  for (int i = 0; i < ndev; ++i) {
    const int d = devlist ? devlist[i] : i;
    const int s = rgpu_nccl_device_server(d);
    if (s < 0) return fail(ncclInvalidArgument, rgpu::log::format("ncclCommInitAll: there is no device %d", d));
    if (server >= 0 && s != server)
      return fail(ncclInvalidUsage, "ncclCommInitAll: the devices are on different rgpu servers; make one "
                                    "communicator with ncclGetUniqueId and ncclCommInitRank per device instead");
    server = s;
    devs.push_back(rgpu_nccl_server_device(d));
  }
  Writer a;
  w::put_nccl_devices(a, devs);
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclCommInitAll, server, a, &buf, &r)) return rc;
  std::vector<uint64_t> ids;
  if (!w::read_nccl_comms(r, &ids) || ids.size() != devs.size())
    return fail(ncclInternalError, "ncclCommInitAll: rgpu-server sent a malformed reply");
  for (int i = 0; i < ndev; ++i) comm_made(ids[i], server, ndev, i, devs[i], &comms[i]);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclCommSplit");
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  w::NcclCommSplit m;
  m.comm = reinterpret_cast<uint64_t>(comm);
  m.color = color;
  m.key = key;
  m.config = wire_config(config);
  Writer a;
  w::put_nccl_comm_split(a, m);
  if (t_group.depth > 0) t_group.creating.insert(c.server);
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclCommSplit, c.server, a, &buf, &r)) return rc;
  const uint64_t id = r.u64();
  const int32_t nranks = r.i32(), rank = r.i32(), dev = r.i32();
  if (!r.ok()) return fail(ncclInternalError, "ncclCommSplit: rgpu-server sent a malformed reply");
  if (id == 0) {
    *newcomm = nullptr;  // NCCL_SPLIT_NOCOLOR
    return ncclSuccess;
  }
  return comm_made(id, c.server, nranks, rank, dev, newcomm);
}

NCCL_API ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) {
  return not_forwarded("ncclCommShrink", "not implemented yet");
}

namespace {
ncclResult_t comm_call(uint16_t op, ncclComm_t comm, bool forget) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm(w::nccl_op_name(op));
  Writer a;
  a.put_u64(reinterpret_cast<uint64_t>(comm));
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  const ncclResult_t rc = waiting(op, c.server, a, &buf, &r);
  if (forget && (rc == ncclSuccess || op == w::kNcclCommAbort)) {
    std::lock_guard lk(g_mu);
    g_comms.erase(reinterpret_cast<uint64_t>(comm));
  }
  return rc;
}
}  // namespace

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm_call(w::kNcclCommFinalize, comm, false); }
NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL: destroying NULL is allowed
  return comm_call(w::kNcclCommDestroy, comm, true);
}
NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  return comm_call(w::kNcclCommAbort, comm, true);
}

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclCommGetAsyncError");
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  Writer a;
  a.put_u64(reinterpret_cast<uint64_t>(comm));
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclCommGetAsyncError, c.server, a, &buf, &r)) return rc;
  const int32_t e = r.i32();
  if (!r.ok()) return fail(ncclInternalError, "ncclCommGetAsyncError: rgpu-server sent a malformed reply");
  *asyncError = static_cast<ncclResult_t>(e);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclCommCount");
  if (!count) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = c.nranks;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclCommCuDevice");
  if (!device) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = c.device;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclCommUserRank");
  if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = c.rank;
  return ncclSuccess;
}

NCCL_API const char* ncclGetErrorString(ncclResult_t result) { return rgpu_nccl_error_string(result); }

NCCL_API const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclRedOpCreatePreMulSum");
  const size_t size = w::nccl_type_size(datatype);
  if (!op || !scalar || size == 0 || (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL, or datatype or residence is out of range");
  w::NcclPreMulSum m;
  m.comm = reinterpret_cast<uint64_t>(comm);
  m.datatype = datatype;
  m.residence = residence;
  if (residence == ncclScalarHostImmediate)
    std::memcpy(&m.scalar, scalar, size);  // read now, as NCCL does
  else
    m.scalar = reinterpret_cast<uint64_t>(scalar);
  Writer a;
  w::put_nccl_premulsum(a, m);
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclRedOpCreatePreMulSum, c.server, a, &buf, &r)) return rc;
  const int32_t made = r.i32();
  if (!r.ok()) return fail(ncclInternalError, "ncclRedOpCreatePreMulSum: rgpu-server sent a malformed reply");
  {
    std::lock_guard lk(g_mu);
    auto it = g_comms.find(m.comm);
    if (it != g_comms.end()) it->second.premul_ops.insert(made);
  }
  *op = static_cast<ncclRedOp_t>(made);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  Comm c;
  if (!find_comm(comm, &c)) return unknown_comm("ncclRedOpDestroy");
  if (!c.premul_ops.count(op))
    return fail(ncclInvalidArgument, rgpu::log::format("ncclRedOpDestroy: %d is not an op this communicator made", op));
  Writer a;
  a.put_u64(reinterpret_cast<uint64_t>(comm));
  a.put_i32(op);
  std::vector<uint8_t> buf;
  Reader r(nullptr, 0);
  if (ncclResult_t rc = waiting(w::kNcclRedOpDestroy, c.server, a, &buf, &r)) return rc;
  std::lock_guard lk(g_mu);
  auto it = g_comms.find(reinterpret_cast<uint64_t>(comm));
  if (it != g_comms.end()) it->second.premul_ops.erase(op);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}
NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclBroadcast, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}
NCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return collective(w::kNcclBroadcast, buff, buff, count, datatype, 0, root, comm, stream);
}
NCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclAllGather, sendbuff, recvbuff, sendcount, datatype, 0, -1, comm, stream);
}
NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return collective(w::kNcclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream);
}
NCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclAlltoAll, sendbuff, recvbuff, count, datatype, 0, -1, comm, stream);
}
NCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  return collective(w::kNcclSend, sendbuff, nullptr, count, datatype, 0, peer, comm, stream);
}
NCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return collective(w::kNcclRecv, nullptr, recvbuff, count, datatype, 0, peer, comm, stream);
}

NCCL_API ncclResult_t ncclGroupStart(void) {
  ++t_group.depth;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGroupEnd(void) {
  if (t_group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  Group g = std::move(t_group);
  t_group = Group{};
  ncclResult_t first = ncclSuccess;
  for (int server : g.started) {
    ncclResult_t rc = ncclSuccess;
    if (g.creating.count(server)) {
      std::vector<uint8_t> buf;
      Reader r(nullptr, 0);
      rc = waiting(w::kNcclGroupEnd, server, Writer(), &buf, &r);
    } else {
      rc = one_way(w::kNcclGroupEnd, server, ~uint64_t{0}, nullptr);
    }
    if (first == ncclSuccess) first = rc;
  }
  return first;
}

NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return not_forwarded("ncclGroupSimulateEnd", "the server's NCCL would have to simulate the client's group");
}
NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t, void*, size_t, void**) {
  return not_forwarded("ncclCommRegister", "buffer registration is not forwarded yet");
}
NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t, void*) {
  return not_forwarded("ncclCommDeregister", "buffer registration is not forwarded yet");
}
NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t*, int) {
  return not_forwarded("ncclCommWindowRegister", "symmetric windows are not forwarded yet");
}
NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) {
  return not_forwarded("ncclCommWindowDeregister", "symmetric windows are not forwarded yet");
}
NCCL_API ncclResult_t ncclDevCommCreate(ncclComm_t, const ncclDevCommRequirements_t*, ncclDevComm_t*) {
  return not_forwarded("ncclDevCommCreate", "device communicators are not forwarded yet");
}
NCCL_API ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm_t*) {
  return not_forwarded("ncclDevCommDestroy", "device communicators are not forwarded yet");
}
NCCL_API ncclResult_t ncclMemAlloc(void**, size_t) {
  return not_forwarded("ncclMemAlloc", "allocate with cudaMalloc instead");
}
NCCL_API ncclResult_t ncclMemFree(void*) { return not_forwarded("ncclMemFree", "allocate with cudaMalloc instead"); }
