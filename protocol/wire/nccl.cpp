// NCCL on the wire (layout in nccl.h).
#include "protocol/wire/nccl.h"

namespace rgpu::proto::wire {

const char* nccl_op_name(uint16_t op) {
  static const char* const kNames[] = {
      "ncclGetVersion",    "ncclGetUniqueId",   "ncclCommInitRank",       "ncclCommInitAll",
      "ncclCommSplit",     "ncclCommFinalize",  "ncclCommDestroy",        "ncclCommAbort",
      "ncclCommGetAsyncError", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclAllReduce",
      "ncclBroadcast",     "ncclReduce",        "ncclAllGather",          "ncclReduceScatter",
      "ncclAlltoAll",      "ncclSend",          "ncclRecv",               "ncclGroupStart",
      "ncclGroupEnd"};
  static_assert(sizeof kNames / sizeof kNames[0] == size_t{kNcclLastOp} - size_t{kFirstNcclOp} + 1);
  if (op < kFirstNcclOp || op > kNcclLastOp) return nullptr;
  return kNames[op - size_t{kFirstNcclOp}];
}

void put_nccl_reply(Writer& w, const NcclReply& v) {
  w.put_i32(v.result);
  w.put_i32(v.deferred);
  w.put_u16(v.deferred_op);
  w.put_str(v.message.size() > kMaxNcclMessage ? v.message.substr(0, kMaxNcclMessage) : v.message);
}

bool read_nccl_reply(Reader& r, NcclReply* out) {
  out->result = r.i32();
  out->deferred = r.i32();
  out->deferred_op = r.u16();
  out->message = r.str(kMaxNcclMessage);
  return r.ok();
}

namespace {
void put_name(Writer& w, bool has, const std::string& s) {
  w.put_u8(has);
  w.put_str(has ? (s.size() > kMaxNcclName ? s.substr(0, kMaxNcclName) : s) : std::string());
}
bool read_name(Reader& r, bool* has, std::string* s) {
  const uint8_t h = r.u8();
  *s = r.str(kMaxNcclName);
  *has = h != 0;
  return r.ok() && h <= 1 && (*has || s->empty());
}
}  // namespace

void put_nccl_config(Writer& w, const NcclConfig& v) {
  w.put_u8(v.present);
  if (!v.present) return;
  w.put_u32(v.version);
  for (int32_t x : {v.blocking, v.cga_cluster_size, v.min_ctas, v.max_ctas, v.split_share, v.traffic_class,
                    v.collnet_enable, v.cta_policy, v.shrink_share, v.nvls_ctas})
    w.put_i32(x);
  put_name(w, v.has_net_name, v.net_name);
  put_name(w, v.has_comm_name, v.comm_name);
}

bool read_nccl_config(Reader& r, NcclConfig* out) {
  *out = NcclConfig{};
  const uint8_t present = r.u8();
  if (present > 1) return r.fail();
  if (!present) return r.ok();
  out->present = true;
  out->version = r.u32();
  for (int32_t* x : {&out->blocking, &out->cga_cluster_size, &out->min_ctas, &out->max_ctas, &out->split_share,
                     &out->traffic_class, &out->collnet_enable, &out->cta_policy, &out->shrink_share, &out->nvls_ctas})
    *x = r.i32();
  if (!read_name(r, &out->has_net_name, &out->net_name)) return r.fail();
  if (!read_name(r, &out->has_comm_name, &out->comm_name)) return r.fail();
  return r.ok();
}

void put_nccl_comm_init(Writer& w, const NcclCommInit& v) {
  w.append(v.id, kNcclIdBytes);
  w.put_i32(v.nranks);
  w.put_i32(v.rank);
  put_nccl_config(w, v.config);
}

bool read_nccl_comm_init(Reader& r, NcclCommInit* out) {
  r.take(out->id, kNcclIdBytes);
  out->nranks = r.i32();
  out->rank = r.i32();
  return read_nccl_config(r, &out->config) && r.ok();
}

void put_nccl_devices(Writer& w, const std::vector<int32_t>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (int32_t d : v) w.put_i32(d);
}

bool read_nccl_devices(Reader& r, std::vector<int32_t>* out) {
  const uint32_t n = r.u32();
  if (!r.ok() || n == 0 || n > kMaxNcclDevices) return r.fail();
  out->resize(n);
  for (auto& d : *out) d = r.i32();
  return r.ok();
}

void put_nccl_comms(Writer& w, const std::vector<uint64_t>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (uint64_t c : v) w.put_u64(c);
}

bool read_nccl_comms(Reader& r, std::vector<uint64_t>* out) {
  const uint32_t n = r.u32();
  if (!r.ok() || n > kMaxNcclDevices) return r.fail();
  out->resize(n);
  for (auto& c : *out) c = r.u64();
  return r.ok();
}

void put_nccl_comm_split(Writer& w, const NcclCommSplit& v) {
  w.put_u64(v.comm);
  w.put_i32(v.color);
  w.put_i32(v.key);
  put_nccl_config(w, v.config);
}

bool read_nccl_comm_split(Reader& r, NcclCommSplit* out) {
  out->comm = r.u64();
  out->color = r.i32();
  out->key = r.i32();
  return read_nccl_config(r, &out->config) && r.ok();
}

void put_nccl_premulsum(Writer& w, const NcclPreMulSum& v) {
  w.put_u64(v.comm);
  w.put_i32(v.datatype);
  w.put_i32(v.residence);
  w.put_u64(v.scalar);
}

bool read_nccl_premulsum(Reader& r, NcclPreMulSum* out) {
  out->comm = r.u64();
  out->datatype = r.i32();
  out->residence = r.i32();
  out->scalar = r.u64();
  return r.ok();
}

void put_nccl_collective(Writer& w, const NcclCollective& v) {
  w.put_u64(v.comm);
  w.put_u64(v.sendbuff);
  w.put_u64(v.recvbuff);
  w.put_u64(v.count);
  w.put_i32(v.datatype);
  w.put_i32(v.op);
  w.put_i32(v.root);
  w.put_u64(v.stream);
}

bool read_nccl_collective(Reader& r, NcclCollective* out) {
  out->comm = r.u64();
  out->sendbuff = r.u64();
  out->recvbuff = r.u64();
  out->count = r.u64();
  out->datatype = r.i32();
  out->op = r.i32();
  out->root = r.i32();
  out->stream = r.u64();
  return r.ok();
}

size_t nccl_type_size(int32_t datatype) {
  switch (datatype) {
    case 0: case 1: case 10: case 11: return 1;  // int8, uint8, fp8 e4m3, fp8 e5m2
    case 6: case 9: return 2;                    // half, bfloat16
    case 2: case 3: case 7: return 4;            // int32, uint32, float
    case 4: case 5: case 8: return 8;            // int64, uint64, double
    default: return 0;
  }
}

}  // namespace rgpu::proto::wire
