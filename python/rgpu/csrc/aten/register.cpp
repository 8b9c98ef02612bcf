// Registration, apart from the kernels (as in PyTorch's OpenReg): the local kernels of
// aten/kernels.h for PrivateUse1, the boxed fallback for every other op, and the rgpu::* ops
// the Python package calls (python/rgpu/__init__.py).
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/meta_cache.h"
#include "aten/remote.h"
#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

using namespace rgpu::torchwire;

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { fallback(op, stack); }

void manual_seed(int64_t seed) { Connection::seed(static_cast<uint64_t>(seed)); }

std::string server_info() {
  Connection& c = Connection::get();
  return "rgpu-opserver at " + c.address() + ", torch " + c.server_torch() + " on " + c.server_device();
}

// patient: as every first use connects (retrying for RGPU_CONNECT_TIMEOUT); otherwise one
// short try (is_available, device_count: a missing server is answered at once).
void connect(bool patient) { Connection::get(patient); }

// torch.rgpu.device_count / current_device / set_device (python/rgpu/device.py).
int64_t device_count_op() { return device_count(); }
int64_t current_device_op() { return current_device(); }
void set_device_op(int64_t index) {
  TORCH_CHECK_INDEX(index >= 0 && index < 128, "rgpu:", index, " is not a device index");
  set_current_device(static_cast<c10::DeviceIndex>(index));
}
// Sets the current device and returns the previous one (torch.rgpu.device, as a context).
int64_t exchange_device_op(int64_t index) {
  int64_t old = current_device();
  set_device_op(index);
  return old;
}

// [calls that waited for the server, one-way calls, bytes sent] since connect, then [meta cache
// hits, misses, uncacheable calls] and [shape rules used, checked, mismatched] since start, then
// the channel's [resumes, duplicate frames dropped]: what tests and benchmarks count round trips
// with (python/rgpu/device.py names them).
std::vector<int64_t> stats() {
  Connection* c = Connection::existing();
  MetaCacheStats m = meta_cache_stats();
  auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
  ShapeRuleStats r = shape_rule_stats();
  rgpu::proto::ChannelStats ch = c ? c->channel_stats() : rgpu::proto::ChannelStats{};
  return {c ? i(c->waits()) : 0, c ? i(c->posts()) : 0, c ? i(c->bytes_sent()) : 0,
          i(m.hits), i(m.misses), i(m.uncacheable), i(r.used), i(r.checked), i(r.mismatches),
          i(ch.resumes), i(ch.duplicates_dropped)};
}

// The meta cache's misses by operator, as parallel lists.
std::tuple<std::vector<std::string>, std::vector<int64_t>> meta_misses_by_op_op() {
  std::tuple<std::vector<std::string>, std::vector<int64_t>> out;
  for (const auto& [op, n] : meta_misses_by_op()) {
    std::get<0>(out).push_back(op);
    std::get<1>(out).push_back(static_cast<int64_t>(n));
  }
  return out;
}

void verify_shape_rules(bool on) { set_verify_all(on); }

// The waits since connect by reason ("read", "synchronize", or the op that waited), as
// parallel lists.
std::tuple<std::vector<std::string>, std::vector<int64_t>> waits_by_reason() {
  std::tuple<std::vector<std::string>, std::vector<int64_t>> out;
  if (Connection* c = Connection::existing()) {
    for (const auto& [why, n] : c->waits_by_reason()) {
      std::get<0>(out).push_back(why);
      std::get<1>(out).push_back(static_cast<int64_t>(n));
    }
  }
  return out;
}

// torch.rgpu's device queries (python/rgpu/device.py; protocol/torch_wire.h says what each
// answer means). Device -1 is the current device.

// [name, uuid], [total_memory, then the PropIndex values].
std::tuple<std::vector<std::string>, std::vector<int64_t>> device_properties(int64_t device) {
  Writer w;
  w.put<int8_t>(static_cast<int8_t>(device));
  Bytes body = Connection::get().call(kTorchDeviceProps, w, "get_device_properties");
  Reader r(body.data(), body.size());
  std::tuple<std::vector<std::string>, std::vector<int64_t>> out;
  std::string name = r.str(kMaxString);
  std::get<1>(out).push_back(static_cast<int64_t>(r.u64()));
  for (int k = 0; k < kPropCount; ++k) std::get<1>(out).push_back(r.i32());
  std::string uuid = r.str(kMaxString);
  TORCH_CHECK(r.ok(), "rgpu: rgpu-opserver sent a malformed device description");
  std::get<0>(out) = {name, uuid};
  return out;
}

std::vector<int64_t> memory_allocated(int64_t device) {
  auto [current, peak] = allocated_bytes(static_cast<c10::DeviceIndex>(device));
  return {current, peak};
}

void post_rng(int64_t device, RngAction action, Writer& tail) {
  Writer w;
  w.put<int8_t>(static_cast<int8_t>(device));
  w.put_u8(action);
  w.append(tail.buf().data(), tail.size());
  Connection::get().post(kTorchRng, w);
}

Bytes ask_rng(int64_t device, RngAction action, const char* why) {
  Writer w;
  w.put<int8_t>(static_cast<int8_t>(device));
  w.put_u8(action);
  return Connection::get().call(kTorchRng, w, why);
}

at::Tensor get_rng_state(int64_t device) {
  Bytes body = ask_rng(device, kRngGetState, "get_rng_state");
  Reader r(body.data(), body.size());
  size_t n = 0;
  const uint8_t* p = r.bytes(&n, kMaxRngState);
  TORCH_CHECK(r.ok(), "rgpu: rgpu-opserver sent a malformed generator state");
  at::Tensor state = at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
  if (n) std::memcpy(state.data_ptr(), p, n);
  return state;
}

void set_rng_state(int64_t device, const at::Tensor& state) {
  TORCH_CHECK(state.is_cpu() && state.scalar_type() == at::kByte,
              "rgpu: set_rng_state takes a cpu torch.ByteTensor (as get_rng_state returns), got ", state.toString());
  at::Tensor s = state.contiguous();
  TORCH_CHECK(s.nbytes() <= kMaxRngState, "rgpu: set_rng_state: the state is larger than any generator's");
  Writer w;
  w.put_bytes(s.const_data_ptr(), s.nbytes());
  post_rng(device, kRngSetState, w);
}

int64_t ask_seed(int64_t device, RngAction action, const char* why) {
  Bytes body = ask_rng(device, action, why);
  Reader r(body.data(), body.size());
  uint64_t seed = r.u64();
  TORCH_CHECK(r.ok(), "rgpu: rgpu-opserver sent a malformed seed");
  return static_cast<int64_t>(seed);
}

int64_t seed(int64_t device) { return ask_seed(device, kRngSeed, "seed"); }
int64_t initial_seed(int64_t device) { return ask_seed(device, kRngInitialSeed, "initial_seed"); }

void manual_seed_device(int64_t device, int64_t seed) {
  if (!Connection::existing()) return Connection::seed(static_cast<uint64_t>(seed));  // sent at connect
  Writer w;
  w.put_u64(static_cast<uint64_t>(seed));
  post_rng(device, kRngManualSeed, w);
}

bool is_connected() { return Connection::existing() != nullptr; }

// (bytes kept, allocations served from kept memory) of the .cpu() results' host cache (tests).
std::vector<int64_t> host_cache() {
  auto [kept, reused] = host_cache_state();
  return {static_cast<int64_t>(kept), static_cast<int64_t>(reused)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_to_copy", TORCH_FN(to_copy));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  // Composite ops whose decomposition would end in a *_overrideable op no backend implements, or
  // in many small ops: sent to the server whole, through the fallback.
  for (const char* name : {"convolution", "convolution_backward", "_convolution"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
  // The _foreach_* ops (optimizers) decompose into one op per tensor on backends without their
  // own kernels; sent whole they are one message, and one fused kernel on a CUDA server.
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    if (op.name.rfind("aten::_foreach_", 0) != 0) continue;
    std::string name = op.name.substr(6) + (op.overload_name.empty() ? "" : "." + op.overload_name);
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
  }
}

TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", TORCH_FN(copy_from_with_bits)); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", TORCH_FN(copy_from_with_bits)); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

// Sparse rgpu tensors (aten/remote.h, refuse_sparse): every op dispatched to a sparse layout on
// rgpu (to_sparse's result, sparse_coo_tensor(device="rgpu"), .to("rgpu") of a sparse tensor,
// sparse.mm with an rgpu operand, Embedding(sparse=True)'s gradient) is refused, naming the op.
void refuse_sparse_boxed(const c10::OperatorHandle& op, torch::jit::Stack*) {
  refuse_sparse(c10::toString(op.operator_name()));
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_boxed>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_boxed>());
}
// The compressed layouts' factories (sparse_csr_tensor(..., device="rgpu"), ...) are composite:
// they build the tensor without dispatching further, so the fallback never sees them; their own
// kernels for the key refuse them.
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::string& n = op.name;
    bool factory = n.rfind("aten::sparse_", 0) == 0 || n.rfind("aten::_sparse_", 0) == 0;
    bool compressed = false;
    for (const char* kind : {"compressed", "csr", "csc", "bsr", "bsc"})
      compressed = compressed || n.find(std::string("_") + kind + "_tensor") != std::string::npos;
    if (!factory || !compressed) continue;
    std::string name = n.substr(6) + (op.overload_name.empty() ? "" : "." + op.overload_name);
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_boxed>());
  }
}

TORCH_LIBRARY(rgpu, m) {
  m.def("synchronize() -> ()", &synchronize);
  m.def("manual_seed(int seed) -> ()", &manual_seed);
  m.def("server_info() -> str", &server_info);
  m.def("connect(bool patient=True) -> ()", &connect);
  m.def("device_count() -> int", &device_count_op);
  m.def("current_device() -> int", &current_device_op);
  m.def("set_device(int index) -> ()", &set_device_op);
  m.def("exchange_device(int index) -> int", &exchange_device_op);
  m.def("stats() -> int[]", &stats);
  m.def("waits_by_reason() -> (str[], int[])", &waits_by_reason);
  m.def("meta_misses_by_op() -> (str[], int[])", &meta_misses_by_op_op);
  m.def("verify_shape_rules(bool on) -> ()", &verify_shape_rules);
  m.def("is_connected() -> bool", &is_connected);
  m.def("host_cache() -> int[]", &host_cache);
  m.def("device_properties(int device) -> (str[], int[])", &device_properties);
  m.def("memory_allocated(int device) -> int[]", &memory_allocated);
  m.def("get_rng_state(int device) -> Tensor", &get_rng_state);
  m.def("set_rng_state(int device, Tensor state) -> ()", &set_rng_state);
  m.def("seed(int device) -> int", &seed);
  m.def("initial_seed(int device) -> int", &initial_seed);
  m.def("manual_seed_device(int device, int seed) -> ()", &manual_seed_device);
}

}  // namespace rgpu::torchdev
