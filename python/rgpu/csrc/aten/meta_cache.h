// What the boxed fallback learned from the meta device, remembered per call signature
// (aten/fallback.cpp, step 1 of its file comment).
//
// Running an op on the meta device costs far more than sending it: many meta kernels are Python
// (torch._meta_registrations, torch._refs), tens to hundreds of microseconds each, and a training
// step repeats the same few hundred calls with the same shapes every time. So the first call of
// each signature runs on the meta device and its outcome (a Plan) is kept; later calls with the
// same signature reuse the Plan without touching the meta device.
//
// The signature (CallKey) holds everything the outputs' metadata can depend on: the operator,
// the default dtype, every argument's value (tensors by dtype, sizes, strides, offset,
// conj/neg bits, storage size, and which arguments share a storage) except the values of
// arguments typed `Scalar` or `Scalar[]` (alpha, fill values, the optimizers' per-step lists),
// which decide the result type by their kind alone. arange and range are the exception: their
// Scalars decide the length, so they are keyed by value. Calls whose signature cannot be
// written down (non-scalar cpu tensors, generators, unknown argument types) are never cached.
//
// A Plan whose meta run raised says "wait": the server decides (and reports real errors). A
// Scalar value that would make the meta device raise where the cached one did not is therefore
// reported by the server, at the next wait, instead of at the call.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "aten/shape_rules.h"

namespace rgpu::torchdev {

// One output of a call that does not wait.
struct OutPlan {
  enum Kind : uint8_t {
    kNone,       // the op returned None
    kUndefined,  // the op returned an undefined tensor
    kAliased,    // in-place or out=: the argument `arg`, restrided to sizes/strides if restride
    kView,       // a view of the call's storage number `storage` (CallKey::storages)
    kFresh,      // a new storage of nbytes bytes
    kList,       // a list of kView or kFresh outputs (list), all views or all fresh
  };
  Kind kind = kNone;
  int arg = -1;
  bool restride = false;
  uint32_t storage = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  size_t nbytes = 0;
  std::vector<OutPlan> list;
};

struct Plan {
  bool wait = false;           // the server runs the op and describes the results (call_and_wait)
  std::vector<OutPlan> rets;   // one per return of the schema, when !wait
};

// What the fallback needs to know about an operator, worked out once per operator.
struct OpInfo {
  bool always_wait = false;         // returns something that is not a tensor, or data-dependent
  bool mutates = false;             // writes into an argument, or returns nothing: always sent
  bool keyed_by_scalar_value = false;
  std::vector<bool> scalar_typed;   // per argument: Scalar, Scalar?, Scalar[]
  std::vector<int> aliased;         // per return: the argument it aliases for writing, or -1
  ShapeRule rule = nullptr;         // aten/shape_rules.h, for ops it covers
};
const OpInfo& op_info(const c10::OperatorHandle& op);

// A call's signature, and the distinct rgpu storages of its arguments in order of first
// appearance (what OutPlan::storage indexes). A shape class (symbolic) instead keeps of each
// rgpu tensor its dtype, rank, each size as 0, 1 or more, whether its strides are contiguous,
// dense, and their order, and no storage size: what aten/shape_rules.h checks a rule per.
class CallKey {
 public:
  CallKey(const c10::OperatorHandle& op, const OpInfo& info, const std::vector<c10::IValue>& args,
          bool symbolic = false);
  bool cacheable() const { return ok_; }
  const std::string& bytes() const { return key_; }
  std::vector<c10::Storage>& storages() { return storages_; }
  // The index of s in storages(), appending it if absent.
  uint32_t storage_index(const c10::Storage& s);

 private:
  void value(const c10::IValue& v, bool by_kind, int depth);
  template <class T>
  void put(const T& v) {
    key_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  std::string key_;
  std::vector<c10::Storage> storages_;
  bool ok_ = true;
  bool symbolic_ = false;
};

// The Plan kept for key, or nullptr. Thread-safe.
std::shared_ptr<const Plan> find_plan(const CallKey& key);
void keep_plan(const CallKey& key, std::shared_ptr<const Plan> plan);

// Whether a shape rule agreed with the meta device on a shape class: unknown (not checked yet),
// agreed, or disagreed (the class is left to the meta device).
enum class RuleVerdict : uint8_t { kUnknown, kAgreed, kDisagreed };
RuleVerdict rule_verdict(const CallKey& shape_class);
void set_rule_verdict(const CallKey& shape_class, RuleVerdict v);

// A call of op whose outputs came from a run on the meta device (a miss of find_plan that no
// shape rule covered, or a rule being checked).
void count_meta_run(const c10::OperatorHandle& op);

// Hits and misses since the process started (rgpu.stats()); misses are runs on the meta device.
struct MetaCacheStats {
  uint64_t hits = 0, misses = 0, uncacheable = 0;
};
MetaCacheStats meta_cache_stats();
// The misses by operator ("aten::addmm"), for finding the ops a rule would spare.
std::vector<std::pair<std::string, uint64_t>> meta_misses_by_op();

}  // namespace rgpu::torchdev
