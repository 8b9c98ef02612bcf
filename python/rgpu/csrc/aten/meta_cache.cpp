// Implementation of aten/meta_cache.h.
#include "aten/meta_cache.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "runtime/device.h"

namespace rgpu::torchdev {

namespace {

// Ops whose output shape depends on the data: they wait, whatever the meta device says.
bool data_dependent(const std::string& name) {
  static const std::unordered_set<std::string> kNames = {
      "aten::nonzero",     "aten::masked_select",  "aten::_unique",  "aten::_unique2",
      "aten::unique_dim",  "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount",
      "aten::repeat_interleave", "aten::nonzero_numpy", "aten::histogram", "aten::_histogramdd_bin_edges"};
  return kNames.count(name) > 0;
}

bool is_scalar_type(const c10::TypePtr& t0) {
  c10::TypePtr t = t0;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  if (t->kind() == c10::TypeKind::ListType) t = t->castRaw<c10::ListType>()->getElementType();
  return t->kind() == c10::TypeKind::NumberType;
}

OpInfo make_info(const c10::FunctionSchema& schema) {
  OpInfo info;
  info.always_wait = data_dependent(schema.name());
  for (const auto& ret : schema.returns()) {
    c10::TypePtr t = ret.type();
    if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::ListType) t = t->castRaw<c10::ListType>()->getElementType();
    if (t->kind() != c10::TypeKind::TensorType) info.always_wait = true;
    int aliased = -1;
    if (ret.alias_info() && ret.alias_info()->isWrite()) {
      for (size_t j = 0; j < schema.arguments().size(); ++j) {
        const auto* a = schema.arguments()[j].alias_info();
        if (a && a->isWrite() && a->beforeSets() == ret.alias_info()->beforeSets()) {
          aliased = static_cast<int>(j);
          break;
        }
      }
    }
    info.aliased.push_back(aliased);
  }
  info.mutates = schema.returns().empty();
  for (const auto& a : schema.arguments()) {
    info.mutates = info.mutates || (a.alias_info() && a.alias_info()->isWrite());
    info.scalar_typed.push_back(is_scalar_type(a.type()));
  }
  info.keyed_by_scalar_value = schema.name() == "aten::arange" || schema.name() == "aten::range";
  info.rule = find_shape_rule(schema);
  return info;
}

// Bounds the cache: a program that keeps making new shapes (a growing sequence length, say)
// starts over rather than growing without end.
constexpr size_t kMaxPlans = 1 << 16;

std::mutex g_mu;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> g_infos;
std::unordered_map<std::string, std::shared_ptr<const Plan>> g_plans;
std::unordered_map<std::string, RuleVerdict> g_verdicts;
std::unordered_map<std::string, uint64_t> g_misses_by_op;
std::atomic<uint64_t> g_hits{0}, g_misses{0}, g_uncacheable{0};

}  // namespace

const OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  std::lock_guard<std::mutex> lk(g_mu);
  auto& slot = g_infos[key];
  if (!slot) slot = std::make_unique<OpInfo>(make_info(op.schema()));
  return *slot;
}

CallKey::CallKey(const c10::OperatorHandle& op, const OpInfo& info, const std::vector<c10::IValue>& args,
                 bool symbolic)
    : symbolic_(symbolic) {
  key_.reserve(256);
  put(&op.schema());
  put(c10::typeMetaToScalarType(c10::get_default_dtype()));
  // A shape class keys every Scalar by its kind: arange's rule reads the values itself.
  for (size_t k = 0; k < args.size(); ++k)
    value(args[k], k < info.scalar_typed.size() && info.scalar_typed[k] && (symbolic || !info.keyed_by_scalar_value), 0);
}

uint32_t CallKey::storage_index(const c10::Storage& s) {
  for (size_t i = 0; i < storages_.size(); ++i)
    if (storages_[i].unsafeGetStorageImpl() == s.unsafeGetStorageImpl()) return static_cast<uint32_t>(i);
  storages_.push_back(s);
  return static_cast<uint32_t>(storages_.size() - 1);
}

void CallKey::value(const c10::IValue& v, bool by_kind, int depth) {
  if (v.isNone()) {
    put('N');
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      put('U');
      return;
    }
    if (t.device().type() == kDeviceType && symbolic_) {
      put('S');
      put(storage_index(t.storage()));
      put(t.scalar_type());
      put(static_cast<uint8_t>(t.dim()));
      for (int64_t s : t.sizes()) put(static_cast<uint8_t>(std::min<int64_t>(s, 2)));
      put(static_cast<uint8_t>(t.is_contiguous() | (t.is_non_overlapping_and_dense() << 1) |
                               ((t.storage_offset() == 0) << 2) | (t.is_conj() << 3) | (t.is_neg() << 4)));
      // The order of the strides, largest first (ties by position).
      std::vector<uint8_t> order(t.dim());
      for (int64_t d = 0; d < t.dim(); ++d) order[d] = static_cast<uint8_t>(d);
      std::stable_sort(order.begin(), order.end(), [&](uint8_t a, uint8_t b) { return t.stride(a) > t.stride(b); });
      for (size_t k = 0; k < order.size(); ++k) {
        put(order[k]);
        put(k > 0 && t.stride(order[k]) == t.stride(order[k - 1]));
        put(t.stride(order[k]) == 0);
      }
      return;
    }
    if (t.device().type() == kDeviceType) {
      put('R');
      put(storage_index(t.storage()));
      put(t.storage().nbytes());
    } else if (t.is_cpu() && t.dim() == 0) {
      // A scalar: its value decides nothing about the outputs' metadata, its kind does.
      put('C');
      put(t.unsafeGetTensorImpl()->is_wrapped_number());
    } else {
      ok_ = false;  // a cpu tensor with elements, or another device: the meta device decides each time
      put('X');
    }
    put(t.scalar_type());
    put(static_cast<uint8_t>(t.dim()));
    for (int64_t s : t.sizes()) put(s);
    for (int64_t s : t.strides()) put(s);
    put(t.storage_offset());
    put(static_cast<uint8_t>(t.is_conj() | (t.is_neg() << 1)));
  } else if (v.isBool()) {
    put('b');
    put(v.toBool());
  } else if (v.isInt()) {
    put('i');
    if (!by_kind) put(v.toInt());
  } else if (v.isSymInt()) {
    put('i');
    if (!by_kind) put(v.toSymInt().guard_int(__FILE__, __LINE__));
  } else if (v.isDouble()) {
    put('d');
    if (!by_kind) put(v.toDouble());
  } else if (v.isSymFloat()) {
    put('d');
    if (!by_kind) put(v.toSymFloat().guard_float(__FILE__, __LINE__));
  } else if (v.isSymBool()) {
    put('b');
    put(v.toSymBool().guard_bool(__FILE__, __LINE__));
  } else if (v.isComplexDouble()) {
    put('c');
    if (!by_kind) put(v.toComplexDouble());
  } else if (v.isString()) {
    put('s');
    put(v.toStringRef().size());
    key_.append(v.toStringRef());
  } else if (v.isDevice()) {
    put('D');
    put(v.toDevice().type());
    put(v.toDevice().index());
  } else if (v.isList() && depth < 4) {
    auto l = v.toListRef();
    put('L');
    put(static_cast<uint32_t>(l.size()));
    for (const auto& e : l) value(e, by_kind, depth + 1);
  } else {
    ok_ = false;  // generators and anything else put_value does not send either
    put('?');
  }
}

std::shared_ptr<const Plan> find_plan(const CallKey& key) {
  if (!key.cacheable()) {
    g_uncacheable.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_plans.find(key.bytes());
  if (it == g_plans.end()) return nullptr;
  g_hits.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void keep_plan(const CallKey& key, std::shared_ptr<const Plan> plan) {
  if (!key.cacheable()) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_plans.size() >= kMaxPlans) g_plans.clear();
  g_plans.emplace(key.bytes(), std::move(plan));
}

RuleVerdict rule_verdict(const CallKey& shape_class) {
  if (!shape_class.cacheable()) return RuleVerdict::kDisagreed;
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_verdicts.find(shape_class.bytes());
  return it == g_verdicts.end() ? RuleVerdict::kUnknown : it->second;
}

void set_rule_verdict(const CallKey& shape_class, RuleVerdict v) {
  if (!shape_class.cacheable()) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_verdicts.size() >= kMaxPlans) g_verdicts.clear();
  g_verdicts[shape_class.bytes()] = v;
}

void count_meta_run(const c10::OperatorHandle& op) {
  g_misses.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(g_mu);
  ++g_misses_by_op[op.schema().name()];
}

std::vector<std::pair<std::string, uint64_t>> meta_misses_by_op() {
  std::lock_guard<std::mutex> lk(g_mu);
  return {g_misses_by_op.begin(), g_misses_by_op.end()};
}

MetaCacheStats meta_cache_stats() {
  return {g_hits.load(std::memory_order_relaxed), g_misses.load(std::memory_order_relaxed),
          g_uncacheable.load(std::memory_order_relaxed)};
}

}  // namespace rgpu::torchdev
