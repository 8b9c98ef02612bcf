// NCCL calls in a session (nccl_server.h): the library, the communicators this session made, the
// deferred error, and one handler per op of protocol/wire/nccl.h.
#include "server/nccl/nccl_server.h"

#include <dlfcn.h>
#include <glob.h>
#include <sched.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "protocol/nccl.h"
#include "protocol/wire/nccl.h"

namespace rgpu::server::nccl {
namespace {

namespace w = proto::wire;

// The library's entry points the handlers call.
struct Table {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*CommCount)(const ncclComm_t, int*);
  ncclResult_t (*CommCuDevice)(const ncclComm_t, int*);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int*);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*RedOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
  ncclResult_t (*RedOpDestroy)(ncclRedOp_t, ncclComm_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
};

std::string g_path;  // --nccl; empty: the default search
std::once_flag g_load_once;
Table* g_table = nullptr;
std::string g_missing;  // why there is no table

// Where the default search looks after the dynamic loader: the NVIDIA pip package (nvidia-nccl-cu*)
// of the system's Pythons.
const char* const kPipGlobs[] = {"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
                                 "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
                                 "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2"};

void* open_library(std::string* tried) {
  if (!g_path.empty()) {
    void* lib = dlopen(g_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) *tried = log::format("%s (%s)", g_path.c_str(), dlerror());
    return lib;
  }
  if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) return lib;
  *tried = log::format("libnccl.so.2 (%s)", dlerror());
  for (const char* pattern : kPipGlobs) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (void* lib = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_LOCAL)) {
          globfree(&g);
          return lib;
        }
      }
    }
    globfree(&g);
  }
  *tried += ", and no NVIDIA pip package (nvidia-nccl-cu13) in the system's Python";
  return nullptr;
}

void load() {
  std::string tried;
  void* lib = open_library(&tried);
  if (!lib) {
    g_missing = log::format("this rgpu-server has no NCCL library: tried %s; install NCCL on the server or start it "
                            "with --nccl PATH",
                            tried.c_str());
    log::error("%s", g_missing.c_str());
    return;
  }
  auto* t = new Table();
  bool ok = true;
  auto sym = [&](auto* slot, const char* name) {
    *reinterpret_cast<void**>(slot) = dlsym(lib, name);
    if (!*reinterpret_cast<void**>(slot)) {
      g_missing += log::format("%s%s", g_missing.empty() ? "the server's NCCL library lacks " : ", ", name);
      ok = false;
    }
  };
  sym(&t->GetVersion, "ncclGetVersion");
  sym(&t->GetUniqueId, "ncclGetUniqueId");
  sym(&t->CommInitRankConfig, "ncclCommInitRankConfig");
  sym(&t->CommInitAll, "ncclCommInitAll");
  sym(&t->CommSplit, "ncclCommSplit");
  sym(&t->CommFinalize, "ncclCommFinalize");
  sym(&t->CommDestroy, "ncclCommDestroy");
  sym(&t->CommAbort, "ncclCommAbort");
  sym(&t->CommGetAsyncError, "ncclCommGetAsyncError");
  sym(&t->CommCount, "ncclCommCount");
  sym(&t->CommCuDevice, "ncclCommCuDevice");
  sym(&t->CommUserRank, "ncclCommUserRank");
  sym(&t->GetLastError, "ncclGetLastError");
  sym(&t->RedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum");
  sym(&t->RedOpDestroy, "ncclRedOpDestroy");
  sym(&t->AllReduce, "ncclAllReduce");
  sym(&t->Broadcast, "ncclBroadcast");
  sym(&t->Reduce, "ncclReduce");
  sym(&t->AllGather, "ncclAllGather");
  sym(&t->ReduceScatter, "ncclReduceScatter");
  sym(&t->AlltoAll, "ncclAlltoAll");
  sym(&t->Send, "ncclSend");
  sym(&t->Recv, "ncclRecv");
  sym(&t->GroupStart, "ncclGroupStart");
  sym(&t->GroupEnd, "ncclGroupEnd");
  if (!ok) {
    g_missing += " (NCCL 2.28 or newer is needed; give another with --nccl PATH)";
    log::error("%s", g_missing.c_str());
    return;
  }
  g_table = t;
}

const Table* table() {
  std::call_once(g_load_once, load);
  return g_table;
}

// The session's communicators by id, and the first failure of a one-way call not yet reported.
std::mutex g_mu;
std::unordered_map<uint64_t, ncclComm_t>& g_comms = *new std::unordered_map<uint64_t, ncclComm_t>();
std::unordered_map<uint64_t, ncclResult_t>& g_comm_failed = *new std::unordered_map<uint64_t, ncclResult_t>();
w::NcclReply g_deferred;

bool find(uint64_t id, ncclComm_t* out) {
  std::lock_guard lk(g_mu);
  auto it = g_comms.find(id);
  if (it == g_comms.end()) return false;
  *out = it->second;
  return true;
}

uint64_t remember(Dispatch& d, ncclComm_t comm) {
  const uint64_t id = d.handles.id_for(comm);
  std::lock_guard lk(g_mu);
  g_comms[id] = comm;
  return id;
}

void forget(Dispatch& d, uint64_t id) {
  d.handles.unbind(id);
  std::lock_guard lk(g_mu);
  g_comms.erase(id);
  g_comm_failed.erase(id);
}

// NCCL's words for a failure (its last error), or ours.
std::string message(const Table* t, ncclComm_t comm, ncclResult_t rc) {
  const char* last = t ? t->GetLastError(comm) : nullptr;
  if (last && *last) return last;
  return log::format("NCCL error %d", rc);
}

// Waits out ncclInProgress on a non-blocking communicator.
ncclResult_t settle(const Table* t, ncclComm_t comm, ncclResult_t rc) {
  while (rc == ncclInProgress && comm) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t q = t->CommGetAsyncError(comm, &state)) return q;
    if (state != ncclInProgress) return state;
    sched_yield();
  }
  return rc;
}

// The CUresult the session sees, then the NcclReply: the call's result, and the deferred failure
// (cleared once reported). One-way calls keep their failure for later instead.
void answer(Dispatch& d, ncclResult_t rc, const std::string& why, uint64_t comm_id = 0) {
  d.reply.put<int32_t>(CUDA_SUCCESS);
  std::lock_guard lk(g_mu);
  if (d.one_way) {
    if (rc != ncclSuccess) {
      const char* name = w::nccl_op_name(d.op);
      log::warn("one-way %s failed with NCCL error %d (%s); reporting it with the next waiting NCCL call",
                name ? name : "NCCL call", rc, why.c_str());
      if (g_deferred.deferred == ncclSuccess) g_deferred = {0, rc, d.op, why};
      if (comm_id) g_comm_failed.emplace(comm_id, rc);
    }
    w::put_nccl_reply(d.reply, {rc, 0, 0, why});
    return;
  }
  w::NcclReply rep{rc, g_deferred.deferred, g_deferred.deferred_op, rc != ncclSuccess ? why : g_deferred.message};
  g_deferred = {};
  w::put_nccl_reply(d.reply, rep);
}

// The handlers. Each one that decodes writes answer() first, then its outputs on success.
#define RGPU_NCCL_TABLE(t)                                 \
  const Table* t = table();                                \
  if (!t) return answer(d, ncclSystemError, g_missing)

ncclConfig_t native_config(const w::NcclConfig& c, std::string* net, std::string* name) {
  ncclConfig_t n = NCCL_CONFIG_INITIALIZER;
  n.blocking = c.blocking;
  n.cgaClusterSize = c.cga_cluster_size;
  n.minCTAs = c.min_ctas;
  n.maxCTAs = c.max_ctas;
  n.splitShare = c.split_share;
  n.trafficClass = c.traffic_class;
  n.collnetEnable = c.collnet_enable;
  n.CTAPolicy = c.cta_policy;
  n.shrinkShare = c.shrink_share;
  n.nvlsCTAs = c.nvls_ctas;
  *net = c.net_name;
  *name = c.comm_name;
  if (c.has_net_name) n.netName = net->c_str();
  if (c.has_comm_name) n.commName = name->c_str();
  return n;
}

void get_version(Dispatch& d) {
  RGPU_NCCL_TABLE(t);
  int v = 0;
  const ncclResult_t rc = t->GetVersion(&v);
  answer(d, rc, rc ? message(t, nullptr, rc) : "");
  if (rc == ncclSuccess) d.reply.put_i32(v);
}

void get_unique_id(Dispatch& d) {
  RGPU_NCCL_TABLE(t);
  ncclUniqueId id{};
  const ncclResult_t rc = t->GetUniqueId(&id);
  answer(d, rc, rc ? message(t, nullptr, rc) : "");
  if (rc == ncclSuccess) d.reply.append(id.internal, sizeof id.internal);
}

void comm_init(Dispatch& d) {
  w::NcclCommInit m;
  if (!w::read_nccl_comm_init(d.args, &m)) return;
  RGPU_NCCL_TABLE(t);
  ncclUniqueId id;
  std::memcpy(id.internal, m.id, sizeof id.internal);
  std::string net, name;
  ncclConfig_t config = native_config(m.config, &net, &name);
  ncclComm_t comm = nullptr;
  ncclResult_t rc = t->CommInitRankConfig(&comm, m.nranks, id, m.rank, m.config.present ? &config : nullptr);
  rc = settle(t, comm, rc);
  int dev = -1;
  if (rc == ncclSuccess) rc = t->CommCuDevice(comm, &dev);
  answer(d, rc, rc ? message(t, comm, rc) : "");
  if (rc != ncclSuccess) return;
  d.reply.put_u64(remember(d, comm));
  d.reply.put_i32(dev);
}

void comm_init_all(Dispatch& d) {
  std::vector<int32_t> devs;
  if (!w::read_nccl_devices(d.args, &devs)) return;
  RGPU_NCCL_TABLE(t);
  std::vector<ncclComm_t> comms(devs.size());
  const ncclResult_t rc = t->CommInitAll(comms.data(), static_cast<int>(devs.size()), devs.data());
  answer(d, rc, rc ? message(t, nullptr, rc) : "");
  if (rc != ncclSuccess) return;
  std::vector<uint64_t> ids;
  for (ncclComm_t c : comms) ids.push_back(remember(d, c));
  w::put_nccl_comms(d.reply, ids);
}

void comm_split(Dispatch& d) {
  w::NcclCommSplit m;
  if (!w::read_nccl_comm_split(d.args, &m)) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t parent;
  if (!find(m.comm, &parent)) return answer(d, ncclInvalidArgument, "ncclCommSplit: unknown communicator");
  std::string net, name;
  ncclConfig_t config = native_config(m.config, &net, &name);
  ncclComm_t comm = nullptr;
  ncclResult_t rc = t->CommSplit(parent, m.color, m.key, &comm, m.config.present ? &config : nullptr);
  rc = settle(t, comm ? comm : parent, rc);
  int nranks = 0, rank = -1, dev = -1;
  if (rc == ncclSuccess && comm) {
    rc = t->CommCount(comm, &nranks);
    if (rc == ncclSuccess) rc = t->CommUserRank(comm, &rank);
    if (rc == ncclSuccess) rc = t->CommCuDevice(comm, &dev);
  }
  answer(d, rc, rc ? message(t, comm ? comm : parent, rc) : "");
  if (rc != ncclSuccess) return;
  d.reply.put_u64(comm ? remember(d, comm) : 0);
  d.reply.put_i32(nranks);
  d.reply.put_i32(rank);
  d.reply.put_i32(dev);
}

template <int kWhich>  // 0 finalize, 1 destroy, 2 abort
void comm_end(Dispatch& d) {
  const uint64_t id = d.args.u64();
  if (!d.args.ok()) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t comm;
  if (!find(id, &comm)) return answer(d, ncclInvalidArgument, "unknown communicator");
  ncclResult_t rc = kWhich == 0 ? t->CommFinalize(comm) : kWhich == 1 ? t->CommDestroy(comm) : t->CommAbort(comm);
  if (kWhich == 0) rc = settle(t, comm, rc);
  const std::string why = rc ? message(t, kWhich == 0 ? comm : nullptr, rc) : "";
  if (kWhich != 0 && (rc == ncclSuccess || kWhich == 2)) forget(d, id);
  answer(d, rc, why);
}

void comm_get_async_error(Dispatch& d) {
  const uint64_t id = d.args.u64();
  if (!d.args.ok()) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t comm;
  if (!find(id, &comm)) return answer(d, ncclInvalidArgument, "unknown communicator");
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = t->CommGetAsyncError(comm, &state);
  if (rc == ncclSuccess && state == ncclSuccess) {
    std::lock_guard lk(g_mu);
    auto it = g_comm_failed.find(id);
    if (it != g_comm_failed.end()) state = it->second;
  }
  answer(d, rc, rc ? message(t, comm, rc) : "");
  if (rc == ncclSuccess) d.reply.put_i32(state);
}

void premulsum(Dispatch& d) {
  w::NcclPreMulSum m;
  if (!w::read_nccl_premulsum(d.args, &m)) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t comm;
  if (!find(m.comm, &comm)) return answer(d, ncclInvalidArgument, "unknown communicator");
  uint64_t host = m.scalar;
  void* scalar = m.residence == ncclScalarHostImmediate ? static_cast<void*>(&host) : reinterpret_cast<void*>(m.scalar);
  ncclRedOp_t op{};
  const ncclResult_t rc = t->RedOpCreatePreMulSum(&op, scalar, static_cast<ncclDataType_t>(m.datatype),
                                                  static_cast<ncclScalarResidence_t>(m.residence), comm);
  answer(d, rc, rc ? message(t, comm, rc) : "");
  if (rc == ncclSuccess) d.reply.put_i32(op);
}

void redop_destroy(Dispatch& d) {
  const uint64_t id = d.args.u64();
  const int32_t op = d.args.i32();
  if (!d.args.ok()) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t comm;
  if (!find(id, &comm)) return answer(d, ncclInvalidArgument, "unknown communicator");
  const ncclResult_t rc = t->RedOpDestroy(static_cast<ncclRedOp_t>(op), comm);
  answer(d, rc, rc ? message(t, comm, rc) : "");
}

void collective(Dispatch& d) {
  w::NcclCollective m;
  if (!w::read_nccl_collective(d.args, &m)) return;
  RGPU_NCCL_TABLE(t);
  ncclComm_t comm;
  if (!find(m.comm, &comm)) return answer(d, ncclInvalidArgument, "unknown communicator");
  CUstream stream = nullptr;
  if (!d.handles.get(m.stream, &stream))
    return answer(d, ncclInvalidArgument, "the stream is not one of this session's", m.comm);
  const void* send = reinterpret_cast<const void*>(m.sendbuff);
  void* recv = reinterpret_cast<void*>(m.recvbuff);
  const auto type = static_cast<ncclDataType_t>(m.datatype);
  const auto op = static_cast<ncclRedOp_t>(m.op);
  const size_t n = m.count;
  ncclResult_t rc = ncclInternalError;
  switch (d.op) {
    case w::kNcclAllReduce: rc = t->AllReduce(send, recv, n, type, op, comm, stream); break;
    case w::kNcclBroadcast: rc = t->Broadcast(send, recv, n, type, m.root, comm, stream); break;
    case w::kNcclReduce: rc = t->Reduce(send, recv, n, type, op, m.root, comm, stream); break;
    case w::kNcclAllGather: rc = t->AllGather(send, recv, n, type, comm, stream); break;
    case w::kNcclReduceScatter: rc = t->ReduceScatter(send, recv, n, type, op, comm, stream); break;
    case w::kNcclAlltoAll: rc = t->AlltoAll(send, recv, n, type, comm, stream); break;
    case w::kNcclSend: rc = t->Send(send, n, type, m.root, comm, stream); break;
    case w::kNcclRecv: rc = t->Recv(recv, n, type, m.root, comm, stream); break;
  }
  rc = settle(t, comm, rc);
  answer(d, rc, rc ? message(t, comm, rc) : "", m.comm);
}

void group_start(Dispatch& d) {
  RGPU_NCCL_TABLE(t);
  const ncclResult_t rc = t->GroupStart();
  answer(d, rc, rc ? message(t, nullptr, rc) : "");
}

void group_end(Dispatch& d) {
  RGPU_NCCL_TABLE(t);
  ncclResult_t rc = t->GroupEnd();
  if (rc == ncclInProgress) {  // non-blocking communicators: wait for every one of this session's
    std::vector<ncclComm_t> comms;
    {
      std::lock_guard lk(g_mu);
      for (auto& [id, c] : g_comms) comms.push_back(c);
    }
    rc = ncclSuccess;
    for (ncclComm_t c : comms)
      if (ncclResult_t r = settle(t, c, ncclInProgress); r != ncclSuccess && rc == ncclSuccess) rc = r;
  }
  answer(d, rc, rc ? message(t, nullptr, rc) : "");
}

}  // namespace

void set_library(const std::string& path) { g_path = path; }

Handler find_handler(uint16_t op) {
  switch (op) {
    case w::kNcclGetVersion: return get_version;
    case w::kNcclGetUniqueId: return get_unique_id;
    case w::kNcclCommInit: return comm_init;
    case w::kNcclCommInitAll: return comm_init_all;
    case w::kNcclCommSplit: return comm_split;
    case w::kNcclCommFinalize: return comm_end<0>;
    case w::kNcclCommDestroy: return comm_end<1>;
    case w::kNcclCommAbort: return comm_end<2>;
    case w::kNcclCommGetAsyncError: return comm_get_async_error;
    case w::kNcclRedOpCreatePreMulSum: return premulsum;
    case w::kNcclRedOpDestroy: return redop_destroy;
    case w::kNcclGroupStart: return group_start;
    case w::kNcclGroupEnd: return group_end;
    default: return w::nccl_collective(op) ? collective : nullptr;
  }
}

}  // namespace rgpu::server::nccl
