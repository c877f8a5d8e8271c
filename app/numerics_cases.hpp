// flashladder — app/numerics_cases.hpp: the inputs built to break a careless softmax (issue 8), shared
// by tests/test_gpu_numerics.cpp (every step on every case) and the lab kit (app/lab_suite.cpp: an
// exercise's check runs its step's part of them). The why of each case is in test_gpu_numerics.cpp's
// header comment and next to its builder.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/tensor.hpp"

namespace fl::test {

inline constexpr uint64_t kNumericsSeed = 20261108;

// ---- Building inputs ------------------------------------------------------------------------------
// Raw 64-bit draws (std::mt19937_64's sequence is fixed by the standard; the distributions are not).
struct Draw {
  std::mt19937_64 g;
  explicit Draw(uint64_t seed) : g(seed) {}
  double uniform() { return (double(g() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  float ternary() { return float(int(g() % 3) - 1); }                // −1, 0, 1: exact in every type
  float sign() { return g() & 1 ? 1.f : -1.f; }
};

inline float pow2_near(double x) { return std::ldexp(1.f, int(std::lround(std::log2(x)))); }
// 1/√d rounded to a power of two: products with it are exact, so integer scores stay integers.
inline float pow2_scale(int64_t d) { return 1.f / pow2_near(std::sqrt(double(d))); }

inline void fill_ternary(Draw& r, std::vector<float>& x, float factor) {
  for (float& e : x) e = factor * r.ternary();
}

// The largest |q·k| over visible (i, j) pairs, in double: what a scale must bring to 10^4.
inline double max_dot(const Inputs& in) {
  const Problem& p = in.p;
  double m = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i)
        for (int64_t j = 0; j < p.Nk; ++j) {
          if (!p.visible(i, j)) continue;
          double s = 0;
          for (int64_t c = 0; c < p.d; ++c)
            s += double(in.q[size_t(p.q_row(b, h, i) + c)]) * in.k[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
          m = std::max(m, std::fabs(s));
        }
  return m;
}

// Scores up to 10^4 through the scale: Q, K ∈ {−1, 0, 1}, so q·k is an integer, and the scale is the
// power of two that brings max|q·k| into (5·10^3, 10^4]. V and dO stay Normal(0.5, 1).
inline Inputs scores_1e4_by_scale(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.q, 1.f);
  fill_ternary(r, in.k, 1.f);
  in.p.scale = std::ldexp(1.0, int(std::floor(std::log2(1e4 / max_dot(in)))));
  return in;
}

// Scores up to 10^4 through the inputs: K ∈ {−1, 0, 1}, Q ∈ 2^a·{−1, 0, 1} (2^a in the thousands,
// exact in fp16 and bf16), the scale a power of two near 1/√d.
inline Inputs scores_1e4_by_inputs(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.q, 1.f);
  fill_ternary(r, in.k, 1.f);
  in.p.scale = pow2_scale(p.d);
  const float a = std::ldexp(1.f, int(std::floor(std::log2(1e4 / (*in.p.scale * max_dot(in))))));
  for (float& x : in.q) x *= a;
  return in;
}

// Every score of a row equal: every key row of every head is the same k* ∈ {−1, 0, 1}^d, so P is
// uniform over the keys a row sees and O is their mean V. Q ∈ 128·{−1, 0, 1} puts the common score
// in the hundreds, where e^s alone overflows fp32: only the max subtraction gives e^0 = 1 per key.
inline Inputs all_scores_equal(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  std::vector<float> k_star(size_t(p.d));
  fill_ternary(r, k_star, 1.f);
  k_star[0] = 1.f;  // never the zero vector
  for (size_t n = 0; n < in.k.size(); ++n) in.k[n] = k_star[n % size_t(p.d)];
  fill_ternary(r, in.q, 128.f);
  in.p.scale = pow2_scale(p.d);
  return in;
}

// The key row i of head h is dominated by (non-causal, so every key is visible).
inline int64_t dominant_key(const Problem& p, int64_t b, int64_t h, int64_t i) { return (7 * i + 3 * h + 11 * b) % p.Nk; }

// One dominant key per row: K ∈ {−1, 0, 1}; q_i = k_{j(i)}·2^a, so the score of j(i) is c·|k_j|²
// (|k_j|² ≈ 2d/3) and every other is c·k_j·k_{j'} (|k_j·k_{j'}| ≲ 3√d), with c = 2^a·scale the power
// of two nearest 24/d: the dominant score is some 10 to 16 above the next at d = 64 … 256, so P at
// j(i) is above 0.99 and the rest is a tail of e^-10-sized weights that must not be lost (nor
// vanish: at a fixed c the gap would grow with d until the tail is below double's precision).
inline Inputs one_dominant_key(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.k, 1.f);
  const float scale = pow2_scale(p.d), a = pow2_near(24.0 / double(p.d)) / scale;
  in.p.scale = scale;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const int64_t j = dominant_key(p, b, h, i);
        for (int64_t c = 0; c < p.d; ++c)
          in.q[size_t(p.q_row(b, h, i) + c)] = a * in.k[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
      }
  return in;
}

// ±[lo, hi] with a random sign, rounded to the storage type.
inline void fill_edge(Draw& r, std::vector<float>& x, double lo, double hi, DType t) {
  for (float& e : x) e = round_to(t, float(r.sign() * (lo + (hi - lo) * r.uniform())));
}

// The edge of fp16's range, forward: Q and V at ±[3·10^4, 6·10^4] (fp16's largest finite value is
// 65504; 6·10^4 leaves room for O, a convex combination of V rows, to round without overflowing), and
// K at 3·10^-4·Normal(0, 1) (normal and subnormal fp16 values), so the scores stay in the tens:
// q·k ≈ 10^2, products 10^1 each — everything fits fp32 accumulation with room, and so does an
// un-normalised accumulator Σ_j P̃_ij V_j (up to Nk·6·10^4 ≈ 1.5·10^7). The gradient does not
// fit fp16: dK = scale·dSᵀQ with Q at 6·10^4 reaches 10^6 and more, beyond what any fp16 output (or
// the fp16 baseline's) can hold, so this case checks the backward in bf16 only (NumericsCase.* checks
// that the fp16 gradient really is out of range).
inline Inputs fp16_edge_q_and_v(const Problem& p, uint64_t seed) {
  Problem p0 = p;
  Inputs in = make_inputs(p0, seed, InputOptions{0.0, 1.0});  // K, dO: Normal(0, 1)
  Draw r(seed);
  fill_edge(r, in.q, 3e4, 6e4, p.dtype);
  fill_edge(r, in.v, 3e4, 6e4, p.dtype);
  for (float& x : in.k) x = round_to(p.dtype, 3e-4f * x);
  return in;
}

// The edge of fp16's range, backward: V at ±[4·10^4, 6·10^4] and dO at 0.1/√d·Normal(0, 1), so that
// dP = dO Vᵀ reaches about 2·10^4 (fp16 holds 65504): the fp16 values a backward stores on the way
// (dP, dS) are near the top of the range without overflowing, and dQ, dK, dV stay representable.
inline Inputs fp16_edge_v_and_gradients(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_edge(r, in.v, 4e4, 6e4, p.dtype);
  for (float& x : in.dO) x = round_to(p.dtype, float(0.1 / std::sqrt(double(p.d))) * (x - 0.5f));
  return in;
}

// Plain inputs; the point is the shape: causal with Nq > Nk leaves the first Nq − Nk rows no key.
inline Inputs plain(const Problem& p, uint64_t seed) { return make_inputs(p, seed); }

struct NumCase {
  const char* name;
  int64_t Nq, Nk;
  bool causal;
  bool fp16_backward;  // false: the exact gradients exceed fp16's range (see the builder)
  Inputs (*build)(const Problem&, uint64_t);
};

inline const std::vector<NumCase>& numerics_cases() {
  static const std::vector<NumCase> c = {
      {"scores_1e4_by_scale", 150, 333, false, true, scores_1e4_by_scale},
      {"scores_1e4_by_inputs", 333, 150, true, true, scores_1e4_by_inputs},
      {"all_scores_equal", 200, 131, true, true, all_scores_equal},
      {"one_dominant_key", 160, 257, false, true, one_dominant_key},
      {"fp16_edge_q_and_v", 129, 250, true, false, fp16_edge_q_and_v},
      {"fp16_edge_v_and_gradients", 100, 257, false, true, fp16_edge_v_and_gradients},
      {"fully_masked_rows", 300, 70, true, true, plain},
  };
  return c;
}

inline Problem numerics_shape(const NumCase& c, DType t, int64_t d) {
  Problem p;
  p.B = 2; p.H = 4; p.H_kv = 2;  // GQA: two query heads per K/V head
  p.Nq = c.Nq; p.Nk = c.Nk; p.causal = c.causal; p.d = d; p.dtype = t;
  return p;
}

inline uint64_t seed_of(const NumCase& c) { return kNumericsSeed + uint64_t(&c - numerics_cases().data()); }

// The rows that see no key (causal, Nq > Nk: the first Nq − Nk).
inline int64_t unseen_rows(const Problem& p) { return p.causal ? std::max<int64_t>(0, p.Nq - p.Nk) : 0; }

}  // namespace fl::test
