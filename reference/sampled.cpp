// flashladder — reference/sampled.cpp (see the header for what and why).
//
// Work is organised per K/V head (b, h_kv) and, inside it, per query head h of its group: the query
// rows needed (the sampled ones, or all of them when a key row of this K/V head is sampled in a
// backward) go through in blocks of up to kMaxBlockRows rows, the blocks in parallel (OpenMP), each
// thread with its own buffers. For a block, S (and dP) over the keys the block can see are held in
// memory in double and in the storage type's baseline, from Eigen products over chunks of kChunk
// keys. Then each row's softmax, D and dS are formed in place, the sampled rows' O and dQ are summed
// over the keys, and the block's terms of the sampled key rows' dK, dV are kept apart and added in
// block order, so that no result depends on the number of threads.
#include "reference/sampled.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <limits>
#include <random>
#include <set>
#include <sstream>

namespace fl {

float round_storage(DType t, float x) {
  switch (t) {
    case DType::f32:
      return x;
    case DType::f16:
#if defined(__F16C__)
      return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));  // one instruction each way
#else
      return round_to(t, x);
#endif
    case DType::bf16: {
      // Round to nearest even on the bits: add half an ulp of bf16 (minus one when the kept part is
      // even), drop the low 16 bits. Monotone over all finite floats, subnormals included; overflow
      // carries into the exponent and gives ±inf, as it should.
      uint32_t u;
      std::memcpy(&u, &x, 4);
      if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      std::memcpy(&x, &u, 4);
      return x;
    }
  }
  return x;
}

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using View = Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>>;  // rows × cols inside a wider row-major buffer
using MapF = Eigen::Map<const Mat<float>>;

constexpr int64_t kChunk = 2048;        // keys per Eigen product: 2048·d values stay in L2
constexpr int64_t kMaxBlockRows = 32;   // query rows per block
constexpr double kBlockBytes = 256e6;   // one thread's S, dP (double) and their baselines (float)
constexpr double kInf = std::numeric_limits<double>::infinity();

// out[r][j] = Σ_c A[r][c] · X[j][c] for j < n: A is [R][d], X is n rows of d floats (K or V), out has
// row stride ld. The product runs in T (double for the oracle, float for the baseline). One thread:
// the blocks are what runs in parallel.
template <class T>
void times_transposed(const Mat<T>& A, const float* X, int64_t n, int64_t d, T* out, int64_t ld) {
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t nc = std::min(kChunk, n - j0);
    const Mat<T> Xc = MapF(X + j0 * d, nc, d).template cast<T>();
    View<T>(out + j0, A.rows(), nc, Eigen::OuterStride<>(ld)).noalias() = A * Xc.transpose();
  }
}

// Σ_{j < n} w[j] · X[j], a [d] row, in T, keys in order.
template <class T>
std::vector<T> weighted_sum(const T* w, const float* X, int64_t n, int64_t d) {
  std::vector<T> acc(size_t(d), T(0));
  for (int64_t j = 0; j < n; ++j) {
    const T wj = w[j];
    if (wj == T(0)) continue;  // masked keys and underflowed weights add exactly nothing
    const float* x = X + j * d;
    for (int64_t k = 0; k < d; ++k) acc[size_t(k)] += wj * T(x[k]);
  }
  return acc;
}

// Keys 0 … visible(i) − 1 are the ones query row i sees (bottom-right causal mask), none if ≤ 0.
int64_t visible_keys(const Problem& p, int64_t i) {
  if (!p.causal) return p.Nk;
  return std::clamp<int64_t>(i + p.Nk - p.Nq + 1, 0, p.Nk);
}

// Where a block's row lands in the sample: its index in Sampled::rows, or −1.
struct BlockRow {
  int64_t i;
  int64_t sample;
};

// One block's terms of the sampled key rows of its K/V head, [keys][d]: added up in block order
// afterwards, so the sums do not depend on which thread ran which block.
struct KeyPart {
  std::vector<double> dk, dv;
  std::vector<float> dk_f, dv_f;
};

// One thread's matrices for a block, [rows][Nk]: S then P in place, dP then dS in place (oracle),
// and the same at the storage type (baseline).
struct Buffers {
  int64_t ld;
  std::vector<double> S, dP;
  std::vector<float> Sf, dPf;
  Buffers(int64_t rows, int64_t Nk, bool backward)
      : ld(Nk), S(size_t(rows * Nk)), dP(backward ? size_t(rows * Nk) : 0), Sf(size_t(rows * Nk)),
        dPf(backward ? size_t(rows * Nk) : 0) {}
};

class Reference {
 public:
  Reference(const Inputs& in, Sampled& s, bool backward) : in_(in), p_(in.p), s_(s), bwd_(backward) {}

  void run() {
    const size_t d = size_t(p_.d);
    s_.o.assign(s_.rows.size() * d, 0.0);
    s_.lse.assign(s_.rows.size(), 0.0);
    s_.base_o.assign(s_.rows.size() * d, 0.f);
    s_.base_lse.assign(s_.rows.size(), 0.f);
    if (bwd_) {
      s_.dq.assign(s_.rows.size() * d, 0.0);
      s_.base_dq.assign(s_.rows.size() * d, 0.f);
      s_.dk.assign(s_.keys.size() * d, 0.0);
      s_.dv.assign(s_.keys.size() * d, 0.0);
      s_.base_dk.assign(s_.keys.size() * d, 0.f);
      s_.base_dv.assign(s_.keys.size() * d, 0.f);
    }
    for (int64_t b = 0; b < p_.B; ++b)
      for (int64_t hk = 0; hk < p_.H_kv; ++hk) group(b, hk);
  }

 private:
  const Inputs& in_;
  const Problem& p_;
  Sampled& s_;
  bool bwd_;
  std::vector<int64_t> keys_;  // this K/V head's sampled keys: their indices in Sampled::keys

  void group(int64_t b, int64_t hk) {
    keys_.clear();
    if (bwd_)
      for (size_t k = 0; k < s_.keys.size(); ++k)
        if (s_.keys[k].b == b && s_.keys[k].hk == hk) keys_.push_back(int64_t(k));
    const int64_t d = p_.d;
    const float scale_f = float(p_.softmax_scale());
    for (int64_t h = hk * p_.group(); h < (hk + 1) * p_.group(); ++h) {
      std::vector<BlockRow> todo;  // the query rows of head h this pass needs
      if (!keys_.empty()) {        // dK, dV of a key row sum over every query row of the group
        for (int64_t i = 0; i < p_.Nq; ++i) todo.push_back({i, -1});
        for (size_t r = 0; r < s_.rows.size(); ++r)
          if (s_.rows[r].b == b && s_.rows[r].h == h) todo[size_t(s_.rows[r].i)].sample = int64_t(r);
      } else {
        for (size_t r = 0; r < s_.rows.size(); ++r)
          if (s_.rows[r].b == b && s_.rows[r].h == h) todo.push_back({s_.rows[r].i, int64_t(r)});
      }
      if (todo.empty()) continue;
      const double per_row = double(p_.Nk) * (bwd_ ? 24.0 : 12.0);
      const int64_t R = std::clamp<int64_t>(int64_t(kBlockBytes / per_row), 1, kMaxBlockRows);
      const int64_t blocks = (int64_t(todo.size()) + R - 1) / R;
      std::vector<KeyPart> parts(keys_.empty() ? 0 : size_t(blocks));
#pragma omp parallel
      {
        Buffers buf(std::min<int64_t>(R, int64_t(todo.size())), p_.Nk, bwd_);
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = 0; k < blocks; ++k) {
          const size_t r0 = size_t(k * R), r1 = std::min(todo.size(), size_t((k + 1) * R));
          block(b, h, hk, std::vector<BlockRow>(todo.begin() + r0, todo.begin() + r1), buf,
                parts.empty() ? nullptr : &parts[size_t(k)]);
        }
      }
      if (keys_.empty()) continue;
      // The oracle's sums in double, block by block; the baseline rounds each query head's
      // dK_h = scale·dSᵀQ and dV_h = PᵀdO (fp32 sums) before adding the heads up (in fp32).
      std::vector<float> dKh_f(keys_.size() * size_t(d), 0.f), dVh_f(keys_.size() * size_t(d), 0.f);
      for (const KeyPart& part : parts)
        for (size_t k = 0; k < keys_.size(); ++k)
          for (int64_t c = 0; c < d; ++c) {
            const size_t at = size_t(keys_[k] * d + c), mine = k * size_t(d) + size_t(c);
            s_.dk[at] += part.dk[mine];
            s_.dv[at] += part.dv[mine];
            dKh_f[mine] += part.dk_f[mine];
            dVh_f[mine] += part.dv_f[mine];
          }
      for (size_t k = 0; k < keys_.size(); ++k)
        for (int64_t c = 0; c < d; ++c) {
          const size_t at = size_t(keys_[k] * d + c), mine = k * size_t(d) + size_t(c);
          s_.base_dk[at] += round_storage(p_.dtype, scale_f * dKh_f[mine]);
          s_.base_dv[at] += round_storage(p_.dtype, dVh_f[mine]);
        }
    }
    const double scale = p_.softmax_scale();
    for (int64_t k : keys_)
      for (int64_t c = 0; c < d; ++c) {
        const size_t at = size_t(k * d + c);
        s_.dk[at] *= scale;
        s_.base_dk[at] = round_storage(p_.dtype, s_.base_dk[at]);
        s_.base_dv[at] = round_storage(p_.dtype, s_.base_dv[at]);
      }
  }

  void block(int64_t b, int64_t h, int64_t hk, const std::vector<BlockRow>& rows, Buffers& buf, KeyPart* part) {
    const Problem& p = p_;
    const int64_t d = p.d, R = int64_t(rows.size()), ld = buf.ld;
    const DType t = p.dtype;
    // Keys any row of the block sees; rows see a prefix of the keys (all of them without causal).
    int64_t n = 0;
    for (const BlockRow& r : rows) n = std::max(n, visible_keys(p, r.i));
    const float* K = in_.k.data() + p.kv_row(b, hk, 0);
    const float* V = in_.v.data() + p.kv_row(b, hk, 0);
    Mat<double> Qd(R, d), dOd;
    Mat<float> Qf(R, d), dOf;
    if (bwd_) {
      dOd.resize(R, d);
      dOf.resize(R, d);
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const size_t at = size_t(p.q_row(b, h, rows[size_t(r)].i) + c);
        Qd(r, c) = Qf(r, c) = in_.q[at];
        if (bwd_) dOd(r, c) = dOf(r, c) = in_.dO[at];
      }
    times_transposed(Qd, K, n, d, buf.S.data(), ld);
    times_transposed(Qf, K, n, d, buf.Sf.data(), ld);
    if (bwd_) {
      times_transposed(dOd, V, n, d, buf.dP.data(), ld);
      times_transposed(dOf, V, n, d, buf.dPf.data(), ld);
    }

    const double scale = p.softmax_scale();
    const float scale_f = float(scale);
    for (int64_t r = 0; r < R; ++r) {
      // Scale, mask, softmax with the row's final max (oracle and baseline), D, dS: in place.
      const int64_t vis = visible_keys(p, rows[size_t(r)].i);
      double* S = buf.S.data() + r * ld;
      float* Sf = buf.Sf.data() + r * ld;
      double* dP = bwd_ ? buf.dP.data() + r * ld : nullptr;
      float* dPf = bwd_ ? buf.dPf.data() + r * ld : nullptr;
      double L = kInf;
      float L_f = std::numeric_limits<float>::infinity();
      if (vis == 0) {  // sees no key: P = 0 (so dS = 0), O = 0, L = +inf
        std::fill(S, S + n, 0.0);
        std::fill(Sf, Sf + n, 0.f);
        if (bwd_) {
          std::fill(dP, dP + n, 0.0);
          std::fill(dPf, dPf + n, 0.f);
        }
      } else {
        double m = -kInf, l = 0;
        float m_f = -std::numeric_limits<float>::infinity(), l_f = 0.f;
        for (int64_t j = 0; j < vis; ++j) {
          S[j] *= scale;
          Sf[j] = round_storage(t, scale_f * Sf[j]);  // the baseline stores S in the storage type
          m = std::max(m, S[j]);
          m_f = std::max(m_f, Sf[j]);
        }
        for (int64_t j = 0; j < n; ++j) {
          S[j] = j < vis ? std::exp(S[j] - m) : 0.0;
          Sf[j] = j < vis ? std::exp(Sf[j] - m_f) : 0.f;
          l += S[j];
          l_f += Sf[j];
        }
        for (int64_t j = 0; j < vis; ++j) {
          S[j] /= l;
          Sf[j] = round_storage(t, Sf[j] / l_f);  // P stored in the storage type
        }
        L = m + std::log(l);
        L_f = m_f + std::log(l_f);
        if (bwd_) {
          double D = 0;
          float D_f = 0.f;
          for (int64_t j = 0; j < n; ++j) {
            dPf[j] = round_storage(t, dPf[j]);  // dP = dO Vᵀ stored in the storage type
            D += S[j] * dP[j];
            D_f += Sf[j] * dPf[j];
          }
          for (int64_t j = 0; j < n; ++j) {
            dP[j] = S[j] * (dP[j] - D);                       // dS
            dPf[j] = round_storage(t, Sf[j] * (dPf[j] - D_f));  // dS stored in the storage type
          }
        }
      }
      // A sampled row: L, O = P V (and dQ = scale · dS K).
      const int64_t at = rows[size_t(r)].sample;
      if (at < 0) continue;
      s_.lse[size_t(at)] = L;
      s_.base_lse[size_t(at)] = L_f;
      if (vis == 0) continue;  // O (and dQ) stay 0
      const std::vector<double> o = weighted_sum(S, V, n, d);
      const std::vector<float> o_f = weighted_sum(Sf, V, n, d);
      for (int64_t c = 0; c < d; ++c) {
        s_.o[size_t(at * d + c)] = o[size_t(c)];
        s_.base_o[size_t(at * d + c)] = round_storage(t, o_f[size_t(c)]);
      }
      if (!bwd_) continue;
      const std::vector<double> dq = weighted_sum(dP, K, n, d);
      const std::vector<float> dq_f = weighted_sum(dPf, K, n, d);
      for (int64_t c = 0; c < d; ++c) {
        s_.dq[size_t(at * d + c)] = scale * dq[size_t(c)];
        s_.base_dq[size_t(at * d + c)] = round_storage(t, scale_f * dq_f[size_t(c)]);
      }
    }
    if (!part) return;

    // The block's terms of the sampled key rows: dV_j += Σ_r P_rj dO_r, dK_j += Σ_r dS_rj Q_r (the
    // scale once at the end).
    const size_t nk = keys_.size();
    part->dk.assign(nk * size_t(d), 0.0);
    part->dv.assign(nk * size_t(d), 0.0);
    part->dk_f.assign(nk * size_t(d), 0.f);
    part->dv_f.assign(nk * size_t(d), 0.f);
    for (size_t k = 0; k < nk; ++k) {
      const int64_t j = s_.keys[size_t(keys_[k])].j;
      if (j >= n) continue;  // no row of the block sees key j
      for (int64_t r = 0; r < R; ++r) {
        const double P = buf.S[size_t(r * ld + j)], dS = buf.dP[size_t(r * ld + j)];
        const float P_f = buf.Sf[size_t(r * ld + j)], dS_f = buf.dPf[size_t(r * ld + j)];
        for (int64_t c = 0; c < d; ++c) {
          const size_t at = k * size_t(d) + size_t(c);
          part->dv[at] += P * dOd(r, c);
          part->dk[at] += dS * Qd(r, c);
          part->dv_f[at] += P_f * dOf(r, c);
          part->dk_f[at] += dS_f * Qf(r, c);
        }
      }
    }
  }
};

// Rows 0, 1, N/2 − 1, N/2, N − 2, N − 1 of every (b, head), `random` seeded draws over all rows,
// and the listed flat rows; as flat indices (b·heads + h)·N + i, sorted, without repeats.
std::vector<int64_t> pick_flat(int64_t B, int64_t heads, int64_t N, uint64_t seed, int random,
                               const std::vector<int64_t>& flat) {
  std::set<int64_t> out;
  const int64_t total = B * heads * N;
  for (int64_t bh = 0; bh < B * heads; ++bh)
    for (int64_t i : {int64_t(0), int64_t(1), N / 2 - 1, N / 2, N - 2, N - 1})
      if (i >= 0 && i < N) out.insert(bh * N + i);
  std::mt19937_64 g(seed);
  for (int k = 0; k < random; ++k) out.insert(int64_t(g() % uint64_t(total)));
  for (int64_t f : flat)
    if (f >= 0 && f < total) out.insert(f);
  return {out.begin(), out.end()};
}

// The first entry that fails the rule, named by its place in the full tensor (the Check from
// compare() only knows its place in the sample).
template <class Id, class Name>
void name_first_bad(Check& c, const std::vector<float>& step, const std::vector<double>& oracle, int64_t width,
                    const std::vector<Id>& ids, Name name, uint64_t seed) {
  if (c.pass) return;
  for (size_t n = 0; n < oracle.size(); ++n) {
    const double r = oracle[n], s = step[n];
    const bool ok = std::isfinite(r) ? (std::isfinite(s) && std::fabs(s - r) <= c.tol) : s == r;
    if (ok) continue;
    std::ostringstream m;
    m.precision(9);
    m << name(ids[n / size_t(width)], int64_t(n % size_t(width))) << " step=" << s << " oracle=" << r << " (seed "
      << seed << ", sampled)";
    c.first_bad = m.str();
    return;
  }
}

}  // namespace

Sampled sampled_reference(const Inputs& in, const std::vector<RowId>& rows, const std::vector<KeyId>& keys,
                          bool backward) {
  Sampled s;
  s.rows = rows;
  if (backward) s.keys = keys;
  Reference(in, s, backward).run();
  return s;
}

std::vector<RowId> pick_rows(const Problem& p, uint64_t seed, int random, const std::vector<int64_t>& flat) {
  std::vector<RowId> out;
  for (int64_t f : pick_flat(p.B, p.H, p.Nq, seed, random, flat))
    out.push_back({f / p.Nq / p.H, f / p.Nq % p.H, f % p.Nq});
  return out;
}

std::vector<KeyId> pick_keys(const Problem& p, uint64_t seed, int random, const std::vector<int64_t>& flat) {
  std::vector<KeyId> out;
  for (int64_t f : pick_flat(p.B, p.H_kv, p.Nk, seed ^ 0x9e3779b97f4a7c15ull, random, flat))
    out.push_back({f / p.Nk / p.H_kv, f / p.Nk % p.H_kv, f % p.Nk});
  return out;
}

Verdict verify_sampled(const Inputs& in, const Outputs& got, const Sampled& s, bool backward) {
  const Problem& p = in.p;
  const int64_t d = p.d, nr = int64_t(s.rows.size()), nk = int64_t(s.keys.size());
  auto gather_rows = [&](const std::vector<float>& full, int64_t width, bool per_row_vector) {
    std::vector<float> out;
    out.reserve(size_t(nr * width));
    for (const RowId& r : s.rows)
      for (int64_t c = 0; c < width; ++c)
        out.push_back(full.at(size_t(per_row_vector ? p.q_row(r.b, r.h, r.i) + c : p.lse_at(r.b, r.h, r.i))));
    return out;
  };
  auto gather_keys = [&](const std::vector<float>& full) {
    std::vector<float> out;
    out.reserve(size_t(nk * d));
    for (const KeyId& k : s.keys)
      for (int64_t c = 0; c < d; ++c) out.push_back(full.at(size_t(p.kv_row(k.b, k.hk, k.j) + c)));
    return out;
  };
  auto row_name = [](const RowId& r, int64_t c) {
    return "(" + std::to_string(r.b) + ", " + std::to_string(r.h) + ", " + std::to_string(r.i) + ", " +
           std::to_string(c) + ")";
  };
  auto lse_name = [](const RowId& r, int64_t) {
    return "(" + std::to_string(r.b) + ", " + std::to_string(r.h) + ", " + std::to_string(r.i) + ")";
  };
  auto key_name = [](const KeyId& k, int64_t c) {
    return "(" + std::to_string(k.b) + ", h_kv " + std::to_string(k.hk) + ", " + std::to_string(k.j) + ", " +
           std::to_string(c) + ")";
  };
  Verdict v;
  auto add = [&](Check c, const std::vector<float>& step, const std::vector<double>& oracle, int64_t width,
                 auto& ids, auto name) {
    name_first_bad(c, step, oracle, width, ids, name, in.seed);
    v.checks.push_back(c);
  };
  {
    const std::vector<float> o = gather_rows(got.o, d, true), l = gather_rows(got.lse, 1, false);
    add(compare("O", o, s.o, s.base_o, {nr, d}, p.dtype, in.seed), o, s.o, d, s.rows, row_name);
    add(compare("L", l, s.lse, s.base_lse, {nr}, DType::f32, in.seed), l, s.lse, 1, s.rows, lse_name);
  }
  if (backward) {
    const std::vector<float> dq = gather_rows(got.dq, d, true), dk = gather_keys(got.dk), dv = gather_keys(got.dv);
    add(compare("dQ", dq, s.dq, s.base_dq, {nr, d}, p.dtype, in.seed), dq, s.dq, d, s.rows, row_name);
    add(compare("dK", dk, s.dk, s.base_dk, {nk, d}, p.dtype, in.seed), dk, s.dk, d, s.keys, key_name);
    add(compare("dV", dv, s.dv, s.base_dv, {nk, d}, p.dtype, in.seed), dv, s.dv, d, s.keys, key_name);
  }
  v.pass = !v.checks.empty();
  for (const Check& c : v.checks) {
    v.pass = v.pass && c.pass;
    v.tol_used = std::max(v.tol_used, c.frac);
  }
  return v;
}

}  // namespace fl
