// Implementation of aten/shape_rules.h: one function per family of ops, each saying what the
// op's meta kernel in torch 2.x makes (structured meta functions, TensorIterator,
// torch/_meta_registrations.py), under the conditions it checks first.
#include "aten/shape_rules.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/strides.h>

#include <atomic>
#include <unordered_map>

#include "aten/meta_cache.h"
#include "runtime/device.h"

namespace rgpu::torchdev {

namespace {

std::atomic<uint64_t> g_used{0}, g_checked{0}, g_mismatches{0};
std::atomic<bool> g_verify_all{false};

bool is_rgpu(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kDeviceType;
}

// An rgpu tensor with elements and no lazy conj/neg bit: what every rule asks of its inputs.
bool plain(const c10::IValue& v) {
  if (!is_rgpu(v)) return false;
  const at::Tensor& t = v.toTensor();
  return t.numel() > 0 && !t.is_conj() && !t.is_neg();
}

// plain and contiguous as torch counts it (the strides of size-1 dimensions do not count):
// TensorIterator lays its output out contiguously for such operands. A size-1 dimension's odd
// stride could still order the output's dimensions otherwise; the shape class keeps the strides'
// order and ties, so the check against the meta device sees each such layout once.
bool contig(const c10::IValue& v) { return plain(v) && v.toTensor().is_contiguous(); }

bool floating(c10::ScalarType s) { return c10::isFloatingType(s); }

OutPlan fresh(c10::ScalarType dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  OutPlan o;
  o.kind = OutPlan::kFresh;
  o.dtype = dtype;
  o.sizes = sizes.vec();
  o.strides = strides.vec();
  o.nbytes = at::detail::computeStorageNbytes(sizes, strides, c10::elementSize(dtype));
  return o;
}

OutPlan fresh_contiguous(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  auto strides = c10::contiguous_strides(sizes);
  return fresh(dtype, sizes, c10::IntArrayRef(strides.data(), strides.size()));
}

// torch.empty_like(t) (memory_format preserve) as the meta device makes it (torch._refs.empty_like):
// contiguous when t is contiguous and not also channels-last (compute_elementwise_output_
// logical_to_physical_perm's short cut, which ignores the strides of size-1 dimensions: the query
// of a one-token KV-cache step, a permuted view of qkv with stride 384 at its size-1 dimension,
// gets contiguous strides, not its own); else t's strides when it is dense, else dense strides in
// t's order of dimensions.
OutPlan fresh_like(const at::Tensor& t) {
  if (t.is_contiguous() && !t.is_contiguous(c10::MemoryFormat::ChannelsLast))
    return fresh_contiguous(t.scalar_type(), t.sizes());
  if (t.is_non_overlapping_and_dense()) return fresh(t.scalar_type(), t.sizes(), t.strides());
  auto strides = at::infer_dense_strides(t.sizes(), t.strides());
  return fresh(t.scalar_type(), t.sizes(), strides);
}

// A TensorIterator operand: a contiguous rgpu tensor, or a cpu scalar tensor (0-dim).
bool iter_operand(const c10::IValue& v) {
  if (contig(v)) return true;
  return v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu() && v.toTensor().dim() == 0;
}

// Elementwise ops over TensorIterator with contiguous operands: the output is contiguous in the
// broadcast shape (no operand's strides ask for another order), its dtype the operands' promoted
// type. Floating results only: integral and bool ones carry checks (alpha, sub of bool, integer
// division) that the rule does not repeat.
bool elementwise(const std::vector<c10::IValue>& args, size_t n_operands, Plan* plan) {
  if (args.size() < n_operands || !contig(args[0])) return false;
  at::native::ResultTypeState state;
  std::vector<int64_t> shape = args[0].toTensor().sizes().vec();
  for (size_t k = 0; k < n_operands; ++k) {
    const c10::IValue& v = args[k];
    if (v.isTensor()) {
      if (!iter_operand(v)) return false;
      const at::Tensor& t = v.toTensor();
      state = at::native::update_result_type_state(t, state);
      if (k > 0) {
        try {
          shape = at::infer_size(shape, t.sizes());
        } catch (const std::exception&) {
          return false;
        }
      }
    } else if (v.isScalar()) {
      state = at::native::update_result_type_state(v.toScalar(), state);
    } else {
      return false;
    }
  }
  c10::ScalarType dtype = at::native::result_type(state);
  if (!floating(dtype)) return false;
  plan->rets.push_back(fresh_contiguous(dtype, shape));
  return true;
}

bool binary(const std::vector<c10::IValue>& args, Plan* plan) { return elementwise(args, 2, plan); }

// Unary floating ops (gelu, tanh, exp, ...): the input's dtype and shape, contiguous.
bool unary(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.empty() || !contig(args[0]) || !floating(args[0].toTensor().scalar_type())) return false;
  return elementwise(args, 1, plan);
}

// _softmax / _log_softmax(self, dim, half_to_float=False): the input's sizes, contiguous whatever
// its strides (the structured meta function asks for no layout).
bool softmax(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 3 || !plain(args[0]) || !args[1].isInt() || !args[2].isBool() || args[2].toBool()) return false;
  const at::Tensor& t = args[0].toTensor();
  if (!floating(t.scalar_type())) return false;
  int64_t d = args[1].toInt();
  int64_t n = std::max<int64_t>(t.dim(), 1);
  if (d < -n || d >= n) return false;
  plan->rets.push_back(fresh_contiguous(t.scalar_type(), t.sizes()));
  return true;
}

bool same_floating_dtype(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && floating(a.scalar_type());
}

// mm(self, mat2): [m, k] x [k, n] -> [m, n], contiguous whatever the inputs' strides.
bool mm(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 2 || !plain(args[0]) || !plain(args[1])) return false;
  const at::Tensor &a = args[0].toTensor(), &b = args[1].toTensor();
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0) || !same_floating_dtype(a, b)) return false;
  plan->rets.push_back(fresh_contiguous(a.scalar_type(), {a.size(0), b.size(1)}));
  return true;
}

// addmm(self, mat1, mat2, beta, alpha): mm, with self broadcastable to the result.
bool addmm(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 5 || !plain(args[0]) || !plain(args[1]) || !plain(args[2])) return false;
  const at::Tensor &s = args[0].toTensor(), &a = args[1].toTensor(), &b = args[2].toTensor();
  if (a.dim() != 2 || b.dim() != 2 || s.dim() > 2 || a.size(1) != b.size(0)) return false;
  if (!same_floating_dtype(a, b) || !same_floating_dtype(s, a)) return false;
  std::vector<int64_t> out = {a.size(0), b.size(1)};
  try {
    if (at::infer_size(s.sizes(), out) != out) return false;
  } catch (const std::exception&) {
    return false;
  }
  plan->rets.push_back(fresh_contiguous(a.scalar_type(), out));
  return true;
}

// bmm(self, mat2): [b, m, k] x [b, k, n] -> [b, m, n], contiguous.
bool bmm(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 2 || !plain(args[0]) || !plain(args[1])) return false;
  const at::Tensor &a = args[0].toTensor(), &b = args[1].toTensor();
  if (a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0) || a.size(2) != b.size(1) || !same_floating_dtype(a, b))
    return false;
  plan->rets.push_back(fresh_contiguous(a.scalar_type(), {a.size(0), a.size(1), b.size(2)}));
  return true;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd): out like
// the (contiguous) input; mean and rstd of the input's leading dimensions then 1 per normalized
// one, contiguous. float32 and float64 only (mean and rstd of half inputs are float32).
bool layer_norm(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 5 || !contig(args[0]) || !args[1].isIntList()) return false;
  const at::Tensor& x = args[0].toTensor();
  c10::ScalarType dt = x.scalar_type();
  if (dt != c10::kFloat && dt != c10::kDouble) return false;
  std::vector<int64_t> norm = args[1].toIntVector();
  int64_t axis = x.dim() - static_cast<int64_t>(norm.size());
  if (norm.empty() || axis < 0) return false;
  for (size_t k = 0; k < norm.size(); ++k)
    if (x.size(axis + static_cast<int64_t>(k)) != norm[k]) return false;
  for (int k : {2, 3}) {
    if (args[k].isNone()) continue;
    if (!contig(args[k]) || args[k].toTensor().scalar_type() != dt || !args[k].toTensor().sizes().equals(norm))
      return false;
  }
  std::vector<int64_t> stat(x.sizes().begin(), x.sizes().begin() + axis);
  stat.resize(x.dim(), 1);
  plan->rets.push_back(fresh_contiguous(dt, x.sizes()));
  plan->rets.push_back(fresh_contiguous(dt, stat));
  plan->rets.push_back(fresh_contiguous(dt, stat));
  return true;
}

// index_select(self, dim, index): self's sizes with index.numel() at dim, contiguous
// (self.new_empty in the meta kernel).
bool index_select(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 3 || !plain(args[0]) || !args[1].isInt() || !plain(args[2])) return false;
  const at::Tensor &x = args[0].toTensor(), &i = args[2].toTensor();
  if (x.dim() < 1 || i.dim() > 1 || (i.scalar_type() != c10::kLong && i.scalar_type() != c10::kInt)) return false;
  int64_t d = args[1].toInt();
  if (d < -x.dim() || d >= x.dim()) return false;
  if (d < 0) d += x.dim();
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[d] = i.numel();
  plan->rets.push_back(fresh_contiguous(x.scalar_type(), sizes));
  return true;
}

// cat(tensors, dim) of tensors with one dtype and rank, equal but at dim, contiguous output when
// any input's suggested memory format is contiguous (cat_compute_output_memory_format).
bool cat(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 2 || !args[0].isTensorList() || !args[1].isInt()) return false;
  auto list = args[0].toTensorList();
  if (list.empty()) return false;
  bool contiguous_format = false;
  std::vector<int64_t> sizes;
  c10::ScalarType dt = c10::ScalarType::Undefined;
  int64_t d = args[1].toInt();
  for (size_t k = 0; k < list.size(); ++k) {
    at::Tensor t = list[k];
    if (!plain(c10::IValue(t))) return false;
    if (k == 0) {
      if (t.dim() < 1 || d < -t.dim() || d >= t.dim()) return false;
      if (d < 0) d += t.dim();
      sizes = t.sizes().vec();
      dt = t.scalar_type();
    } else {
      if (t.dim() != static_cast<int64_t>(sizes.size()) || t.scalar_type() != dt) return false;
      for (int64_t j = 0; j < t.dim(); ++j)
        if (j != d && t.size(j) != sizes[j]) return false;
      sizes[d] += t.size(d);
    }
    contiguous_format = contiguous_format || t.suggest_memory_format() == c10::MemoryFormat::Contiguous;
  }
  if (!contiguous_format) return false;
  plan->rets.push_back(fresh_contiguous(dt, sizes));
  return true;
}

// _scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, attn_mask?, scale?)
// -> (out, logsumexp): out = empty_like(q), logsumexp = empty([b, tq, h], float).transpose(1, 2)
// (the meta kernel checks nothing; the server reports what the kernel refuses).
bool flash_cpu(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 7 || !plain(args[0]) || !plain(args[1]) || !plain(args[2]) || !args[5].isNone()) return false;
  const at::Tensor& q = args[0].toTensor();
  if (q.dim() != 4 || !floating(q.scalar_type())) return false;
  plan->rets.push_back(fresh_like(q));
  int64_t b = q.size(0), h = q.size(1), tq = q.size(2);
  OutPlan lse = fresh_contiguous(c10::kFloat, {b, tq, h});
  std::swap(lse.sizes[1], lse.sizes[2]);
  std::swap(lse.strides[1], lse.strides[2]);
  plan->rets.push_back(std::move(lse));
  return true;
}

// multinomial(self, num_samples, replacement, generator=None): int64 [num_samples] or
// [rows, num_samples].
bool multinomial(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 4 || !plain(args[0]) || !args[1].isInt() || !args[2].isBool() || !args[3].isNone()) return false;
  const at::Tensor& p = args[0].toTensor();
  int64_t n = args[1].toInt();
  if ((p.dim() != 1 && p.dim() != 2) || !floating(p.scalar_type()) || n <= 0) return false;
  if (!args[2].toBool() && n > p.size(-1)) return false;
  if (p.dim() == 1)
    plan->rets.push_back(fresh_contiguous(c10::kLong, {n}));
  else
    plan->rets.push_back(fresh_contiguous(c10::kLong, {p.size(0), n}));
  return true;
}

// arange.start_out(start, end, step, out) with integer start, end and step into an empty int64
// out: out resized to [(end - start + step - sign(step)) / step].
bool arange_out(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() != 4 || !args[0].isInt() || !args[1].isInt() || !args[2].isInt() || !is_rgpu(args[3])) return false;
  const at::Tensor& out = args[3].toTensor();
  if (out.numel() != 0 || out.scalar_type() != c10::kLong) return false;
  int64_t start = args[0].toInt(), end = args[1].toInt(), step = args[2].toInt();
  if (step == 0 || (step > 0 && end <= start) || (step < 0 && end >= start)) return false;
  int64_t sgn = step > 0 ? 1 : -1;
  int64_t n = (end - start + step - sgn) / step;
  OutPlan o;
  o.kind = OutPlan::kAliased;
  o.arg = 3;
  o.restride = true;
  o.sizes = {n};
  o.strides = {1};
  plan->rets.push_back(std::move(o));
  return true;
}

// The out= variant of a functional rule: the N last arguments are the outputs, rgpu tensors of
// the functional op's dtypes; an empty one is resized as the functional op would make it, one of
// the functional op's sizes is written in its own layout (a functional op on rgpu runs as its
// out= variant into outputs torch made with those sizes: add.Tensor calls add.out).
template <ShapeRule R, size_t N>
bool out_of(const std::vector<c10::IValue>& args, Plan* plan) {
  if (args.size() < N) return false;
  std::vector<c10::IValue> in(args.begin(), args.end() - N);
  Plan functional;
  if (!R(in, &functional) || functional.rets.size() != N) return false;
  for (size_t k = 0; k < N; ++k) {
    const size_t arg = args.size() - N + k;
    const OutPlan& f = functional.rets[k];
    if (!is_rgpu(args[arg]) || f.kind != OutPlan::kFresh) return false;
    const at::Tensor& out = args[arg].toTensor();
    if (out.scalar_type() != f.dtype || out.is_conj() || out.is_neg()) return false;
    OutPlan o;
    o.kind = OutPlan::kAliased;
    o.arg = static_cast<int>(arg);
    o.restride = true;
    if (out.numel() == 0) {  // resized to what the functional op makes
      o.sizes = f.sizes;
      o.strides = f.strides;
    } else if (out.sizes().equals(f.sizes)) {  // written in its own layout
      o.sizes = out.sizes().vec();
      o.strides = out.strides().vec();
    } else {
      return false;
    }
    plan->rets.push_back(std::move(o));
  }
  return true;
}

const std::unordered_map<std::string, ShapeRule>& rules() {
  static const std::unordered_map<std::string, ShapeRule> kRules = {
      {"aten::add.Tensor", binary},      {"aten::sub.Tensor", binary},   {"aten::mul.Tensor", binary},
      {"aten::div.Tensor", binary},      {"aten::add.Scalar", binary},   {"aten::sub.Scalar", binary},
      {"aten::mul.Scalar", binary},      {"aten::div.Scalar", binary},   {"aten::pow.Tensor_Scalar", binary},
      {"aten::gelu", unary},             {"aten::relu", unary},          {"aten::silu", unary},
      {"aten::tanh", unary},             {"aten::sigmoid", unary},       {"aten::exp", unary},
      {"aten::neg", unary},              {"aten::rsqrt", unary},         {"aten::sqrt", unary},
      {"aten::_softmax", softmax},       {"aten::_log_softmax", softmax}, {"aten::mm", mm},
      {"aten::addmm", addmm},            {"aten::bmm", bmm},             {"aten::native_layer_norm", layer_norm},
      {"aten::index_select", index_select}, {"aten::cat", cat},
      {"aten::_scaled_dot_product_flash_attention_for_cpu", flash_cpu},
      {"aten::multinomial", multinomial}, {"aten::arange.start_out", arange_out},
      // The out= variants that functional calls reach on rgpu.
      {"aten::add.out", out_of<binary, 1>},        {"aten::sub.out", out_of<binary, 1>},
      {"aten::mul.out", out_of<binary, 1>},        {"aten::div.out", out_of<binary, 1>},
      {"aten::pow.Tensor_Scalar_out", out_of<binary, 1>},
      {"aten::gelu.out", out_of<unary, 1>},        {"aten::silu.out", out_of<unary, 1>},
      {"aten::tanh.out", out_of<unary, 1>},        {"aten::sigmoid.out", out_of<unary, 1>},
      {"aten::exp.out", out_of<unary, 1>},         {"aten::neg.out", out_of<unary, 1>},
      {"aten::rsqrt.out", out_of<unary, 1>},       {"aten::sqrt.out", out_of<unary, 1>},
      {"aten::_softmax.out", out_of<softmax, 1>},  {"aten::_log_softmax.out", out_of<softmax, 1>},
      {"aten::mm.out", out_of<mm, 1>},             {"aten::addmm.out", out_of<addmm, 1>},
      {"aten::bmm.out", out_of<bmm, 1>},           {"aten::index_select.out", out_of<index_select, 1>},
      {"aten::cat.out", out_of<cat, 1>},
  };
  return kRules;
}

bool same_out(const OutPlan& a, const OutPlan& b) {
  if (a.kind != b.kind || a.list.size() != b.list.size()) return false;
  for (size_t k = 0; k < a.list.size(); ++k)
    if (!same_out(a.list[k], b.list[k])) return false;
  switch (a.kind) {
    case OutPlan::kAliased:
      return a.arg == b.arg && a.restride == b.restride && (!a.restride || (a.sizes == b.sizes && a.strides == b.strides));
    case OutPlan::kView:
    case OutPlan::kFresh:
      return a.storage == b.storage && a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides &&
             a.offset == b.offset && a.nbytes == b.nbytes;
    default:
      return true;
  }
}

}  // namespace

ShapeRule find_shape_rule(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  auto it = rules().find(name);
  return it == rules().end() ? nullptr : it->second;
}

bool same_plan(const Plan& a, const Plan& b) {
  if (a.wait != b.wait || a.rets.size() != b.rets.size()) return false;
  for (size_t k = 0; k < a.rets.size(); ++k)
    if (!same_out(a.rets[k], b.rets[k])) return false;
  return true;
}

ShapeRuleStats shape_rule_stats() {
  return {g_used.load(std::memory_order_relaxed), g_checked.load(std::memory_order_relaxed),
          g_mismatches.load(std::memory_order_relaxed)};
}

void count_shape_rule(bool checked, bool mismatch) {
  (checked ? g_checked : g_used).fetch_add(1, std::memory_order_relaxed);
  if (mismatch) g_mismatches.fetch_add(1, std::memory_order_relaxed);
}

void set_verify_all(bool on) { g_verify_all.store(on); }
bool verify_all() { return g_verify_all.load(); }

}  // namespace rgpu::torchdev
