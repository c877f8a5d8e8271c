// flashladder — app/cases.hpp: the ragged shape matrix of ../shared/design/ladder.md.
//
// Nq, Nk ∈ {1, 17, 97, 128, 1025} (every pair, so Nq ≠ Nk both ways), causal on and off, B = 3,
// H = 9 with H_kv cycling through {9, 3, 1}, inputs with a non-zero mean, plus large-logit cases
// (Q × 20). Each step runs every case at one of its head dims and storage types, cycling through
// them so that every supported (d, type) is covered; none of these sizes is a multiple of a tile
// except 128, on purpose.
#pragma once

#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/tensor.hpp"
#include "steps/ladder.hpp"

namespace fl::test {

struct Case {
  int index;
  int64_t Nq, Nk, H_kv;
  bool causal;
  double q_scale;  // 20: large logits
};

inline std::vector<Case> ragged_cases() {
  const int64_t Ns[] = {1, 17, 97, 128, 1025};
  const int64_t Hkv[] = {9, 3, 1};
  std::vector<Case> out;
  int k = 0;
  for (int64_t nq : Ns)
    for (int64_t nk : Ns)
      for (bool causal : {false, true}) {
        out.push_back({k, nq, nk, Hkv[k % 3], causal, 1.0});
        ++k;
      }
  // Large logits: only a softmax that subtracts the running max survives these.
  for (auto [nq, nk, causal] : {std::tuple{97L, 1025L, true}, std::tuple{1025L, 97L, false},
                                std::tuple{128L, 128L, false}, std::tuple{17L, 1L, false}}) {
    out.push_back({k, nq, nk, Hkv[k % 3], causal, 20.0});
    ++k;
  }
  return out;
}

/// The problem a step runs for a case: its k-th (d, storage type) in turn.
inline Problem problem_for(const Case& c, const Step& s) {
  static const std::vector<int64_t> cpu_dims = {59, 64, 128};  // any d: one that divides nothing
  const std::vector<int64_t>& dims = s.head_dims.empty() ? cpu_dims : s.head_dims;
  Problem p;
  p.B = 3;
  p.H = 9;
  p.H_kv = c.H_kv;
  p.Nq = c.Nq;
  p.Nk = c.Nk;
  p.causal = c.causal;
  p.d = dims[size_t(c.index) % dims.size()];
  p.dtype = s.dtypes[size_t(c.index / int(dims.size())) % s.dtypes.size()];
  return p;
}

inline std::string case_name(const Case& c, const Step& s) {
  Problem p = problem_for(c, s);
  return s.folder + "_Nq" + std::to_string(p.Nq) + "_Nk" + std::to_string(p.Nk) + (p.causal ? "_causal" : "_full") +
         "_Hkv" + std::to_string(p.H_kv) + "_d" + std::to_string(p.d) + "_" + dtype_name(p.dtype) +
         (c.q_scale != 1.0 ? "_largelogit" : "");
}

/// Readable test parameters in gtest's output (instead of a byte dump).
inline void PrintTo(const Case& c, std::ostream* os) {
  *os << "Nq=" << c.Nq << " Nk=" << c.Nk << " H_kv=" << c.H_kv << (c.causal ? " causal" : "") << " q_scale=" << c.q_scale;
}

}  // namespace fl::test

namespace fl {
inline void PrintTo(const Step* s, std::ostream* os) { *os << (s ? s->folder : "null"); }
}  // namespace fl
