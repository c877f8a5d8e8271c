// flashladder — common/problem.cpp: validation, names and the FLOP convention.
#include "common/problem.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

namespace fl {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "f32" || s == "float" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "f16" || s == "half" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  return std::nullopt;
}

int dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

const char* alibi_name(Alibi a) {
  switch (a) {
    case Alibi::none: return "none";
    case Alibi::heads: return "heads";
    case Alibi::batch_heads: return "batch_heads";
  }
  return "?";
}

std::optional<Alibi> parse_alibi(const std::string& s) {
  for (Alibi a : {Alibi::none, Alibi::heads, Alibi::batch_heads})
    if (s == alibi_name(a)) return a;
  return std::nullopt;
}

bool Problem::has_variant() const {
  return windowed() || softcap.has_value() || alibi != Alibi::none || varlen() || !seqused_k.empty();
}

std::string Problem::variants_text() const {
  std::ostringstream s;
  if (windowed()) s << " window=(" << window_left << "," << window_right << ")";
  if (softcap) s << " softcap=" << *softcap;
  if (alibi != Alibi::none) s << " alibi=" << alibi_name(alibi);
  if (varlen()) s << " varlen";
  if (!seqused_k.empty()) s << " seqused_k";
  const std::string t = s.str();
  return t.empty() ? t : t.substr(1);
}

std::vector<int64_t> Problem::q_shape() const {
  return varlen() ? std::vector<int64_t>{total_q(), H, d} : std::vector<int64_t>{B, H, Nq, d};
}
std::vector<int64_t> Problem::kv_shape() const {
  return varlen() ? std::vector<int64_t>{total_k(), H_kv, d} : std::vector<int64_t>{B, H_kv, Nk, d};
}
std::vector<int64_t> Problem::lse_shape() const {
  return varlen() ? std::vector<int64_t>{H, total_q()} : std::vector<int64_t>{B, H, Nq};
}

namespace {

// 2^40 elements (4 TiB of fp32) per tensor keeps every index product inside int64 with room; each size,
// and each window, is at most that too (the golden files' limit), so that no product of two overflows.
constexpr int64_t kMaxSize = int64_t(1) << 40;

// Why the variant fields of p are malformed, appended to e (the sizes B, Nq, Nk are valid here).
void variant_reasons(const Problem& p, std::ostringstream& e) {
  for (auto [name, w] : {std::pair{"window_left", p.window_left}, std::pair{"window_right", p.window_right}}) {
    if (w < -1)
      e << name << " = " << w << " is not allowed: it must be -1 (unbounded) or a number of keys >= 0. ";
    else if (w > kMaxSize)  // the golden files' limit too, so that what is written can be read back
      e << name << " = " << w << " is more than 2^40 keys, the limit: -1 is the unbounded window. ";
  }
  if (p.softcap && !(std::isfinite(*p.softcap) && *p.softcap > 0))
    e << "softcap = " << *p.softcap << " is not allowed: it must be finite and > 0 (leave it unset for no softcap). ";
  const int64_t want = p.B + 1;
  bool offsets_ok = true;
  if (p.cu_seqlens_q.empty() != p.cu_seqlens_k.empty()) {
    e << (p.cu_seqlens_q.empty() ? "cu_seqlens_k is given without cu_seqlens_q" : "cu_seqlens_q is given without cu_seqlens_k")
      << ": a variable-length problem needs both (B + 1 = " << want << " offsets each). ";
    offsets_ok = false;
  }
  auto offsets = [&](const char* name, const std::vector<int32_t>& cu, int64_t max_len, const char* max_name,
                     const char* what) {
    if (cu.empty()) return;
    if (int64_t(cu.size()) != want) {
      e << name << " has " << cu.size() << " entries; it must have B + 1 = " << want << " (one offset per sequence, then the total). ";
      offsets_ok = false;
      return;
    }
    if (cu[0] != 0) {
      e << name << "[0] = " << cu[0] << " is not allowed: the offsets must start at 0. ";
      offsets_ok = false;
      return;
    }
    for (int64_t b = 0; b < p.B; ++b) {
      if (cu[b + 1] < cu[b]) {
        e << name << "[" << b + 1 << "] = " << cu[b + 1] << " is less than " << name << "[" << b << "] = " << cu[b]
          << ": the offsets must not decrease. ";
        offsets_ok = false;
        return;
      }
      if (int64_t(cu[b + 1]) - cu[b] > max_len) {
        e << "sequence " << b << " has " << int64_t(cu[b + 1]) - cu[b] << " " << what << " (" << name << "[" << b + 1
          << "] - " << name << "[" << b << "]), more than " << max_name << " = " << max_len
          << ", the longest a sequence may be (with variable length " << max_name << " is the maximum sequence length). ";
        offsets_ok = false;
        return;
      }
    }
    if (cu.back() < 1) {
      e << name << "[B] = 0: the batch holds no " << what << ". ";
      offsets_ok = false;
    }
  };
  offsets("cu_seqlens_q", p.cu_seqlens_q, p.Nq, "Nq", "queries");
  offsets("cu_seqlens_k", p.cu_seqlens_k, p.Nk, "Nk", "keys");
  if (!p.seqused_k.empty()) {
    if (int64_t(p.seqused_k.size()) != p.B) {
      e << "seqused_k has " << p.seqused_k.size() << " entries; it must have B = " << p.B << " (one per sequence). ";
    } else if (offsets_ok) {
      for (int64_t b = 0; b < p.B; ++b) {
        if (p.seqused_k[b] < 0) {
          e << "seqused_k[" << b << "] = " << p.seqused_k[b] << " is not allowed: it must be >= 0. ";
          break;
        }
        if (p.seqused_k[b] > p.keys_stored(b)) {
          e << "seqused_k[" << b << "] = " << p.seqused_k[b] << " is more than the " << p.keys_stored(b)
            << " keys sequence " << b << " holds (" << (p.varlen() ? "cu_seqlens_k" : "Nk") << "). ";
          break;
        }
      }
    }
  }
}

}  // namespace

std::string Problem::invalid_reason() const {
  std::ostringstream e;
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) e << name << " = " << v << " is not allowed: it must be at least 1. ";
  };
  positive("B", B);
  positive("H", H);
  positive("H_kv", H_kv);
  positive("Nq", Nq);
  positive("Nk", Nk);
  positive("d", d);
  for (auto [name, v] : {std::pair{"B", B}, std::pair{"H", H}, std::pair{"H_kv", H_kv}, std::pair{"Nq", Nq},
                         std::pair{"Nk", Nk}, std::pair{"d", d}})
    if (v > kMaxSize) e << name << " = " << v << " is more than the limit 2^40. ";
  if (H >= 1 && H_kv >= 1 && H % H_kv != 0)
    e << "H = " << H << " is not a multiple of H_kv = " << H_kv
      << ": each K/V head must serve a whole number of query heads (MQA/GQA). ";
  if (scale && !(std::isfinite(*scale) && *scale > 0))
    e << "softmax scale = " << *scale << " is not allowed: it must be finite and > 0. ";
  if (e.str().empty()) variant_reasons(*this, e);
  if (e.str().empty()) {
    // In double: B · Nq of two sizes under 2^40 each wraps int64 (B = 2^62, N = 4 read as 0 elements, and
    // the oracle then read far out of bounds).
    const double rows_q = varlen() ? double(total_q()) : double(B) * double(Nq);
    const double rows_k = varlen() ? double(total_k()) : double(B) * double(Nk);
    const double q = rows_q * double(H) * double(d), kv = rows_k * double(H_kv) * double(d);
    if (q > double(kMaxSize) || kv > double(kMaxSize))
      e << "the problem has " << (q > kv ? q : kv) << " elements in one tensor; the limit is 2^40. ";
  }
  std::string s = e.str();
  if (!s.empty()) s.pop_back();
  return s;
}

void Problem::validate() const {
  std::string why = invalid_reason();
  if (!why.empty()) throw Error("invalid problem: " + why);
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << B << " H=" << H << " H_kv=" << H_kv << " Nq=" << Nq << " Nk=" << Nk << " d=" << d
    << " causal=" << (causal ? 1 : 0) << " " << dtype_name(dtype) << " scale=" << softmax_scale()
    << (deterministic ? " deterministic" : "");
  if (has_variant()) s << " " << variants_text();
  return s.str();
}

double Problem::visible_pairs() const {
  const bool per_sequence = varlen() || !seqused_k.empty();
  double pairs = 0;
  for (int64_t b = 0; b < (per_sequence ? B : 1); ++b) {
    const int64_t nq = seqlen_q(b), nk = seqlen_k(b);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t diag = i + nk - nq;
      int64_t lo = 0, hi = nk - 1;
      if (causal) hi = std::min(hi, diag);
      // A window of nq + nk keys or more masks nothing on its side (and diag ± it could overflow).
      if (window_right >= 0 && window_right < nq + nk) hi = std::min(hi, diag + window_right);
      if (window_left >= 0 && window_left < nq + nk) lo = std::max(lo, diag - window_left);
      if (hi >= lo) pairs += double(hi - lo + 1);
    }
  }
  return per_sequence ? pairs : pairs * double(B);
}

double flops_forward(const Problem& p) {
  if (p.windowed()) return 4.0 * p.H * p.d * p.visible_pairs();
  if (p.varlen() || !p.seqused_k.empty()) {
    double f = 0;
    for (int64_t b = 0; b < p.B; ++b) f += 4.0 * p.H * double(p.seqlen_q(b)) * double(p.seqlen_k(b)) * p.d;
    return p.causal ? f / 2 : f;
  }
  double f = 4.0 * p.B * p.H * double(p.Nq) * double(p.Nk) * p.d;
  return p.causal ? f / 2 : f;
}

double flops_backward(const Problem& p) { return 2.5 * flops_forward(p); }

}  // namespace fl
