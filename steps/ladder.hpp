// flashladder — steps/ladder.hpp: what a step is, and the one list of steps.
//
// A step is a folder steps/NN_name/ holding one source file (attention.cpp or attention.cu) that
// defines, in namespace fl::sNN, the same four names in every step:
//   workspace_bytes(p)   bytes of scratch memory the forward needs beyond inputs and outputs
//   forward(p, args)     computes O and L
//   limits(p)            "" or why this step cannot run p (beyond types and head dims)
//   impl                 the StepImpl that gathers them
// and (step 09 on) backward_workspace_bytes / backward. The list itself is in steps/ladder.cpp: adding
// a step is one entry there plus its folder. The tests, the benchmark, the README table and the docs
// all read this list.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace fl {

/// Pointers live where the step runs (host memory for CPU steps, device memory for GPU steps) and
/// hold the storage type p.dtype, except L (always fp32).
struct ForwardArgs {
  const void* q;    // [B][H][Nq][d]
  const void* k;    // [B][H_kv][Nk][d]
  const void* v;    // [B][H_kv][Nk][d]
  void* o;          // [B][H][Nq][d]
  float* lse;       // [B][H][Nq]
  void* workspace;  // workspace_bytes(p) bytes, poisoned with NaN before the call
  void* stream;     // cudaStream_t for GPU steps; unused on the CPU
};

struct BackwardArgs {
  const void* q;     // [B][H][Nq][d]
  const void* k;     // [B][H_kv][Nk][d]
  const void* v;     // [B][H_kv][Nk][d]
  const void* o;     // [B][H][Nq][d]   from this step's own forward
  const float* lse;  // [B][H][Nq]      from this step's own forward
  const void* dO;    // [B][H][Nq][d]
  void* dq;          // [B][H][Nq][d]
  void* dk;          // [B][H_kv][Nk][d]
  void* dv;          // [B][H_kv][Nk][d]
  void* workspace;   // backward_workspace_bytes(p) bytes, poisoned with NaN before the call
  void* stream;
};

struct StepImpl {
  size_t (*workspace_bytes)(const Problem&);
  void (*forward)(const Problem&, const ForwardArgs&);
  std::string (*limits)(const Problem&);                         // may be null
  size_t (*backward_workspace_bytes)(const Problem&);            // null: no backward
  void (*backward)(const Problem&, const BackwardArgs&);         // null: no backward
};

enum class Where { cpu, gpu };

struct Step {
  std::string number;               // "01"
  std::string folder;               // "01_cpu_standard"
  std::string change;               // the one idea it adds, one line
  Where where;
  bool backward;                    // the step has a backward pass (dQ, dK, dV)
  std::vector<DType> dtypes;        // storage types it supports
  std::vector<int64_t> head_dims;   // supported d; empty means any d
  const StepImpl* impl;             // null when this build could not compile it (no nvcc)
  bool deterministic_backward = false;  // its backward honours Problem::deterministic (bitwise runs)

  bool gpu() const { return where == Where::gpu; }
  bool has_backward() const { return backward && impl && impl->backward; }
  bool supports_dtype(DType t) const;
  bool supports_d(int64_t d) const;
  /// "" when the step can run p; otherwise a message that names the limit. Checks the problem, the
  /// storage type, the head dim and the step's own limits, in that order, before any launch.
  std::string refusal(const Problem& p) const;
  std::string dtypes_text() const;     // "fp16, bf16"
  std::string head_dims_text() const;  // "64, 128" or "any"
};

/// Every step, in ladder order.
const std::vector<Step>& ladder();

/// A step by number ("3", "03"), folder ("03_cuda_naive") or name ("cuda_naive"); null if none.
const Step* find_step(const std::string& name);

}  // namespace fl
