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
//
// What a step does NOT write, because it is not its idea (the plumbing every step shares):
//   - its name: a step's messages say what the limit is ("keeps row indices in 32 bits: …"), and the
//     runner (app/runner.cpp, app/gpu.cu), the C API (app/capi.cpp) and Step::refusal put
//     "step <folder>: " in front of every error they pass on;
//   - the storage-type and head-dim checks and dispatch: the ladder entry's lists (below) are checked
//     by Step::refusal before any launch, and a GPU step's forward()/backward() dispatches over the same
//     named list with steps/launch.cuh:
//         void forward(const Problem& p, const ForwardArgs& a) {
//           dispatch<Fa2D>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
//         }
//   - the capability check: an entry with Arch::sm90a (wgmma, TMA, setmaxnreg…) is refused by
//     Step::refusal on a GPU that is not compute capability 9.0, naming the device's capability.
// What it keeps next to its kernel: launch<T, d>() (grid, block, shared memory) and limits(p), the
// limits of its own indexing and grid (the ladder has checked types, head dims and the GPU already).
//
// Each entry also names its base: the step whose source its own is diffed against (`flashladder diff`,
// the docs' step pages, docs/diff_lines.md). Usually the step before; a step that starts a new branch
// of the ladder names the step it grows from (09b: 09). A step whose source adds a new pass and reuses
// its base's forward (09: the backward, on 08d's forward) is shown whole, as new lines, against it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace fl {

/// Pointers live where the step runs (host memory for CPU steps, device memory for GPU steps) and
/// hold the storage type p.dtype, except L (always fp32). With variable length (p.varlen()) the
/// tensors are packed: Q, O [total_q][H][d], K, V [total_k][H_kv][d], L [H][total_q]
/// (common/problem.hpp; p.q_off/kv_off/lse_off give the offsets in either layout).
struct ForwardArgs {
  const void* q;    // [B][H][Nq][d]
  const void* k;    // [B][H_kv][Nk][d]
  const void* v;    // [B][H_kv][Nk][d]
  void* o;          // [B][H][Nq][d]
  float* lse;       // [B][H][Nq]
  void* workspace;  // workspace_bytes(p) bytes, poisoned with NaN before the call
  void* stream;     // cudaStream_t for GPU steps; unused on the CPU
  // The variants' data (issue 21), null when the problem does not use them:
  const float* alibi_slopes = nullptr;   // [H] or [B][H], fp32, where the step runs (p.alibi)
  const int32_t* cu_seqlens_q = nullptr; // [B + 1] \ device copies of the Problem's vectors (GPU steps;
  const int32_t* cu_seqlens_k = nullptr; // [B + 1]  | host pointers to the same values for CPU steps)
  const int32_t* seqused_k = nullptr;    // [B]     /
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
  // As in ForwardArgs:
  const float* alibi_slopes = nullptr;   // [H] or [B][H], fp32, where the step runs
  const int32_t* cu_seqlens_q = nullptr; // [B + 1]
  const int32_t* cu_seqlens_k = nullptr; // [B + 1]
  const int32_t* seqused_k = nullptr;    // [B]
};

/// The variants a step supports (Step::variants, a bitmask); Step::refusal refuses a problem that
/// uses one the step does not list, naming the steps that do.
enum Variant : unsigned {
  kWindow = 1,    // window_left / window_right
  kSoftcap = 2,   // softcap
  kAlibi = 4,     // ALiBi slopes, [H] and [B][H]
  kVarlen = 8,    // cu_seqlens_q / cu_seqlens_k: the packed layout
  kSeqused = 16,  // seqused_k
};
/// The variants p uses, as Variant bits.
unsigned variants_of(const Problem& p);

struct StepImpl {
  size_t (*workspace_bytes)(const Problem&);
  void (*forward)(const Problem&, const ForwardArgs&);
  std::string (*limits)(const Problem&);                         // may be null
  size_t (*backward_workspace_bytes)(const Problem&);            // null: no backward
  void (*backward)(const Problem&, const BackwardArgs&);         // null: no backward
};

enum class Where { cpu, gpu };

/// What GPU a step's code needs beyond what every GPU step needs (sm_80's mma.sync, cp.async).
enum class Arch {
  any,    // any GPU the build targets
  sm90a,  // Hopper (compute capability 9.0) in sm_90a code: wgmma, TMA, setmaxnreg
};

/// The head dims a step supports, as a compile-time list: the ladder entry lists them (Step::head_dims
/// is D::list()) and the step's launcher dispatches over the same type (steps/launch.cuh), so the two
/// cannot drift. One name per list, used by every step that has it.
template <int... Ds>
struct HeadDims {
  static const std::vector<int64_t>& list() {
    static const std::vector<int64_t> v{Ds...};
    return v;
  }
};
using AnyD = HeadDims<>;                        // the CPU steps: any d
using CudaCoreD = HeadDims<64, 128>;            // 03–07: the two head dims of the FA2 sweep
using Fa2D = HeadDims<32, 64, 96, 128, 256>;    // the head dims FlashAttention-2 ships
using BwdD = HeadDims<32, 64, 96, 128>;         // step 09: d = 256 needs more shared memory than 228 KiB
using WgmmaBwdD = HeadDims<64, 128>;            // step 09b: the head dims of the FA2 sweep
using DecodeD = HeadDims<64, 128>;              // step 10: the decode sweep's (96 needs 08d's other swizzle)
using TmaD = HeadDims<64, 128, 256>;            // 08h, 08i: TMA boxes of 64 columns (the 128-byte swizzle)

struct Step {
  std::string number;               // "01"
  std::string folder;               // "01_cpu_standard"
  std::string change;               // the one idea it adds, one line
  Where where;
  bool backward;                    // the step has a backward pass (dQ, dK, dV)
  std::vector<DType> dtypes;        // storage types it supports
  std::vector<int64_t> head_dims;   // supported d; empty means any d
  const StepImpl* impl;             // null when this build could not compile it (no nvcc)
  std::string base;                 // number of the step its source is diffed against ("" for 01)
  Arch arch = Arch::any;            // Arch::sm90a: refused on a GPU other than compute capability 9.0
  bool deterministic_backward = false;  // its backward honours Problem::deterministic (bitwise runs)
  unsigned variants = 0;            // the Variant bits it supports, forward and backward alike

  bool gpu() const { return where == Where::gpu; }
  bool has_backward() const { return backward && impl && impl->backward; }
  bool supports_dtype(DType t) const;
  bool supports_d(int64_t d) const;
  /// "" when the step can run p; otherwise why not, a message that names the limit and NOT the step
  /// (for a line that already starts with the step's folder: "08e_wgmma: not run: <why_not>").
  /// Checks the problem, the storage type, the head dim, the variants, the build, the GPU's capability (Arch) and
  /// the step's own limits, in that order, before any launch.
  std::string why_not(const Problem& p) const;
  /// "" when the step can run p; otherwise named(why_not(p)): "step <folder>: " and the limit, for an
  /// error that stands alone. Print one or the other, never the folder and refusal() together.
  std::string refusal(const Problem& p) const;
  /// The step named by `base`; null for the first step.
  const Step* base_step() const;
  /// true when the step's source is shown whole against its base (it adds a pass the base does not
  /// have, and reuses the base's forward): step 09 against 08d.
  bool diff_whole() const;
  /// "step <folder>: " + what; what every layer above the steps puts on the errors it passes on.
  std::string named(const std::string& what) const { return "step " + folder + ": " + what; }
  std::string dtypes_text() const;     // "fp16, bf16"
  std::string head_dims_text() const;  // "64, 128" or "any"
};

/// Every step, in ladder order.
const std::vector<Step>& ladder();

/// A step by number ("3", "03"), folder ("03_cuda_naive") or name ("cuda_naive"); null if none.
const Step* find_step(const std::string& name);

}  // namespace fl
