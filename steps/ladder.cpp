// flashladder — steps/ladder.cpp: THE list of steps. One entry per step folder, in ladder order.
#include "steps/ladder.hpp"

#include <limits>
#include <sstream>
#include <utility>

#ifdef FLASHLADDER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

// Each step's source defines fl::sNN::impl. GPU steps' sources are compiled only in builds with
// nvcc; their impl is declared weak, so in a build without CUDA its address is null and the step
// is listed but refused with the reason ("not in this build").
namespace fl::s01 { extern const StepImpl impl; }
namespace fl::s02 { extern const StepImpl impl; }
#define FL_GPU_STEP(ns) namespace fl::ns { extern const StepImpl impl __attribute__((weak)); }
FL_GPU_STEP(s03)
FL_GPU_STEP(s04)
FL_GPU_STEP(s05)
FL_GPU_STEP(s06)
FL_GPU_STEP(s07)
FL_GPU_STEP(s08a)
FL_GPU_STEP(s08b)
FL_GPU_STEP(s08c)
FL_GPU_STEP(s08d)
FL_GPU_STEP(s08e)
FL_GPU_STEP(s08f)
FL_GPU_STEP(s08g)
FL_GPU_STEP(s08h)
FL_GPU_STEP(s08i)
FL_GPU_STEP(s08j)
FL_GPU_STEP(s08k)
FL_GPU_STEP(s09)
FL_GPU_STEP(s09b)
FL_GPU_STEP(s09c)
FL_GPU_STEP(s09d)
FL_GPU_STEP(s09e)
FL_GPU_STEP(s09f)
FL_GPU_STEP(s10)
FL_GPU_STEP(s10b)
#define FL_GPU(x) (&(x))

namespace fl {

namespace {
const std::vector<DType> kCpuTypes = {DType::f32};
const std::vector<DType> kGpuTypes = {DType::f16, DType::bf16};  // steps/launch.cuh dispatches these
// Every variant of issue 21 (window, softcap, ALiBi, varlen, seqused_k): the CPU steps' S changes by
// one line each (docs/variants.md).
constexpr unsigned kAllVariants = kWindow | kSoftcap | kAlibi | kVarlen | kSeqused;
}  // namespace

// An entry: {number, folder, the one idea, Where, backward?, storage types, HeadDims list, impl, base,
// Arch (default any), deterministic backward? (default no), Variant bits (default none)}. The head-dim lists are in steps/ladder.hpp; scripts/fl_results.py reads both.

const std::vector<Step>& ladder() {
  static const std::vector<Step> steps = {
      {"01", "01_cpu_standard",
       "Algorithm 0 with Eigen: S = QKᵀ, P = softmax(S), O = PV, S and P materialised (O(N²) memory)",
       Where::cpu, false, kCpuTypes, AnyD::list(), &s01::impl, "", Arch::any, false, kAllVariants},
      {"02", "02_cpu_online_softmax",
       "one pass over the keys with running max m, running sum ℓ and a rescaled accumulator: no N×N matrix",
       Where::cpu, false, kCpuTypes, AnyD::list(), &s02::impl, "01", Arch::any, false, kAllVariants},
      {"03", "03_cuda_naive",
       "Algorithm 0 on the GPU: three kernels (scores, row softmax, PV), S and P in device memory",
       Where::gpu, false, kGpuTypes, CudaCoreD::list(), FL_GPU(s03::impl), "02"},
      {"04", "04_fa1_tiling",
       "FA1 Algorithm 1: K/V blocks outer, Q blocks inner, O_i, ℓ_i, m_i round-trip device memory; warps split K_j",
       Where::gpu, false, kGpuTypes, CudaCoreD::list(), FL_GPU(s04::impl), "03"},
      {"05", "05_fa2_lse",
       "FA2 Algorithm 1: Q blocks outer so O_i, m_i, ℓ_i stay on chip; un-scaled O, one diag(ℓ)⁻¹; store L only",
       Where::gpu, false, kGpuTypes, CudaCoreD::list(), FL_GPU(s05::impl), "04"},
      {"06", "06_seq_parallel",
       "the Q-block loop becomes the grid: one thread block per (Q block, batch·head)",
       Where::gpu, false, kGpuTypes, CudaCoreD::list(), FL_GPU(s06::impl), "05"},
      {"07", "07_warp_qsplit",
       "warps split Q_i (each owns whole rows) and share K_j, V_j: no cross-warp reduction",
       Where::gpu, false, kGpuTypes, CudaCoreD::list(), FL_GPU(s07::impl), "06"},
      {"08a", "08a_tensor_cores",
       "S_ij = Q_i K_jᵀ and P̃_ij V_j on tensor cores (mma.sync m16n8k16 via ldmatrix), P̃_ij kept in registers",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08a::impl), "07"},
      {"08b", "08b_swizzle",
       "XOR-swizzled shared memory: ldmatrix reads without bank conflicts",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08b::impl), "08a"},
      {"08c", "08c_cp_async",
       "cp.async loads of K_j+1, V_j+1 issued before the math on K_j, V_j (double buffering)",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08c::impl), "08b"},
      {"08d", "08d_exp2_tuned",
       "the exponential as one ex2.approx.ftz, tile shapes tuned per head dim, causal Q blocks longest first",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08d::impl), "08c"},
      {"08e", "08e_wgmma",
       "Hopper's warpgroup MMA (wgmma m64nNk16): the tensor cores read K_j, V_j straight from swizzled shared memory",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08e::impl), "08d", Arch::sm90a},
      {"08f", "08f_wgmma_overlap",
       "wgmma is asynchronous: the softmax of one m-tile runs while the tensor cores multiply the other",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08f::impl), "08e", Arch::sm90a},
      {"08g", "08g_smem_epilogue",
       "O_i leaves through shared memory: whole rows in 16-byte stores instead of 4-byte fragments",
       Where::gpu, false, kGpuTypes, Fa2D::list(), FL_GPU(s08g::impl), "08f", Arch::sm90a},
      {"08h", "08h_tma_warpspec",
       "a producer warp loads K_j, V_j by TMA into an mbarrier-guarded ring; consumer warpgroups only compute (setmaxnreg)",
       Where::gpu, false, kGpuTypes, TmaD::list(), FL_GPU(s08h::impl), "08g", Arch::sm90a},
      {"08i", "08i_pingpong",
       "pingpong: the two consumers take turns on the tensor cores, and inside each P̃_i,j−1 V_j−1 runs under the softmax of S_ij",
       Where::gpu, false, kGpuTypes, TmaD::list(), FL_GPU(s08i::impl), "08h", Arch::sm90a},
      {"08j", "08j_variants",
       "the variants: a sliding window that skips the key blocks outside it, soft-capped logits c·tanh(τS/c), ALiBi biases, "
       "packed variable-length batches",
       Where::gpu, false, kGpuTypes, TmaD::list(), FL_GPU(s08j::impl), "08i", Arch::sm90a, false,
       kWindow | kSoftcap | kAlibi | kVarlen | kSeqused},
      {"08k", "08k_persistent",
       "persistent: one block per SM walks many tiles; the producer loads the next Q_i, K_j, V_j while this tile ends",
       Where::gpu, false, kGpuTypes, TmaD::list(), FL_GPU(s08k::impl), "08j", Arch::sm90a, false,
       kWindow | kSoftcap | kAlibi | kVarlen | kSeqused},
      {"09", "09_backward",
       "FA2 Algorithm 2: D = rowsum(dO∘O); one block per K_j/V_j keeps dK_j, dV_j on chip; dQ by atomicAdd in fp32",
       Where::gpu, true, kGpuTypes, BwdD::list(), FL_GPU(s09::impl), "08d"},
      {"09b", "09b_wgmma",
       "the backward's five products on wgmma: S_ijᵀ = K_j Q_iᵀ puts P_ijᵀ and dS_ijᵀ in registers as A operands",
       Where::gpu, true, kGpuTypes, WgmmaBwdD::list(), FL_GPU(s09b::impl), "09", Arch::sm90a},
      {"09c", "09c_tma_warpspec",
       "the backward with a TMA producer and warp-specialised consumers; dQ added by one bulk reduction per block; a deterministic order",
       Where::gpu, true, kGpuTypes, WgmmaBwdD::list(), FL_GPU(s09c::impl), "09b", Arch::sm90a,
       /*deterministic_backward=*/true},
      {"09d", "09d_variants",
       "the backward through 08j's variants: the window's Q blocks only, ALiBi unchanged, dS_ij ∘ (1 − tanh²) for the softcap, "
       "packed variable-length batches",
       Where::gpu, true, kGpuTypes, WgmmaBwdD::list(), FL_GPU(s09d::impl), "09c", Arch::sm90a,
       /*deterministic_backward=*/true, kWindow | kSoftcap | kAlibi | kVarlen | kSeqused},
      {"09e", "09e_instruction_budget",
       "fewer instructions per wgmma: descriptors from one warp-uniform base in uniform registers, the mask once per "
       "tile instead of at every element",
       Where::gpu, true, kGpuTypes, WgmmaBwdD::list(), FL_GPU(s09e::impl), "09d", Arch::sm90a,
       /*deterministic_backward=*/true, kWindow | kSoftcap | kAlibi | kVarlen | kSeqused},
      {"09f", "09f_dq_writer",
       "the dQ add off the consumers' path: a dQ writer warp takes the bulk adds and the deterministic turns, dQ_s "
       "in one half per consumer, dS double-buffered: the consumers meet once per iteration instead of twice",
       Where::gpu, true, kGpuTypes, WgmmaBwdD::list(), FL_GPU(s09f::impl), "09e", Arch::sm90a,
       /*deterministic_backward=*/true, kWindow | kSoftcap | kAlibi | kVarlen | kSeqused},
      {"10", "10_split_kv",
       "split-KV decoding: the keys split across thread blocks too, partials merged by the logsumexp rule; GQA heads packed into one tile",
       Where::gpu, false, kGpuTypes, DecodeD::list(), FL_GPU(s10::impl), "08d", Arch::any, false,
       kWindow | kSeqused},
      {"10b", "10b_cluster_merge",
       "the splits of a tile are one thread-block cluster: the partials stay in shared memory and the cluster merges them "
       "through distributed shared memory, with no second kernel and no workspace (step 10's kernels where the clusters "
       "cannot read as fast as the memory)",
       Where::gpu, false, kGpuTypes, DecodeD::list(), FL_GPU(s10b::impl), "10", Arch::sm90a, false,
       kWindow | kSeqused},
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

const Step* Step::base_step() const { return base.empty() ? nullptr : find_step(base); }

bool Step::diff_whole() const {
  const Step* b = base_step();
  return b && backward && !b->backward;
}

namespace {
// "" when this GPU can run code built for `arch`, or no GPU can be asked (the runner reports a
// missing device itself, with its own reason); otherwise why not, naming the device's capability.
std::string arch_refusal(Arch arch) {
  if (arch == Arch::any) return "";
#ifdef FLASHLADDER_HAVE_CUDA
  int dev = 0, major = 0, minor = 0;
  const bool known = cudaGetDevice(&dev) == cudaSuccess &&
                     cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                     cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
  cudaGetLastError();  // a failed query (no device) is the runner's to report, not this check's
  if (known && (major != 9 || minor != 0))
    return "it uses sm_90a instructions (wgmma), which only Hopper GPUs (compute capability 9.0, built for "
           "sm_90a) have; this GPU is " + std::to_string(major) + "." + std::to_string(minor);
#endif
  return "";
}
}  // namespace

unsigned variants_of(const Problem& p) {
  unsigned v = 0;
  if (p.windowed()) v |= kWindow;
  if (p.softcap) v |= kSoftcap;
  if (p.alibi != Alibi::none) v |= kAlibi;
  if (p.varlen()) v |= kVarlen;
  if (!p.seqused_k.empty()) v |= kSeqused;
  return v;
}

namespace {
// What a variant bit is, in words, with the problem's value of it.
std::string variant_text(unsigned bit, const Problem& p) {
  std::ostringstream s;
  switch (bit) {
    case kWindow: s << "sliding window (window_left=" << p.window_left << ", window_right=" << p.window_right << ")"; break;
    case kSoftcap: s << "softcap (softcap=" << (p.softcap ? *p.softcap : 0.0) << ")"; break;
    case kAlibi: s << "ALiBi (alibi=" << alibi_name(p.alibi) << ")"; break;
    case kVarlen: s << "variable length (cu_seqlens_q, cu_seqlens_k: " << p.B << " packed sequences)"; break;
    case kSeqused: s << "per-sequence key lengths (seqused_k)"; break;
  }
  return s.str();
}
}  // namespace

std::string Step::why_not(const Problem& p) const {
  std::string why = p.invalid_reason();
  if (!why.empty()) return "invalid problem: " + why;
  // Every step takes the scale and the softcap in fp32 (the oracle, in double, takes more): 1e39 became
  // inf there (a softcap's outputs all NaN, and `run` exited 0), 1e-46 became 0.
  auto fp32_normal = [](double x) {
    return x >= double(std::numeric_limits<float>::min()) && x <= double(std::numeric_limits<float>::max());
  };
  for (auto [name, x] : {std::pair{"softmax scale", p.scale}, std::pair{"softcap", p.softcap}})
    if (x && !fp32_normal(*x)) {
      std::ostringstream s;
      s << "takes the " << name << " in fp32, which holds 1.18e-38 to 3.4e38, not " << *x;
      return s.str();
    }
  if (!supports_dtype(p.dtype))
    return std::string("does not support storage type ") + dtype_name(p.dtype) + "; it supports " + dtypes_text();
  if (!supports_d(p.d))
    return "does not support head dim d = " + std::to_string(p.d) + "; it supports d in {" + head_dims_text() + "}";
  const unsigned missing = variants_of(p) & ~variants;
  for (unsigned bit : {kWindow, kSoftcap, kAlibi, kVarlen, kSeqused}) {
    if (!(missing & bit)) continue;
    std::string who;
    for (const Step& s : ladder())
      if (s.variants & bit) who += (who.empty() ? "" : ", ") + s.folder;
    return "does not support " + variant_text(bit, p) + "; " +
           (who.empty() ? std::string("no step of the ladder supports it yet") : "the steps that do: " + who);
  }
  if (!impl) {
#ifdef FLASHLADDER_HAVE_CUDA
    return "is not in this build: its source steps/" + folder + "/attention.cu was not compiled";
#else
    return "is not in this build: it needs CUDA (nvcc was not found when the build was configured)";
#endif
  }
  why = arch_refusal(arch);
  if (why.empty() && impl->limits) why = impl->limits(p);
  return why;
}

std::string Step::refusal(const Problem& p) const {
  const std::string why = why_not(p);
  return why.empty() ? "" : named(why);
}

}  // namespace fl
