// flashladder — steps/11_ring_attention/ring.cu: step 11, ring attention across GPUs on NCCL.
//
// One process per GPU ("rank"), each holding its slots of Q, K, V, O, L (plan.hpp says which part of
// the sequence). The local attention is a ladder step called through its StepImpl (08i_pingpong, or
// 08j_variants where a pair uses seqused_k, forward and 09f_dq_writer backward on Hopper): this step
// adds the ring and the merge, nothing else. A "pair" (plan.hpp) is one query slot against the keys it
// sees of the K, V in hand: one launch of the local step.
//
// Forward, ring step s = 0 … G − 1 (two streams: compute `cs` and transfer `xs`, events between them):
//   xs: one NCCL group: send the K|V in hand (origin r − s) to rank r + 1, receive origin r − s − 1 from
//       rank r − 1 into the other travel buffer (double buffering; not after the last step)
//   cs: wait for the K|V of step s; for each pair of the step (one per query slot at most), the local step
//       writes a partial (O_s, L_s) and a merge kernel folds it into the running (O, L): the same
//       logsumexp rule as online softmax (step 02 per key, 05 per block, 10 per thread block; here per
//       GPU):  L' = m + log(e^{L−m} + e^{L_s−m}),  O' = e^{L−L'} O + e^{L_s−L'} O_s,  m = max(L, L_s).
//   The transfer of step s runs while step s computes; it waits only for step s − 1's compute, which
//   read the buffer it receives into.
// Backward: the global O and L of the forward go in; each pair runs the local backward step with them,
// and that is exactly this pair's share of the gradients: with the global L the step's
// P_ij = exp(S_ij − L_i) are the global probabilities of these keys, its D_i = rowsum(dO_i ∘ O_i) is
// the global D, and dV_j = Σ_i P_ijᵀ dO_i, dS = P ∘ (dP − D), dQ_i = τ Σ_j dS_ij K_j, dK_j = τ Σ_i dS_ijᵀ Q_i
// are sums over the pairs. dQ stays on its rank (fp32 sum of the pairs); dK, dV travel the ring beside
// K, V as fp32 sums, in the order "own keys last" (plan.hpp's Phase): a rank computes part of its own
// pairs first, beside the first K|V transfer, and the rest last, beside the final hop that brings its
// own sum home, so that hop is no longer a transfer with nothing beside it. The step's partials come in
// the storage type (its interface has no fp32 outputs); they are added in fp32 and rounded once at the end.
#include "steps/11_ring_attention/ring.hpp"

#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/cuda.cuh"
#include "steps/device/math.cuh"
#include "steps/ladder.hpp"

namespace fl::ring {

static_assert(NCCL_UNIQUE_ID_BYTES == kUniqueIdBytes, "ring.hpp's kUniqueIdBytes must match nccl.h");

namespace {

// Every NCCL call goes through this: the call, the place, NCCL's message and its last error text.
void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  throw Error(std::string("NCCL error in ") + call + " at " + file + ":" + std::to_string(line) + ": " +
              ncclGetErrorString(r) + (last && *last ? std::string(" (") + last + ")" : std::string()));
}
#define FL_NCCL(call) nccl_check((call), #call, __FILE__, __LINE__)

// ==== Kernels: the merge, fp32 sums, conversions ===================================================
constexpr int kRowsPerBlock = 8;  // warp-per-row kernels: 8 warps of 256 threads

unsigned row_blocks(int64_t rows) { return unsigned(std::clamp<int64_t>(ceil_div<int64_t>(rows, kRowsPerBlock), 1, 1 << 16)); }
unsigned elem_blocks(int64_t n) { return unsigned(std::clamp<int64_t>(ceil_div<int64_t>(n, 256), 1, 1 << 16)); }

// One warp per row of a query slot. Merges into the running state (acc [rows][d] fp32, normalised; L
// [rows] fp32, −∞ while the row has seen no key) one or two partials (O_1, L_1), (O_2, L_2) of pairs
// ([rows][d] storage type, [rows] fp32). has_acc = 0: there is no running state yet (it may hold NaN
// poison and is not read). last = 1: the result goes, rounded once, to the output O (storage type) and
// L in the ladder's convention, instead of back into acc. Two partials at a time halve the passes over
// the fp32 state (a merge is a memory-bound pass; at N = 32768 on 2 GPUs one pass costs ~1% of a
// rank's forward).
template <class T>
__global__ void merge_kernel(float* __restrict__ acc, float* __restrict__ L, const T* __restrict__ O_1,
                             const float* __restrict__ L_1, const T* __restrict__ O_2, const float* __restrict__ L_2,
                             T* __restrict__ O, int64_t rows, int d, int has_acc, int last) {
  const int lane = threadIdx.x % 32;
  // The steps write L = +∞ for a row that saw no key (so that the backward's exp(S − L) is 0). In a
  // sum of exponentials such a partial contributes nothing, which is logsumexp −∞: read it so here,
  // and give +∞ back in the output.
  auto lse_of = [](float l) { return l == INFINITY ? -INFINITY : l; };
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const float la = has_acc ? L[row] : -INFINITY;
    const float l1 = lse_of(L_1[row]), l2 = O_2 ? lse_of(L_2[row]) : -INFINITY;
    const float m = fmaxf(la, fmaxf(l1, l2));
    __syncwarp();  // every lane has read L[row] before lane 0 writes it below
    float* a = acc + row * d;
    const T* o1 = O_1 + row * d;
    const T* o2 = O_2 ? O_2 + row * d : nullptr;
    if (m == -INFINITY) {  // no part saw a key: O = 0; L = −∞ while running, +∞ in the output
      for (int c = lane; c < d; c += 32) {
        if (last) O[row * d + c] = from_float<T>(0.f);
        else a[c] = 0.f;
      }
      if (lane == 0) L[row] = last ? INFINITY : -INFINITY;
      continue;
    }
    // L' = m + log Σ_k e^{L_k − m};  O' = Σ_k e^{L_k − L'} O_k
    const float wa = has_acc ? expf(la - m) : 0.f, w1 = expf(l1 - m), w2 = o2 ? expf(l2 - m) : 0.f;
    const float sum = wa + w1 + w2, inv = 1.f / sum;
    for (int c = lane; c < d; c += 32) {
      float v = w1 * to_float(o1[c]);
      if (o2) v += w2 * to_float(o2[c]);
      if (has_acc) v += wa * a[c];
      v *= inv;
      if (last) O[row * d + c] = from_float<T>(v);
      else a[c] = v;
    }
    if (lane == 0) L[row] = m + logf(sum);
  }
}

// acc (fp32) [+]= part_1 + part_2: one or two pairs' dQ, dK or dV (storage type) into an fp32 sum, one
// warp per row of d values. The tensors are `heads` blocks of `rows` rows; a pair that used only the
// first u rows of each head (seqused_k: dK, dV of a pair on the first key slot) is read on those rows
// alone (the step wrote zeros past them: skipping the read saves a pass over them). With out set, the
// sum goes, rounded once, to out (storage type) instead of back into acc (then acc may be null when
// has_acc = 0). part_2 may be null.
template <class T>
__global__ void sum_kernel(float* __restrict__ acc, const T* __restrict__ part_1, int64_t u_1,
                           const T* __restrict__ part_2, int64_t u_2, T* __restrict__ out, int64_t heads,
                           int64_t rows, int d, int has_acc) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; row < heads * rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t in_head = row % rows;
    const bool r1 = in_head < u_1, r2 = part_2 && in_head < u_2;
    if (!out && has_acc && !r1 && !r2) continue;  // the sum stays as it is
    for (int c = lane; c < d; c += 32) {
      const int64_t x = row * d + c;
      float v = r1 ? to_float(part_1[x]) : 0.f;
      if (r2) v += to_float(part_2[x]);
      if (has_acc) v += acc[x];
      if (out) out[x] = from_float<T>(v);
      else acc[x] = v;
    }
  }
}

__global__ void fill_kernel(float* __restrict__ x, int64_t n, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

// Inputs for timing-only runs (no host copy, no check): mean + uniform noise of standard deviation 1
// from a hash of the index, so that a 131072-long problem needs no host-side generation.
template <class T>
__global__ void random_kernel(T* __restrict__ x, int64_t n, uint64_t seed, float mean) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + uint64_t(i);  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    x[i] = from_float<T>(mean + (u - 0.5f) * 3.4641016f);   // √12 · (u − ½): variance 1
  }
}

// ==== One rank ====================================================================================
const Step* pick_step(const std::string& name, bool backward, const std::vector<Problem>& probs, int rank) {
  auto refusal = [&](const Step& s) {
    if (backward && !s.has_backward()) return "step " + s.folder + " has no backward pass";
    for (const Problem& q : probs) {
      std::string why = s.refusal(q);
      if (!why.empty()) return why + " (a pair of the ring: " + q.describe() + ")";
    }
    return std::string();
  };
  if (!name.empty()) {
    const Step* s = find_step(name);
    if (!s) throw Error("rank " + std::to_string(rank) + ": unknown step '" + name + "'");
    if (!s->gpu()) throw Error("rank " + std::to_string(rank) + ": step " + s->folder + " runs on the CPU");
    const std::string why = refusal(*s);
    if (!why.empty()) throw Error("rank " + std::to_string(rank) + ": " + why);
    return s;
  }
  // The ladder's last rungs for long sequences, newest first: on Hopper 08i (forward) and 09f (backward),
  // elsewhere the last ones that accept every pair. Zigzag's pairs on a first key slot use seqused_k,
  // which 08i refuses: then 08j. (Step 10, split-KV, is a decode step for short Nq.)
  // Not 08k: a persistent kernel holds every SM for the whole launch, so NCCL's send/recv kernel on the
  // transfer stream would wait for the product instead of running under it. (08j's plain kernel is 08i.)
  // Then any other GPU step, from the end of the list.
  const std::vector<std::string> preferred =
      backward ? std::vector<std::string>{"09f_dq_writer", "09e_instruction_budget", "09c_tma_warpspec", "09b_wgmma", "09_backward"}
               : std::vector<std::string>{"08i_pingpong", "08j_variants", "08h_tma_warpspec", "08g_smem_epilogue", "08d_exp2_tuned"};
  std::vector<const Step*> order;
  for (const std::string& f : preferred)
    if (const Step* s = find_step(f)) order.push_back(s);
  const auto& L = ladder();
  for (auto it = L.rbegin(); it != L.rend(); ++it)
    if (it->gpu() && (backward ? it->has_backward() : !it->backward) &&
        std::find(order.begin(), order.end(), &*it) == order.end())
      order.push_back(&*it);
  std::string whys;
  for (const Step* s : order) {
    const std::string why = refusal(*s);
    if (why.empty()) return s;
    whys += "\n  " + why;
  }
  throw Error("rank " + std::to_string(rank) + ": no " + (backward ? "backward" : "forward") +
              " step of the ladder accepts the pairs of this ring:" + whys);
}

struct Rank {
  const RankConfig& cfg;
  const Plan& P;
  const int r, G, S;  // rank, ranks, slots per rank
  const size_t e;     // bytes per element of the storage type
  const Step* fs = nullptr;
  const Step* bs = nullptr;
  cudaStream_t cs = nullptr, xs = nullptr;  // compute, transfer
  ncclComm_t comm = nullptr;
  int64_t max_kv = 0;  // the largest share of K over ranks (travel buffers are sized for it)
  std::vector<bool> direct_q;  // a query slot with exactly one pair in the whole ring is written by the step itself
  bool direct_kv = false;      // so are dK, dV when the whole ring has one pair (a ring of one, contiguous)
  std::vector<int> pairs_q;    // pairs of each query slot over the whole ring
  std::vector<Phase> bphases;            // the backward's order (plan.hpp: own keys last)
  // Forward: Q slots; home K|V (this rank's own, never overwritten); travel K|V ×2; O, L; the running
  // O in fp32; per query slot two pairs' partials (O_s, L_s) waiting to be merged; the step's workspace;
  // seqused_k of the pairs on the first key slot ([G][B] int32: origin o's first slot, B times).
  DeviceBuffer q, home, travel[2], o, lse, acc, po[2][2], pl[2][2], fws, used;
  // Backward: dO; dQ, dK, dV; dQ's fp32 sum; dK|dV fp32 sums travelling the ring ×2; per query slot
  // two pairs' dQ_s, and a phase's (at most two) pairs' dK_s, dV_s, waiting to be summed; part A's
  // dK_s, dV_s, waiting for the end (G > 1); the step's workspace; a float for the barrier. A pair's
  // dK_s, dV_s cover its origin's whole K: [B][H_kv][rows][d].
  DeviceBuffer dO, dq, dk, dv, dq_acc, dkv[2], pq[2][2], pk[2], pv[2], pa_k, pa_v, bws, sync;
  std::vector<cudaEvent_t> comp_begin, comp_end, comm_begin, comm_end;
  cudaEvent_t ev_start = nullptr, ev_end = nullptr;

  Rank(const RankConfig& c, int rank)
      : cfg(c), P(c.plan), r(rank), G(c.plan.G), S(c.plan.slots()), e(size_t(dtype_bytes(c.plan.p.dtype))) {}

  ~Rank() {
    for (auto* v : {&comp_begin, &comp_end, &comm_begin, &comm_end})
      for (cudaEvent_t ev : *v) cudaEventDestroy(ev);
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_end) cudaEventDestroy(ev_end);
    if (cs) cudaStreamDestroy(cs);
    if (xs) cudaStreamDestroy(xs);
  }

  int next() const { return (r + 1) % G; }
  int prev() const { return (r + G - 1) % G; }
  template <class B>
  char* at(B& b, int64_t elems, size_t bytes_per_elem) { return b.template as<char>() + size_t(elems) * bytes_per_elem; }
  char* kv_at(char* base, int origin, bool v) const {  // K or V in a K|V buffer of `origin`
    return base + e * size_t(v ? P.kv_elems(origin) : 0);
  }
  // A pair's seqused_k on the device, or null when it uses every key row in hand.
  const int32_t* used_of(const Problem& pp, int origin) const {
    return pp.seqused_k.empty() ? nullptr : used.as<int32_t>() + int64_t(origin) * P.p.B;
  }

  void alloc(DeviceBuffer& b, size_t bytes, const char* what) {
    try {
      b.allocate(bytes);
    } catch (const Error& x) {
      throw Error(std::string("cudaMalloc of ") + what + ": " + x.what());
    }
  }

  void setup() {
    const Problem& p = P.p;
    for (int k = 0; k < G; ++k) max_kv = std::max(max_kv, P.kv_elems(k));
    // Every pair problem this rank will run: the steps' refusals are checked on all of them first.
    std::vector<Problem> probs;
    pairs_q.assign(size_t(S), 0);
    for (int s = 0; s < G; ++s)
      for (const Pair& x : P.pairs(r, s)) {
        probs.push_back(P.pair_problem(x));
        ++pairs_q[size_t(x.q_slot)];
      }
    for (int i = 0; i < S; ++i) direct_q.push_back(pairs_q[size_t(i)] == 1);
    direct_kv = G == 1 && probs.size() == 1;  // dK, dV of G > 1 always cross the ring
    bphases = P.backward_phases(r);
    fs = pick_step(cfg.fwd_step, false, probs, r);
    if (cfg.backward) bs = pick_step(cfg.bwd_step, true, probs, r);
    size_t fw = 0, bw = 0;
    for (const Problem& x : probs) {
      fw = std::max(fw, fs->impl->workspace_bytes(x));
      if (bs) bw = std::max(bw, bs->impl->backward_workspace_bytes(x));
    }
    const int64_t qn = P.q_elems(r), ln = P.lse_elems(r), kn = P.kv_elems(r);
    const int64_t chunk_q = p.B * p.H * P.max_chunk() * p.d, chunk_l = p.B * p.H * P.max_chunk();
    alloc(q, e * qn, "Q");
    alloc(home, 2 * e * kn, "K|V");
    if (G > 1) {
      alloc(travel[0], 2 * e * max_kv, "the first travelling K|V");
      alloc(travel[1], 2 * e * max_kv, "the second travelling K|V");
    }
    alloc(o, e * qn, "O");
    alloc(lse, 4 * ln, "L");
    alloc(acc, 4 * qn, "the running O (fp32)");
    for (int i = 0; i < S; ++i)
      for (int k = 0; k < 2; ++k) {
        alloc(po[i][k], e * chunk_q, "a pair's O_s");
        alloc(pl[i][k], 4 * chunk_l, "a pair's L_s");
      }
    alloc(fws, fw, "the forward step's workspace");
    {
      std::vector<int32_t> u;  // origin o's first slot, B times
      for (int k = 0; k < G; ++k) u.insert(u.end(), size_t(p.B), int32_t(P.len[size_t(P.chunk_of(k, 0))]));
      alloc(used, 4 * u.size(), "seqused_k of the pairs on a first key slot");
      FL_CUDA(cudaMemcpy(used.get(), u.data(), 4 * u.size(), cudaMemcpyHostToDevice));
    }
    if (cfg.backward) {
      alloc(dO, e * qn, "dO");
      alloc(dq, e * qn, "dQ");
      alloc(dk, e * kn, "dK");
      alloc(dv, e * kn, "dV");
      alloc(dq_acc, 4 * qn, "dQ's fp32 sum");
      if (G > 1) {  // a ring of one sums its dK, dV straight into the outputs
        alloc(dkv[0], 8 * max_kv, "the first travelling dK|dV (fp32)");
        alloc(dkv[1], 8 * max_kv, "the second travelling dK|dV (fp32)");
      }
      for (int i = 0; i < S; ++i)
        for (int k = 0; k < 2; ++k) alloc(pq[i][k], e * chunk_q, "a pair's dQ_s");
      if (!direct_kv)
        for (int k = 0; k < S; ++k) {  // a phase has at most one pair per query slot
          alloc(pk[k], e * max_kv, "a pair's dK_s");
          alloc(pv[k], e * max_kv, "a pair's dV_s");
        }
      if (G > 1) {
        alloc(pa_k, e * max_kv, "part A's dK_s");
        alloc(pa_v, e * max_kv, "part A's dV_s");
      }
      alloc(bws, bw, "the backward step's workspace");
    }
    alloc(sync, 4, "the barrier's float");
    FL_CUDA(cudaMemset(sync.get(), 0, 4));
    FL_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    // The transfer stream at the highest priority: the attention kernels launch more thread blocks than
    // the GPU holds at once, and NCCL's send/recv blocks should take the next free SMs rather than wait
    // behind the rest of a 1000-block grid (the transfer would then start late and not hide).
    int least = 0, greatest = 0;
    FL_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    FL_CUDA(cudaStreamCreateWithPriority(&xs, cudaStreamNonBlocking, greatest));
    for (auto* v : {&comp_begin, &comp_end, &comm_begin, &comm_end}) {
      v->assign(size_t(G + 1), nullptr);
      for (cudaEvent_t& ev : *v) FL_CUDA(cudaEventCreate(&ev));
    }
    FL_CUDA(cudaEventCreate(&ev_start));
    FL_CUDA(cudaEventCreate(&ev_end));
    FL_CUDA(cudaDeviceSynchronize());  // the memset above ran on the legacy stream; cs and xs do not wait for it
  }

  // ---- Inputs: this rank's rows of the whole problem, slot by slot --------------------------------
  // gather: rows [start, start + len) of every (b, head) of a [B][heads][N][d] host tensor, appended
  // as a slot [B][heads][len][d]; scatter: a slot back into its rows of the whole tensor.
  void gather(const std::vector<float>& full, int64_t heads, int chunk, std::vector<float>& out) const {
    const Problem& p = P.p;
    const int64_t st = P.start[size_t(chunk)], n = P.len[size_t(chunk)];
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const float* src = full.data() + ((b * heads + h) * p.Nq + st) * p.d;
        out.insert(out.end(), src, src + n * p.d);
      }
  }
  void scatter(const std::vector<float>& slot, int64_t heads, int chunk, float* full) const {
    const Problem& p = P.p;
    const int64_t st = P.start[size_t(chunk)], n = P.len[size_t(chunk)], w = heads == -1 ? 1 : p.d;
    const int64_t hh = heads == -1 ? p.H : heads;  // heads = −1: L, one value per row
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < hh; ++h)
        std::memcpy(full + ((b * hh + h) * p.Nq + st) * w, slot.data() + (b * hh + h) * n * w, sizeof(float) * size_t(n * w));
  }

  // The rank's K (or V, dK, dV): [B][H_kv][rows][d], in every head the rows of its slots in order.
  void gather_kv(const std::vector<float>& full, std::vector<float>& out) const {
    const Problem& p = P.p;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.H_kv; ++h)
        for (int i = 0; i < S; ++i) {
          const int c = P.chunk_of(r, i);
          const float* src = full.data() + ((b * p.H_kv + h) * p.Nk + P.start[size_t(c)]) * p.d;
          out.insert(out.end(), src, src + P.len[size_t(c)] * p.d);
        }
  }
  void scatter_kv(const std::vector<float>& mine, float* full) const {
    const Problem& p = P.p;
    const int64_t rows = P.kv_rows(r);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.H_kv; ++h)
        for (int i = 0; i < S; ++i) {
          const int c = P.chunk_of(r, i);
          std::memcpy(full + ((b * p.H_kv + h) * p.Nk + P.start[size_t(c)]) * p.d,
                      mine.data() + ((b * p.H_kv + h) * rows + P.kv_row(r, i)) * p.d,
                      sizeof(float) * size_t(P.len[size_t(c)] * p.d));
        }
  }

  void upload(const Inputs& in) {
    const Problem& p = P.p;
    auto put = [&](DeviceBuffer& b, size_t byte_off, const std::vector<float>& x) {
      std::vector<uint8_t> bytes = pack(p.dtype, x);
      FL_CUDA(cudaMemcpy(b.as<char>() + byte_off, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    };
    std::vector<float> qs, ks, vs, ds;
    for (int i = 0; i < S; ++i) {
      const int c = P.chunk_of(r, i);
      gather(in.q, p.H, c, qs);
      if (cfg.backward) gather(in.dO, p.H, c, ds);
    }
    gather_kv(in.k, ks);
    gather_kv(in.v, vs);
    put(q, 0, qs);
    put(home, 0, ks);
    put(home, e * size_t(P.kv_elems(r)), vs);
    if (cfg.backward) put(dO, 0, ds);
  }

  void randomize() {
    dispatch_dtype(P.p.dtype, [&](auto tag) {
      using T = decltype(tag);
      auto fill = [&](DeviceBuffer& b, int64_t n, uint64_t salt) {
        random_kernel<T><<<elem_blocks(n), 256, 0, cs>>>(b.as<T>(), n, cfg.seed * 4099 + salt * 131 + uint64_t(r), 0.5f);
        FL_CUDA(cudaGetLastError());
      };
      fill(q, P.q_elems(r), 1);
      fill(home, 2 * P.kv_elems(r), 2);
      if (cfg.backward) fill(dO, P.q_elems(r), 3);
    });
    FL_CUDA(cudaStreamSynchronize(cs));
  }

  // ---- NCCL -------------------------------------------------------------------------------------
  void init_comm(const char id[kUniqueIdBytes]) {
    if (G == 1) return;  // a ring of one moves nothing
    ncclUniqueId uid;
    std::memcpy(&uid, id, sizeof uid);
    // NCCL's send/recv kernels run beside the local step, one thread block per channel, and each block
    // holds an SM the step's blocks then wait for: 32 by default on an H100 pair (NCCL_DEBUG=INFO, run
    // 76). --nccl-ctas caps them, trading link bandwidth for SMs (the ring README's table).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (cfg.nccl_ctas > 0) config.maxCTAs = cfg.nccl_ctas;
    FL_NCCL(ncclCommInitRankConfig(&comm, G, uid, r, &config));
  }
  // All ranks start a timed repetition together (the ring would line them up anyway, but then the
  // first step's wait for the slowest rank would count as compute).
  void barrier() {
    if (G == 1) return;
    FL_NCCL(ncclAllReduce(sync.get(), sync.get(), 1, ncclFloat32, ncclSum, comm, cs));
    FL_CUDA(cudaStreamSynchronize(cs));
  }

  // ---- Forward ------------------------------------------------------------------------------------
  // checked: outputs, partials and workspaces are poisoned with NaN before the launches that write
  // them (the runner's rule), so a value the ring forgot to write cannot pass the oracle.
  //
  // A query slot with one pair in the whole ring (a ring of one; rank 0 of a causal contiguous ring)
  // is written by the step straight into O and L. Otherwise each pair's partial goes to one of the
  // slot's two partial buffers, and a merge folds them in two at a time (or one, at the slot's last
  // pair); the slot's last merge writes O and L.
  void forward(bool checked) {
    const Problem& p = P.p;
    if (checked) {
      o.poison(cs);
      lse.poison(cs);
      acc.poison(cs);
      if (G > 1) { travel[0].poison(cs); travel[1].poison(cs); }
    }
    FL_CUDA(cudaEventRecord(ev_start, cs));
    std::vector<int> pending(size_t(S), 0), left(pairs_q);  // partials waiting; pairs still to come
    std::vector<bool> has_acc(size_t(S), false);
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      auto merge = [&](int i) {
        const int64_t qo = P.q_slot_offset(r, i), lo = P.lse_slot_offset(r, i);
        const int64_t rows = p.B * p.H * P.len[size_t(P.chunk_of(r, i))];
        const bool last = left[size_t(i)] == 0, two = pending[size_t(i)] == 2;
        merge_kernel<T><<<row_blocks(rows), 32 * kRowsPerBlock, 0, cs>>>(
            acc.as<float>() + qo, lse.as<float>() + lo, po[i][0].as<T>(), pl[i][0].as<float>(),
            two ? po[i][1].as<T>() : nullptr, two ? pl[i][1].as<float>() : nullptr, o.as<T>() + qo, rows, int(p.d),
            has_acc[size_t(i)] ? 1 : 0, last ? 1 : 0);
        FL_CUDA(cudaGetLastError());
        has_acc[size_t(i)] = !last;
        pending[size_t(i)] = 0;
      };
      for (int s = 0; s < G; ++s) {
        const int org = P.origin(r, s);
        char* cur = s == 0 ? home.as<char>() : travel[s % 2].as<char>();
        if (s < G - 1) {
          // The receive buffer held step s − 1's K|V: wait until step s − 1's compute is done with it.
          FL_CUDA(cudaStreamWaitEvent(xs, s == 0 ? ev_start : comp_end[size_t(s - 1)], 0));
          FL_CUDA(cudaEventRecord(comm_begin[size_t(s)], xs));
          FL_NCCL(ncclGroupStart());
          FL_NCCL(ncclSend(cur, 2 * e * size_t(P.kv_elems(org)), ncclUint8, next(), comm, xs));
          FL_NCCL(ncclRecv(travel[(s + 1) % 2].get(), 2 * e * size_t(P.kv_elems(P.origin(r, s + 1))), ncclUint8,
                           prev(), comm, xs));
          FL_NCCL(ncclGroupEnd());
          FL_CUDA(cudaEventRecord(comm_end[size_t(s)], xs));
        }
        if (s >= 1) FL_CUDA(cudaStreamWaitEvent(cs, comm_end[size_t(s - 1)], 0));  // step s's K|V arrived
        FL_CUDA(cudaEventRecord(comp_begin[size_t(s)], cs));
        for (const Pair& x : P.pairs(r, s)) {
          const int i = x.q_slot;
          const Problem pp = P.pair_problem(x);
          const int64_t qo = P.q_slot_offset(r, i), lo = P.lse_slot_offset(r, i);
          const bool direct = direct_q[size_t(i)];
          const int k = pending[size_t(i)];
          void* out_o = direct ? at(o, qo, e) : po[i][k].get();
          float* out_l = direct ? lse.as<float>() + lo : pl[i][k].as<float>();
          if (checked) {
            if (!direct) { po[i][k].poison(cs); pl[i][k].poison(cs); }
            fws.poison(cs);
          }
          ForwardArgs a{at(q, qo, e), kv_at(cur, org, false), kv_at(cur, org, true), out_o, out_l, fws.get(), cs};
          a.seqused_k = used_of(pp, org);
          fs->impl->forward(pp, a);
          FL_CUDA(cudaGetLastError());
          --left[size_t(i)];
          if (direct) continue;
          ++pending[size_t(i)];
          if (pending[size_t(i)] == 2 || left[size_t(i)] == 0) merge(i);
        }
        FL_CUDA(cudaEventRecord(comp_end[size_t(s)], cs));
      }
      for (int i = 0; i < S; ++i) {
        if (pairs_q[size_t(i)] > 0) continue;  // written by the step or by the slot's last merge
        // No pair at all (cannot happen with Nq = Nk; kept for the convention): O = 0, L = +∞.
        const int64_t qo = P.q_slot_offset(r, i), lo = P.lse_slot_offset(r, i);
        const int64_t rows = p.B * p.H * P.len[size_t(P.chunk_of(r, i))];
        FL_CUDA(cudaMemsetAsync(at(o, qo, e), 0, e * size_t(rows * p.d), cs));
        fill_kernel<<<elem_blocks(rows), 256, 0, cs>>>(lse.as<float>() + lo, rows, INFINITY);
        FL_CUDA(cudaGetLastError());
      }
    });
    FL_CUDA(cudaEventRecord(ev_end, cs));
  }

  // ---- Backward -----------------------------------------------------------------------------------
  // The phases of plan.hpp, "own keys last": k = 0 own keys part A, 1 … G − 1 the ring steps, G own
  // keys part B (a ring of one: one phase, nothing moves). For each phase:
  //   xs, transfer k (once compute k − 1 is done: it read the K|V buffer this receives into, and
  //     finished the sum this sends): the K|V for phase k + 1 as in the forward, and the dK|dV sums:
  //     the one finished at phase k − 1 goes to r + 1, the one phase k adds to (beside part B: this
  //     rank's own) arrives from r − 1 into buffer k mod 2.
  //   cs, compute k: each pair's dK, dV into a partial buffer over origin's whole K, V (one per pair of
  //     the phase); then part A keeps its one for the end (pa); step 1 starts the sum of its origin from
  //     them (rows no pair used: zeros); a step s ≥ 2 waits for the sum that transfer k brings and adds
  //     them; part B waits for this rank's own sum and writes dK, dV = sum + A's + B's partials, one
  //     pass over K and one over V.
  // Part B's compute thus runs beside the final hop, which the previous order (own pairs first) left
  // with no compute beside it (0.905–1.029 ms at N = 32768, causal zigzag, runs 39–40).
  // dQ is summed like the forward's O: partials two at a time into an fp32 sum, the last pass writing dQ.
  void backward(bool checked) {
    const Problem& p = P.p;
    if (checked) {
      for (DeviceBuffer* b : {&dq, &dk, &dv, &dq_acc, &dkv[0], &dkv[1]}) b->poison(cs);
      if (G > 1) { travel[0].poison(cs); travel[1].poison(cs); }
    }
    FL_CUDA(cudaEventRecord(ev_start, cs));
    std::vector<int> pending_q(size_t(S), 0), left_q(pairs_q);
    std::vector<bool> has_acc_q(size_t(S), false);
    int64_t kept = -1;  // part A's partial: the key rows it used (−1: none)
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      // to [+]= a (its first u_a rows of each head) + b (u_b): tensors of `heads` × `rows` rows.
      auto sum = [&](float* to, const DeviceBuffer* a, int64_t u_a, const DeviceBuffer* b, int64_t u_b, T* out,
                     int64_t heads, int64_t rows, bool has_acc) {
        sum_kernel<T><<<row_blocks(heads * rows), 32 * kRowsPerBlock, 0, cs>>>(
            to, a ? a->as<T>() : nullptr, a ? u_a : 0, b ? b->as<T>() : nullptr, u_b, out, heads, rows, int(p.d),
            has_acc ? 1 : 0);
        FL_CUDA(cudaGetLastError());
      };
      for (int k = 0; k < int(bphases.size()); ++k) {
        const Phase& ph = bphases[size_t(k)];
        const int org = ph.origin;
        const bool own = org == r;
        // The K|V in hand: this rank's own (home, never overwritten) or the ones transfer k − 1 brought.
        char* cur = own ? home.as<char>() : travel[k % 2].as<char>();
        if (ph.moves()) {
          FL_CUDA(cudaStreamWaitEvent(xs, k == 0 ? ev_start : comp_end[size_t(k - 1)], 0));
          FL_CUDA(cudaEventRecord(comm_begin[size_t(k)], xs));
          FL_NCCL(ncclGroupStart());
          if (ph.kv_send >= 0)  // the plan sends the K|V in hand: kv_send = org
            FL_NCCL(ncclSend(cur, 2 * e * size_t(P.kv_elems(org)), ncclUint8, next(), comm, xs));
          if (ph.kv_recv >= 0)
            FL_NCCL(ncclRecv(travel[(k + 1) % 2].get(), 2 * e * size_t(P.kv_elems(ph.kv_recv)), ncclUint8, prev(),
                             comm, xs));
          if (ph.dkv_send >= 0)
            FL_NCCL(ncclSend(dkv[Phase::dkv_buffer(k - 1)].get(), 2 * size_t(P.kv_elems(ph.dkv_send)), ncclFloat32,
                             next(), comm, xs));
          if (ph.dkv_recv >= 0)
            FL_NCCL(ncclRecv(dkv[Phase::dkv_buffer(k)].get(), 2 * size_t(P.kv_elems(ph.dkv_recv)), ncclFloat32, prev(),
                             comm, xs));
          FL_NCCL(ncclGroupEnd());
          FL_CUDA(cudaEventRecord(comm_end[size_t(k)], xs));
        }
        if (!own) FL_CUDA(cudaStreamWaitEvent(cs, comm_end[size_t(k - 1)], 0));  // its K|V arrived
        FL_CUDA(cudaEventRecord(comp_begin[size_t(k)], cs));
        const int64_t kv_org = P.kv_elems(org), rows_k = P.kv_rows(org), heads_k = p.B * p.H_kv;
        const bool keep = ph.dkv == DkvRole::keep;
        // Parts A and B have one pair each at most (plan.hpp; the CPU tests check it), a phase one per
        // query slot: a partial buffer each.
        if ((keep || ph.dkv == DkvRole::finish) ? ph.pairs.size() > 1 : ph.pairs.size() > size_t(S))
          throw Error("the backward's plan gives a phase more pairs than ring.cu keeps partials for");
        std::vector<int64_t> used_k;  // this phase's dK, dV partials: the key rows each used
        for (const Pair& x : ph.pairs) {
          const int i = x.q_slot;
          const Problem pp = P.pair_problem(x);
          const int64_t qo = P.q_slot_offset(r, i), lo = P.lse_slot_offset(r, i);
          const bool dq_direct = direct_q[size_t(i)];
          const int kq = pending_q[size_t(i)], kk = int(used_k.size());
          // direct_kv only when G = 1 with one pair, whose dK, dV are this rank's dK, dV.
          DeviceBuffer& bk = keep ? pa_k : pk[kk];
          DeviceBuffer& bv = keep ? pa_v : pv[kk];
          void* dq_t = dq_direct ? at(dq, qo, e) : pq[i][kq].get();
          void* dk_t = direct_kv ? dk.get() : bk.get();
          void* dv_t = direct_kv ? dv.get() : bv.get();
          if (checked) {
            if (!dq_direct) pq[i][kq].poison(cs);
            if (!direct_kv) { bk.poison(cs); bv.poison(cs); }
            bws.poison(cs);
          }
          BackwardArgs a{at(q, qo, e), kv_at(cur, org, false), kv_at(cur, org, true), at(o, qo, e),
                         lse.as<float>() + lo, at(dO, qo, e), dq_t, dk_t, dv_t, bws.get(), cs};
          a.seqused_k = used_of(pp, org);
          bs->impl->backward(pp, a);
          FL_CUDA(cudaGetLastError());
          --left_q[size_t(i)];
          if (!dq_direct) {
            ++pending_q[size_t(i)];
            if (pending_q[size_t(i)] == 2 || left_q[size_t(i)] == 0) {
              const bool last = left_q[size_t(i)] == 0, two = pending_q[size_t(i)] == 2;
              sum(dq_acc.as<float>() + qo, &pq[i][0], pp.Nq, two ? &pq[i][1] : nullptr, pp.Nq,
                  last ? dq.as<T>() + qo : nullptr, p.B * p.H, pp.Nq, has_acc_q[size_t(i)]);
              has_acc_q[size_t(i)] = !last;
              pending_q[size_t(i)] = 0;
            }
          }
          used_k.push_back(P.pair_keys(x));
        }
        // Part B's compute, as timed, is its pairs: what the final hop runs beside. The wait for the hop
        // and the pass after it belong to no phase (as the conversion after the hop did before).
        if (ph.dkv == DkvRole::finish) FL_CUDA(cudaEventRecord(comp_end[size_t(k)], cs));
        // This phase's dK, dV: where they go depends on its role (plan.hpp's DkvRole). Each partial
        // covers origin's whole K, V (rows past the keys it used were not read by the step).
        if (ph.dkv == DkvRole::add || ph.dkv == DkvRole::finish)
          FL_CUDA(cudaStreamWaitEvent(cs, comm_end[size_t(k)], 0));  // the sum arrived beside this phase
        const int np = int(used_k.size());
        const DeviceBuffer* k0 = np > 0 ? &pk[0] : nullptr;
        const DeviceBuffer* v0 = np > 0 ? &pv[0] : nullptr;
        const DeviceBuffer* k1 = np > 1 ? &pk[1] : nullptr;
        const DeviceBuffer* v1 = np > 1 ? &pv[1] : nullptr;
        const int64_t u0 = np > 0 ? used_k[0] : 0, u1 = np > 1 ? used_k[1] : 0;
        switch (ph.dkv) {
          case DkvRole::local:  // a ring of one: dK, dV straight away (or the step wrote them)
            if (direct_kv) break;
            if (np == 0) {  // no pair at all (cannot happen with Nq = Nk): dK = dV = 0
              FL_CUDA(cudaMemsetAsync(dk.get(), 0, e * size_t(kv_org), cs));
              FL_CUDA(cudaMemsetAsync(dv.get(), 0, e * size_t(kv_org), cs));
              break;
            }
            sum(nullptr, k0, u0, k1, u1, dk.as<T>(), heads_k, rows_k, false);
            sum(nullptr, v0, u0, v1, u1, dv.as<T>(), heads_k, rows_k, false);
            break;
          case DkvRole::keep:  // part A: the partial waits in pa for the end
            kept = np ? u0 : -1;
            break;
          case DkvRole::start:  // step 1: the sum of origin r − 1 starts here, from the partials
          case DkvRole::add: {  // step s ≥ 2: added to the sum that arrived (no pair here: it passes on as it came)
            const bool start = ph.dkv == DkvRole::start;
            float* sum_k = dkv[Phase::dkv_buffer(k)].as<float>();
            float* sum_v = sum_k + kv_org;
            if (np == 0) {
              if (start) {  // no pair here: the sum starts at 0
                FL_CUDA(cudaMemsetAsync(sum_k, 0, 8 * size_t(kv_org), cs));
              }
              break;
            }
            // (start: rows no partial used are written as 0)
            sum(sum_k, k0, u0, k1, u1, nullptr, heads_k, rows_k, !start);
            sum(sum_v, v0, u0, v1, u1, nullptr, heads_k, rows_k, !start);
            break;
          }
          case DkvRole::finish: {  // part B: dK, dV = the arrived sum + A's partial + B's, rounded once
            float* mine_k = dkv[Phase::dkv_buffer(k)].as<float>();
            float* mine_v = mine_k + kv_org;
            const bool a = kept >= 0;
            sum(mine_k, a ? &pa_k : k0, a ? kept : u0, a ? k0 : nullptr, u0, dk.as<T>(), heads_k, rows_k, true);
            sum(mine_v, a ? &pa_v : v0, a ? kept : u0, a ? v0 : nullptr, u0, dv.as<T>(), heads_k, rows_k, true);
            break;
          }
        }
        if (ph.dkv != DkvRole::finish) FL_CUDA(cudaEventRecord(comp_end[size_t(k)], cs));
      }
      for (int i = 0; i < S; ++i) {
        if (pairs_q[size_t(i)] > 0) continue;  // written by the step or by the slot's last sum
        const int64_t n = p.B * p.H * P.len[size_t(P.chunk_of(r, i))] * p.d;
        FL_CUDA(cudaMemsetAsync(at(dq, P.q_slot_offset(r, i), e), 0, e * size_t(n), cs));
      }
    });
    FL_CUDA(cudaEventRecord(ev_end, cs));
  }

  // ---- Outputs back to the launcher ---------------------------------------------------------------
  std::vector<float> download(const DeviceBuffer& b, int64_t elem_off, int64_t n, DType t) const {
    std::vector<uint8_t> bytes(size_t(n) * size_t(dtype_bytes(t)));
    FL_CUDA(cudaMemcpy(bytes.data(), b.as<char>() + size_t(elem_off) * size_t(dtype_bytes(t)), bytes.size(),
                       cudaMemcpyDeviceToHost));
    return unpack(t, bytes.data(), n);
  }
  void write_out(SharedOutputs out, bool backward) const {
    const Problem& p = P.p;
    for (int i = 0; i < S; ++i) {
      const int c = P.chunk_of(r, i);
      const int64_t n = P.len[size_t(c)];
      const int64_t qo = P.q_slot_offset(r, i), lo = P.lse_slot_offset(r, i);
      scatter(download(o, qo, p.B * p.H * n * p.d, p.dtype), p.H, c, out.o);
      scatter(download(lse, lo, p.B * p.H * n, DType::f32), -1, c, out.lse);
      if (backward) scatter(download(dq, qo, p.B * p.H * n * p.d, p.dtype), p.H, c, out.dq);
    }
    if (backward) {
      scatter_kv(download(dk, 0, P.kv_elems(r), p.dtype), out.dk);
      scatter_kv(download(dv, 0, P.kv_elems(r), p.dtype), out.dv);
    }
  }

  // --bitwise-local (G = 1, contiguous: one slot holding the whole problem in its own layout): the
  // local steps run on the whole problem as the runner runs them, compared bit for bit. The backward is
  // run three times: a step that adds dQ by atomicAdd (09, 09b) is itself not bitwise reproducible,
  // and where its own runs differ among themselves a bit-for-bit verdict on dQ means nothing (the
  // tolerance rule still judges it); where they agree, the ring must match them.
  void bitwise_local(RankReport* rep) {
    const Problem& p = P.p;
    DeviceBuffer ro, rl, ws, rdq, rdk, rdv, rbws;
    alloc(ro, e * p.q_elems(), "the local step's O");
    alloc(rl, 4 * p.lse_elems(), "the local step's L");
    alloc(ws, fs->impl->workspace_bytes(p), "the local step's workspace");
    ro.poison(cs);
    rl.poison(cs);
    ws.poison(cs);
    fs->impl->forward(p, ForwardArgs{q.get(), home.get(), at(home, p.kv_elems(), e), ro.get(), rl.as<float>(), ws.get(), cs});
    FL_CUDA(cudaGetLastError());
    FL_CUDA(cudaStreamSynchronize(cs));
    // The first `bytes` of b (the ring's L buffer is padded past the B·H·N values the step's has).
    auto bytes_of = [&](const DeviceBuffer& b, size_t bytes) {
      std::vector<uint8_t> x(bytes);
      FL_CUDA(cudaMemcpy(x.data(), b.get(), bytes, cudaMemcpyDeviceToHost));
      return x;
    };
    const size_t qb = e * size_t(p.q_elems()), lb = 4 * size_t(p.lse_elems()), kb = e * size_t(p.kv_elems());
    // name, the ring's bytes, the local runs' bytes
    std::vector<std::pair<std::string, std::pair<std::vector<uint8_t>, std::vector<std::vector<uint8_t>>>>> cmp;
    cmp.push_back({"O", {bytes_of(o, qb), {bytes_of(ro, qb)}}});
    cmp.push_back({"L", {bytes_of(lse, lb), {bytes_of(rl, lb)}}});
    if (cfg.backward) {
      alloc(rdq, e * p.q_elems(), "the local step's dQ");
      alloc(rdk, e * p.kv_elems(), "the local step's dK");
      alloc(rdv, e * p.kv_elems(), "the local step's dV");
      alloc(rbws, bs->impl->backward_workspace_bytes(p), "the local step's backward workspace");
      cmp.push_back({"dQ", {bytes_of(dq, qb), {}}});
      cmp.push_back({"dK", {bytes_of(dk, kb), {}}});
      cmp.push_back({"dV", {bytes_of(dv, kb), {}}});
      for (int run = 0; run < 3; ++run) {
        for (DeviceBuffer* b : {&rdq, &rdk, &rdv, &rbws}) b->poison(cs);
        bs->impl->backward(p, BackwardArgs{q.get(), home.get(), at(home, p.kv_elems(), e), ro.get(), rl.as<float>(),
                                           dO.get(), rdq.get(), rdk.get(), rdv.get(), rbws.get(), cs});
        FL_CUDA(cudaGetLastError());
        FL_CUDA(cudaStreamSynchronize(cs));
        cmp[2].second.second.push_back(bytes_of(rdq, qb));
        cmp[3].second.second.push_back(bytes_of(rdk, kb));
        cmp[4].second.second.push_back(bytes_of(rdv, kb));
      }
    }
    std::string note;
    bool equal = true;
    for (const auto& entry : cmp) {
      const std::string& name = entry.first;
      const std::vector<uint8_t>& ring = entry.second.first;
      const std::vector<std::vector<uint8_t>>& local = entry.second.second;
      const bool match = std::find(local.begin(), local.end(), ring) != local.end();
      const bool reproducible = std::all_of(local.begin(), local.end(), [&](const auto& x) { return x == local[0]; });
      std::string what;
      if (match) {
        what = name + " equal";
      } else if (!reproducible) {
        what = name + " not comparable bit for bit (" + std::to_string(local.size()) +
               " runs of the local step differ among themselves: atomicAdd order; the rule judges it)";
      } else {
        size_t at_byte = 0;
        while (ring[at_byte] == local[0][at_byte]) ++at_byte;
        what = name + " DIFFERS (first at byte " + std::to_string(at_byte) + ")";
        equal = false;
      }
      note += (note.empty() ? "" : ", ") + what;
    }
    rep->bitwise = equal ? 1 : 0;
    std::snprintf(rep->bitwise_note, sizeof rep->bitwise_note, "%s", note.c_str());
  }

  // ---- Timing ------------------------------------------------------------------------------------
  // The backward's entries are its phases (plan.hpp): own keys part A, steps 1 … G − 1, own keys part
  // B (its compute is its pairs, which the final hop runs beside; the pass after the hop is in no
  // entry); a phase whose transfer moves nothing (G = 2: step 1) has no transfer entry (0).
  void time(bool backward, Timing* rep) {
    const int steps = backward ? int(bphases.size()) : G;
    auto moved = [&](int s) { return backward ? bphases[size_t(s)].moves() : G > 1 && s < G - 1; };
    std::vector<double> total, busy;
    std::vector<std::vector<double>> comp(static_cast<size_t>(steps)), xfer(static_cast<size_t>(steps));
    for (int it = 0; it < cfg.warmup + cfg.reps; ++it) {
      barrier();
      backward ? this->backward(false) : forward(false);
      FL_CUDA(cudaEventSynchronize(ev_end));
      FL_CUDA(cudaStreamSynchronize(xs));
      if (it < cfg.warmup) continue;
      float t = 0;
      FL_CUDA(cudaEventElapsedTime(&t, ev_start, ev_end));
      total.push_back(t);
      double b = 0;
      for (int s = 0; s < steps; ++s) {
        FL_CUDA(cudaEventElapsedTime(&t, comp_begin[size_t(s)], comp_end[size_t(s)]));
        comp[size_t(s)].push_back(t);
        b += t;
        if (moved(s)) {
          FL_CUDA(cudaEventElapsedTime(&t, comm_begin[size_t(s)], comm_end[size_t(s)]));
          xfer[size_t(s)].push_back(t);
        }
      }
      busy.push_back(b);
    }
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    if (total.empty()) return;
    std::vector<double> sorted = total;
    std::sort(sorted.begin(), sorted.end());
    rep->reps = int(total.size());
    rep->total_median = sorted[sorted.size() / 2];
    rep->total_min = sorted.front();
    rep->total_p90 = sorted[std::min(sorted.size() - 1, size_t(std::ceil(0.9 * double(sorted.size()))) - 1)];
    rep->busy_median = median(busy);
    rep->steps = steps;
    for (int s = 0; s < steps; ++s) {
      rep->compute_ms[s] = median(comp[size_t(s)]);
      rep->transfer_ms[s] = median(xfer[size_t(s)]);
      rep->pairs[s] = int(backward ? bphases[size_t(s)].pairs.size() : P.pairs(r, s).size());
    }
  }
};

}  // namespace

void make_unique_id(char id[kUniqueIdBytes]) {
  ncclUniqueId uid;
  FL_NCCL(ncclGetUniqueId(&uid));
  std::memcpy(id, &uid, sizeof uid);
}

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = no_device_reason(e);  // the wording of every other place (common/cuda.cuh)
    cudaGetLastError();
    return 0;
  }
  return n;
}

void run_rank(const RankConfig& cfg, int rank, const char id[kUniqueIdBytes], const Inputs* in, SharedOutputs out,
              RankReport* rep) {
  const std::string who = "rank " + std::to_string(rank) + ": ";
  FL_CUDA(cudaSetDevice(rank));
  Rank R(cfg, rank);
  try {
    cudaDeviceProp prop{};
    FL_CUDA(cudaGetDeviceProperties(&prop, rank));
    std::snprintf(rep->device, sizeof rep->device, "%s", prop.name);
    rep->sm_count = prop.multiProcessorCount;
    int rt = 0, drv = 0;
    FL_CUDA(cudaRuntimeGetVersion(&rt));
    FL_CUDA(cudaDriverGetVersion(&drv));
    std::snprintf(rep->cuda, sizeof rep->cuda, "%d.%d", rt / 1000, rt % 1000 / 10);
    std::snprintf(rep->driver, sizeof rep->driver, "%d.%d", drv / 1000, drv % 1000 / 10);
    R.setup();
    std::snprintf(rep->fwd_step, sizeof rep->fwd_step, "%s", R.fs->folder.c_str());
    if (R.bs) std::snprintf(rep->bwd_step, sizeof rep->bwd_step, "%s", R.bs->folder.c_str());
    R.init_comm(id);
    // A test hook (tests/ring_tests.cmake): this rank fails after the communicator is up, while its
    // peers go on into NCCL calls that wait for it; the launcher must end them and name this rank.
    if (const char* f = std::getenv("FLASHLADDER_RING_FAIL_RANK"); f && *f && std::atoi(f) == rank)
      throw Error("failure injected by FLASHLADDER_RING_FAIL_RANK=" + std::string(f));
    if (in && cfg.check) R.upload(*in);
    else R.randomize();
    if (cfg.check) {
      R.barrier();
      R.forward(true);
      if (cfg.backward) R.backward(true);
      FL_CUDA(cudaStreamSynchronize(R.cs));
      FL_CUDA(cudaStreamSynchronize(R.xs));
      R.write_out(out, cfg.backward);
      if (cfg.bitwise_local) R.bitwise_local(rep);
    } else if (cfg.backward) {
      R.forward(false);  // the backward's O and L
      FL_CUDA(cudaStreamSynchronize(R.cs));
    }
    if (cfg.reps > 0) {
      R.time(false, &rep->fwd);
      if (cfg.backward) R.time(true, &rep->bwd);  // on the O, L of the last timed forward
    }
    FL_CUDA(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    // Abort, not destroy: the peers may be inside an NCCL call that waits for this rank; aborting
    // makes theirs fail (and the launcher ends them if they still wait).
    if (R.comm) ncclCommAbort(R.comm);
    R.comm = nullptr;
    throw Error(who + e.what());
  }
  if (R.comm) FL_NCCL(ncclCommDestroy(R.comm));
  R.comm = nullptr;
  rep->ok = 1;
}

}  // namespace fl::ring
