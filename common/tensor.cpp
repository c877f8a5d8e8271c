// flashladder — common/tensor.cpp. Rounding uses Eigen's half and bfloat16 (round to nearest even,
// the same rule as CUDA's __float2half_rn and __float2bfloat16_rn), not a hand-written bit trick.
#include "common/tensor.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <limits>
#include <random>

namespace fl {

float round_to(DType t, float x) {
  switch (t) {
    case DType::f32: return x;
    case DType::f16: return static_cast<float>(Eigen::half(x));
    case DType::bf16: return static_cast<float>(Eigen::bfloat16(x));
  }
  return x;
}

void round_all(DType t, std::vector<float>& xs) {
  if (t == DType::f32) return;
  for (float& x : xs) x = round_to(t, x);
}

std::vector<uint8_t> pack(DType t, const std::vector<float>& xs) {
  std::vector<uint8_t> out(xs.size() * size_t(dtype_bytes(t)));
  if (t == DType::f32) {
    if (!xs.empty()) std::memcpy(out.data(), xs.data(), out.size());
    return out;
  }
  auto* u = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < xs.size(); ++i)
    u[i] = t == DType::f16 ? Eigen::numext::bit_cast<uint16_t>(Eigen::half(xs[i]))
                           : Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(xs[i]));
  return out;
}

std::vector<float> unpack(DType t, const void* bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (t == DType::f32) {
    if (n) std::memcpy(out.data(), bytes, size_t(n) * 4);
    return out;
  }
  const auto* u = static_cast<const uint16_t*>(bytes);
  for (int64_t i = 0; i < n; ++i)
    out[i] = t == DType::f16 ? float(Eigen::numext::bit_cast<Eigen::half>(u[i]))
                             : float(Eigen::numext::bit_cast<Eigen::bfloat16>(u[i]));
  return out;
}

std::vector<float> poisoned(int64_t n) {
  return std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN());
}

namespace {
// Box–Muller on the raw 64-bit outputs of std::mt19937_64, whose sequence the standard fixes.
struct Normal {
  std::mt19937_64 gen;
  bool have = false;
  double spare = 0;
  explicit Normal(uint64_t seed) : gen(seed) {}
  double uniform() { return (double(gen() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0,1)
  double next() {
    if (have) { have = false; return spare; }
    double u1 = uniform(), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
    spare = r * std::sin(th);
    have = true;
    return r * std::cos(th);
  }
};

std::vector<float> normal(Normal& g, int64_t n, double mean, double scale, DType t) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& e : x) e = round_to(t, float(scale * (g.next() + mean)));
  return x;
}
}  // namespace

size_t host_memory_bytes() {
  // MemTotal + SwapTotal, from /proc/meminfo (Linux); 0 when it cannot be read (then nothing is refused).
  // Not MemAvailable: a page cache full of files is memory a run can still have.
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kib = 0, total = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemTotal:" || key == "SwapTotal:") total += kib * 1024;
  return total;
}

void require_host_memory(size_t bytes, const std::string& what) {
  const size_t have = host_memory_bytes();
  if (have > 0 && bytes > have)
    throw Error(what + " need " + std::to_string(bytes) + " bytes of host memory; this machine has " +
                std::to_string(have) + " bytes (memory + swap): choose a smaller problem");
}

Inputs make_inputs(const Problem& p, uint64_t seed, InputOptions opt) {
  p.validate();
  // Refused before allocating: with the kernel's memory overcommit on, a vector larger than the machine
  // is granted, and the process is killed while filling it instead of failing cleanly.
  require_host_memory(size_t(2 * p.q_elems() + 2 * p.kv_elems()) * sizeof(float),
                      "the inputs of " + p.describe() + " (Q, K, V, dO as fp32 on the host)");
  Inputs in;
  in.p = p;
  in.seed = seed;
  in.opt = opt;
  Normal g(seed);
  in.q = normal(g, p.q_elems(), opt.mean, opt.q_scale, p.dtype);
  in.k = normal(g, p.kv_elems(), opt.mean, 1.0, p.dtype);
  in.v = normal(g, p.kv_elems(), opt.mean, 1.0, p.dtype);
  in.dO = normal(g, p.q_elems(), opt.mean, 1.0, p.dtype);
  if (p.alibi == Alibi::heads) in.alibi_slopes = alibi_slopes_for(p.H);
  if (p.alibi == Alibi::batch_heads) in.alibi_slopes = alibi_slopes_batch(p.B, p.H, seed);
  return in;
}

std::vector<float> alibi_slopes_for(int64_t H) {
  // 2^(−8i/n) for i = 1 … n, n a power of two.
  auto pow2 = [](int64_t n) {
    std::vector<float> s;
    for (int64_t i = 1; i <= n; ++i) s.push_back(float(std::exp2(-8.0 * double(i) / double(n))));
    return s;
  };
  int64_t n = 1;
  while (2 * n <= H) n *= 2;
  std::vector<float> s = pow2(n);
  const std::vector<float> extra = pow2(2 * n);
  for (int64_t i = 0; int64_t(s.size()) < H; i += 2) s.push_back(extra[size_t(i)]);
  s.resize(size_t(std::max<int64_t>(H, 0)));
  return s;
}

std::vector<float> alibi_slopes_batch(int64_t B, int64_t H, uint64_t seed) {
  const std::vector<float> base = alibi_slopes_for(H);
  std::mt19937_64 gen(seed ^ 0xa11b1u);
  std::vector<float> s;
  s.reserve(size_t(B * H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double u = double(gen() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;  // [−1, 1)
      s.push_back(float(double(base[size_t(h)]) * std::exp2(u)));
    }
  return s;
}

std::string alibi_slopes_reason(const Problem& p, const std::vector<float>& slopes) {
  const int64_t want = p.alibi_elems();
  if (int64_t(slopes.size()) != want) {
    std::string shape = p.alibi == Alibi::none ? "none (the problem has no ALiBi)"
                        : p.alibi == Alibi::heads ? "[H] = [" + std::to_string(p.H) + "] for alibi=heads"
                                                  : "[B][H] = [" + std::to_string(p.B) + "][" + std::to_string(p.H) +
                                                        "] for alibi=batch_heads";
    return "alibi_slopes has " + std::to_string(slopes.size()) + " values; the problem needs " + std::to_string(want) +
           ": " + shape;
  }
  for (size_t n = 0; n < slopes.size(); ++n)
    if (!std::isfinite(slopes[n]))
      return "alibi_slopes[" + std::to_string(n) + "] = " + std::to_string(slopes[n]) + " is not allowed: slopes must be finite";
  return "";
}

void require_alibi_slopes(const Problem& p, const std::vector<float>& slopes) {
  const std::string why = alibi_slopes_reason(p, slopes);
  if (!why.empty()) throw Error(why);
}

}  // namespace fl
