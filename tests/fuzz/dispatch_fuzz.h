// What tests/fuzz/dispatch_fuzz.cpp shows of itself to dispatch_fuzz_ops_test.cpp, which checks
// that it feeds every op the server accepts.
#pragma once

#include <cstdint>
#include <vector>

namespace rgpu::server {

struct DispatchFuzzCount {
  uint64_t inputs = 0;   // inputs run through the op's handler
  uint64_t decoded = 0;  // of those, how many the handler took as well-formed (it answered)
};
// The op an input's first two bytes pick: v itself when find_handler accepts it, else one of
// the ops it accepts.
uint16_t dispatch_fuzz_op(uint16_t v);
// Counts by op (index: op id) since the process started.
const std::vector<DispatchFuzzCount>& dispatch_fuzz_counts();

}  // namespace rgpu::server
