// flashladder — steps/ladder.cpp: THE list of steps. One entry per step folder, in ladder order.
#include "steps/ladder.hpp"

#include <sstream>

// Each step's source defines fl::sNN::impl. GPU steps exist only in builds with nvcc.
namespace fl::s01 { extern const StepImpl impl; }
namespace fl::s02 { extern const StepImpl impl; }
#ifdef FLASHLADDER_HAVE_CUDA
namespace fl::s03 { extern const StepImpl impl; }
namespace fl::s04 { extern const StepImpl impl; }
namespace fl::s05 { extern const StepImpl impl; }
namespace fl::s06 { extern const StepImpl impl; }
namespace fl::s07 { extern const StepImpl impl; }
#define FL_GPU(x) (&(x))
#else
#define FL_GPU(x) nullptr
#endif

namespace fl {

namespace {
const std::vector<DType> kCpuTypes = {DType::f32};
const std::vector<DType> kGpuTypes = {DType::f16, DType::bf16};
const std::vector<int64_t> kAnyD = {};
const std::vector<int64_t> kCudaCoreD = {64, 128};
}  // namespace

const std::vector<Step>& ladder() {
  static const std::vector<Step> steps = {
      {"01", "01_cpu_standard",
       "Algorithm 0 with Eigen: S = QKᵀ, P = softmax(S), O = PV, S and P materialised (O(N²) memory)",
       Where::cpu, false, kCpuTypes, kAnyD, &s01::impl},
      {"02", "02_cpu_online_softmax",
       "one pass over the keys with running max m, running sum ℓ and a rescaled accumulator: no N×N matrix",
       Where::cpu, false, kCpuTypes, kAnyD, &s02::impl},
      {"03", "03_cuda_naive",
       "Algorithm 0 on the GPU: three kernels (scores, row softmax, PV), S and P in device memory",
       Where::gpu, false, kGpuTypes, kCudaCoreD, FL_GPU(s03::impl)},
      {"04", "04_fa1_tiling",
       "FA1 Algorithm 1: K/V blocks outer, Q blocks inner, O_i, ℓ_i, m_i round-trip device memory; warps split K_j",
       Where::gpu, false, kGpuTypes, kCudaCoreD, FL_GPU(s04::impl)},
      {"05", "05_fa2_lse",
       "FA2 Algorithm 1: Q blocks outer so O_i, m_i, ℓ_i stay on chip; un-scaled O, one diag(ℓ)⁻¹; store L only",
       Where::gpu, false, kGpuTypes, kCudaCoreD, FL_GPU(s05::impl)},
      {"06", "06_seq_parallel",
       "the Q-block loop becomes the grid: one thread block per (Q block, batch·head)",
       Where::gpu, false, kGpuTypes, kCudaCoreD, FL_GPU(s06::impl)},
      {"07", "07_warp_qsplit",
       "warps split Q_i (each owns whole rows) and share K_j, V_j: no cross-warp reduction",
       Where::gpu, false, kGpuTypes, kCudaCoreD, FL_GPU(s07::impl)},
  };
  return steps;
}

const Step* find_step(const std::string& name) {
  for (const Step& s : ladder()) {
    if (name == s.number || name == s.folder || name == s.folder.substr(3)) return &s;
    if (name.size() == 1 && ("0" + name) == s.number) return &s;
  }
  return nullptr;
}

bool Step::supports_dtype(DType t) const {
  for (DType x : dtypes)
    if (x == t) return true;
  return false;
}

bool Step::supports_d(int64_t d) const {
  if (head_dims.empty()) return true;
  for (int64_t x : head_dims)
    if (x == d) return true;
  return false;
}

std::string Step::dtypes_text() const {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

std::string Step::head_dims_text() const {
  if (head_dims.empty()) return "any";
  std::string s;
  for (int64_t d : head_dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

std::string Step::refusal(const Problem& p) const {
  std::string why = p.invalid_reason();
  if (!why.empty()) return "invalid problem: " + why;
  if (!supports_dtype(p.dtype))
    return "step " + folder + " does not support storage type " + dtype_name(p.dtype) +
           "; it supports " + dtypes_text();
  if (!supports_d(p.d))
    return "step " + folder + " does not support head dim d = " + std::to_string(p.d) +
           "; it supports d in {" + head_dims_text() + "}";
  if (!impl) return "step " + folder + " is not in this build: it needs CUDA (nvcc was not found when the build was configured)";
  if (impl->limits) return impl->limits(p);
  return "";
}

}  // namespace fl
