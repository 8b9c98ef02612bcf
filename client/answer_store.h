// Answers kept across runs: what the GPU says about a kernel (its attributes, occupancy, cluster
// occupancy) does not change from one run of a program to the next, so a second run asks none of
// it again (docs/design.md §3: what never changes is asked once). PyTorch's start-up asked 73 such
// questions at 30 ms on the H200 (2.2 s), every run.
//
// A key names the question completely: the GPU (UUID) and driver version, the kernel by its
// image's SHA-256 and its name, the attributes the program had set on that kernel before asking
// (client/driver/cached_answers.cpp), and the question's own arguments. Answers are lines
// "key<TAB>value" in one file, $XDG_CACHE_HOME/rgpu/answers.txt or ~/.cache/rgpu/answers.txt
// (RGPU_ANSWER_CACHE=PATH another file, =none off), read once per process and appended to as the
// server answers; a line that does not parse is ignored, and a file past kMaxFileBytes starts
// over.
#pragma once

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

namespace rgpu::client::answer_store {

constexpr size_t kMaxFileBytes = 32u << 20;

// Whether answers are kept at all (RGPU_ANSWER_CACHE is not "none" and a file could be named).
bool enabled();
// The stored answer of `key`, if any.
bool lookup(const std::string& key, std::string* value);
// Keeps an answer (in this process at once, in the file with one append). Keys and values hold
// no tab or newline.
void store(const std::string& key, const std::string& value);

// Parses the stored form of a list of pairs, "a<sep>b," repeated, each number in [lo, hi];
// false on anything else (the caller asks again).
bool parse_pairs(const std::string& text, char sep, long long lo, long long hi,
                 std::vector<std::pair<long long, long long>>* out);
// What names a device across runs in keys: "<server GPU's UUID in hex>/<driver version>", for a
// client device ordinal (-1: the current context's device); "" when unknown.
std::string device_tag(CUdevice dev);

}  // namespace rgpu::client::answer_store
