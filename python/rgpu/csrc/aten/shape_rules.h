// Shape rules: the outputs of common ops worked out in C++ from their inputs' metadata, so a call
// whose exact signature the meta cache has not seen (a sequence one token longer, issue 14 item
// 10) needs no run on the meta device (aten/fallback.cpp, step 1).
//
// A rule covers an op only under conditions where its outputs are known exactly: mostly inputs
// laid out contiguously (strides as c10::contiguous_strides gives them), no elements-less
// tensors, floating dtypes; outside them it declines and the meta device decides, as before. A
// rule is at least as strict as the meta kernel's checks, so a call the meta device would refuse
// is declined, never posted.
//
// Rules are checked against the meta device as they run: the first call of each shape class (the
// signature with sizes reduced to 0, 1 or more, strides to their layout; aten/meta_cache.h,
// CallKey) runs on the meta device too, and a class where the two disagree never uses the rule
// again. verify_all (tests) checks every call instead of one per class.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>
#include <vector>

namespace rgpu::torchdev {

struct Plan;

// Fills plan->rets for the call, or returns false when the rule does not cover it.
using ShapeRule = bool (*)(const std::vector<c10::IValue>& args, Plan* plan);

// The rule for an operator ("aten::add", "Tensor"), or nullptr.
ShapeRule find_shape_rule(const c10::FunctionSchema& schema);

// Whether two plans say the same about every output (kind, dtype, sizes, strides, offset, bytes).
bool same_plan(const Plan& a, const Plan& b);

struct ShapeRuleStats {
  uint64_t used = 0;        // calls planned by a rule alone
  uint64_t checked = 0;     // calls planned by a rule and checked against the meta device
  uint64_t mismatches = 0;  // of those, where the two disagreed (the meta device's plan was used)
};
ShapeRuleStats shape_rule_stats();
void count_shape_rule(bool checked, bool mismatch);
// Check every call planned by a rule against the meta device (tests), or one per shape class.
void set_verify_all(bool on);
bool verify_all();

}  // namespace rgpu::torchdev
