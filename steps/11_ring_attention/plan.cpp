// flashladder — steps/11_ring_attention/plan.cpp: chunks, slots and pairs of the ring (see plan.hpp).
#include "steps/11_ring_attention/plan.hpp"

#include <algorithm>

namespace fl::ring {

namespace {
int64_t ceil32(int64_t n) { return (n + 31) / 32 * 32; }
}  // namespace

const char* layout_name(Layout l) { return l == Layout::zigzag ? "zigzag" : "contiguous"; }

std::string make_plan(const Problem& p, int G, Layout layout, Plan* out) {
  const std::string bad = p.invalid_reason();
  if (!bad.empty()) return "invalid problem: " + bad;
  if (G < 1) return "--gpus " + std::to_string(G) + " is not allowed: a ring needs at least 1 rank";
  if (p.Nq != p.Nk)
    return "ring attention splits one sequence into query and key slices, so it needs Nq = Nk; got Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk);
  Plan x;
  x.p = p;
  x.G = G;
  x.layout = layout;
  x.chunks = layout == Layout::zigzag ? 2 * G : G;
  const int64_t N = p.Nq, C = x.chunks;
  if (N < C)
    return "the sequence does not split: N = " + std::to_string(N) + " is less than the " + std::to_string(C) +
           " chunks of the " + layout_name(layout) + " layout on " + std::to_string(G) +
           " GPUs (N must be at least " + (layout == Layout::zigzag ? "2·G" : "G") + " = " + std::to_string(C) +
           ", one position per chunk)";
  int64_t at = 0;
  for (int64_t c = 0; c < C; ++c) {
    x.start.push_back(at);
    x.len.push_back(N / C + (c < N % C ? 1 : 0));  // the first N mod C chunks one longer
    at += x.len.back();
  }
  *out = std::move(x);
  return "";
}

int64_t Plan::pair_keys(const Pair& x) const {
  int64_t used = 0;
  for (int j = 0; j < x.k_slots; ++j) used += len[size_t(chunk_of(x.origin, j))];
  return used;
}

Problem Plan::pair_problem(const Pair& x) const {
  Problem q = p;
  q.Nq = len[size_t(x.q_chunk)];
  q.Nk = kv_rows(x.origin);
  const int64_t used = pair_keys(x);
  if (used < q.Nk) q.seqused_k.assign(size_t(p.B), int32_t(used));
  q.causal = x.kind == Kind::causal;
  q.scale = p.softmax_scale();  // the whole problem's scale, whatever the default would say
  return q;
}

std::vector<Pair> Plan::pairs(int r, int s) const {
  std::vector<Pair> out;
  const int o = origin(r, s);
  for (int i = 0; i < slots(); ++i) {
    const int qc = chunk_of(r, i);
    // The key slots are in position order, so the visible ones are a prefix; the diagonal ends it.
    int k = 0;
    bool diagonal = false;
    while (k < slots() && (!p.causal || chunk_of(o, k) <= qc)) {
      diagonal = diagonal || (p.causal && chunk_of(o, k) == qc);
      ++k;
    }
    // k = 0: every key of the K, V in hand lies after every query of the chunk: nothing to compute
    if (k > 0) out.push_back({i, qc, o, k, diagonal ? Kind::causal : Kind::full});
  }
  return out;
}

int64_t Plan::q_slot_offset(int r, int slot) const {
  int64_t off = 0;
  for (int i = 0; i < slot; ++i) off += p.B * p.H * len[size_t(chunk_of(r, i))] * p.d;
  return off;
}
int64_t Plan::lse_slot_offset(int r, int slot) const {
  // Each slot's L starts on a 128-byte boundary (32 floats): a step may read L with vector loads, and
  // B·H·len floats alone would leave the second slot 4, 8 or 12 bytes off (B = 2, H = 3, len = 257).
  int64_t off = 0;
  for (int i = 0; i < slot; ++i) off += ceil32(p.B * p.H * len[size_t(chunk_of(r, i))]);
  return off;
}
int64_t Plan::q_elems(int r) const { return q_slot_offset(r, slots()); }
int64_t Plan::lse_elems(int r) const { return lse_slot_offset(r, slots()); }
int64_t Plan::kv_row(int r, int slot) const {
  int64_t row = 0;
  for (int i = 0; i < slot; ++i) row += len[size_t(chunk_of(r, i))];
  return row;
}
int64_t Plan::kv_rows(int r) const { return kv_row(r, slots()); }
int64_t Plan::kv_elems(int r) const { return p.B * p.H_kv * kv_rows(r) * p.d; }
int64_t Plan::max_chunk() const {
  int64_t m = 0;
  for (int64_t l : len) m = std::max(m, l);
  return m;
}

std::vector<Phase> Plan::backward_phases(int r) const {
  std::vector<Phase> out;
  if (G == 1) {  // a ring of one: the local step on the own pairs, nothing moves
    Phase x;
    x.origin = r;
    x.pairs = pairs(r, 0);
    out.push_back(std::move(x));
    return out;
  }
  const std::vector<Pair> own = pairs(r, 0);
  Phase a, b;
  a.origin = b.origin = r;
  a.dkv = DkvRole::keep;
  b.dkv = DkvRole::finish;
  for (const Pair& x : own) (own_part_a(x) ? a.pairs : b.pairs).push_back(x);
  a.kv_send = r;                // the own K|V to r + 1 …
  a.kv_recv = origin(r, 1);     // … and origin r − 1's from r − 1, for step 1
  out.push_back(std::move(a));
  for (int s = 1; s < G; ++s) {
    Phase x;
    x.origin = origin(r, s);
    x.pairs = pairs(r, s);
    x.dkv = s == 1 ? DkvRole::start : DkvRole::add;
    if (s < G - 1) {
      x.kv_send = x.origin;
      x.kv_recv = origin(r, s + 1);
    }
    if (s >= 2) {
      x.dkv_send = origin(r, s - 1);  // finished at step s − 1
      x.dkv_recv = x.origin;          // finished by r − 1 at its step s − 1
    }
    out.push_back(std::move(x));
  }
  b.dkv_send = origin(r, G - 1);  // = r + 1: the sum finished at step G − 1 goes to its owner
  b.dkv_recv = r;                 // this rank's own, finished by r − 1 at its step G − 1
  out.push_back(std::move(b));
  return out;
}

std::string Plan::backward_phase_label(int k) const {
  if (G == 1) return "0";
  if (k == 0) return "own keys, part A";
  if (k == G) return "own keys, part B";
  return std::to_string(k);
}

std::string Plan::moves_text(const Phase& x) {
  const bool kv = x.kv_send >= 0 || x.kv_recv >= 0, dkv = x.dkv_send >= 0 || x.dkv_recv >= 0;
  if (kv && dkv) return "K|V, dK|dV";
  if (kv) return "K|V";
  if (!dkv) return "";
  return x.dkv == DkvRole::finish ? "dK|dV to its owner" : "dK|dV";
}

double Plan::work(int r, int s) const {
  double w = 0;
  for (const Pair& x : pairs(r, s)) {
    const double lq = double(len[size_t(x.q_chunk)]);
    w += lq * double(pair_keys(x)) - (x.kind == Kind::causal ? lq * lq / 2 : 0);
  }
  return w;
}

}  // namespace fl::ring
