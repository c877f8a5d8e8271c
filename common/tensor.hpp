// flashladder — common/tensor.hpp: host data, rounding to the storage type, seeded inputs.
//
// Host copies of every tensor are std::vector<float> whose values are exactly representable in the
// problem's storage type (rounded once, at creation). The oracle reads them as doubles, so it sees
// the very inputs a step saw (the tolerance rule requires this). pack()/unpack() convert to and from
// the bytes a step consumes (fp32, fp16 or bf16).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"

namespace fl {

/// x rounded to the storage type (round to nearest even) and widened back to float.
float round_to(DType t, float x);
void round_all(DType t, std::vector<float>& xs);

/// Raw bytes of xs in storage type t (xs.size() * dtype_bytes(t) bytes).
std::vector<uint8_t> pack(DType t, const std::vector<float>& xs);
/// n values of storage type t at bytes, widened to float.
std::vector<float> unpack(DType t, const void* bytes, int64_t n);

/// A vector of n quiet NaNs: what every output holds before a step writes it.
std::vector<float> poisoned(int64_t n);

struct InputOptions {
  double mean = 0.5;     // non-zero on purpose: a zero-mean test hides offset bugs
  double q_scale = 1.0;  // 20 gives the large-logit case that only a stable softmax survives
};

/// The tensors of a problem. With variable length (p.varlen()) they are packed: q, dO [total_q][H][d],
/// k, v [total_k][H_kv][d] (common/problem.hpp).
struct Inputs {
  Problem p;
  uint64_t seed = 0;
  InputOptions opt;
  std::vector<float> q;   // [B][H][Nq][d]
  std::vector<float> k;   // [B][H_kv][Nk][d]
  std::vector<float> v;   // [B][H_kv][Nk][d]
  std::vector<float> dO;  // [B][H][Nq][d]  upstream gradient, for the backward
  std::vector<float> alibi_slopes;  // fp32 [H] (p.alibi heads) or [B][H] (batch_heads); empty without ALiBi
};

/// ALiBi's slopes for H heads (Press et al., 2022): the geometric sequence 2^(−8/n), 2^(−16/n), …
/// for n = H a power of two; otherwise those of the power of two n below H, then every other slope of
/// 2n for the remaining heads (the paper's own recipe).
std::vector<float> alibi_slopes_for(int64_t H);
/// The [B][H] slopes make_inputs gives for alibi = batch_heads: head h of sequence b has
/// alibi_slopes_for(H)[h] · 2^u, u uniform in [−1, 1) from std::mt19937_64(seed ^ 0xa11b1), drawn in
/// (b, h) order, so sequences differ and the slopes stay in the paper's range.
std::vector<float> alibi_slopes_batch(int64_t B, int64_t H, uint64_t seed);
/// "" when slopes fit p (p.alibi_elems() finite values; none without ALiBi); else why, naming
/// alibi_slopes, the count and the shape p needs.
std::string alibi_slopes_reason(const Problem& p, const std::vector<float>& slopes);
/// Throws fl::Error with alibi_slopes_reason() when it is not empty.
void require_alibi_slopes(const Problem& p, const std::vector<float>& slopes);

/// The machine's host memory (memory + swap, from /proc/meminfo), or 0 where it cannot be read.
size_t host_memory_bytes();
/// Throws fl::Error naming `what`, the bytes needed and the bytes the machine has, when bytes exceed it.
void require_host_memory(size_t bytes, const std::string& what);

/// Normal(mean, 1) inputs from a seeded 64-bit Mersenne Twister with a Box–Muller transform written
/// out here (std::normal_distribution differs between standard libraries), rounded to p.dtype, in the
/// order q, k, v, dO, each of its element count (so a window, a softcap or ALiBi leaves them the same
/// as the plain problem's). ALiBi slopes: alibi_slopes_for(H), or alibi_slopes_batch(B, H, seed).
Inputs make_inputs(const Problem& p, uint64_t seed, InputOptions opt = {});

struct Outputs {
  std::vector<float> o;    // [B][H][Nq][d]
  std::vector<float> lse;  // [B][H][Nq]  L = m + log ℓ, natural log; +inf for a row that sees no key
  std::vector<float> dq;   // [B][H][Nq][d]      (backward only)
  std::vector<float> dk;   // [B][H_kv][Nk][d]   (backward only)
  std::vector<float> dv;   // [B][H_kv][Nk][d]   (backward only)
};

}  // namespace fl
