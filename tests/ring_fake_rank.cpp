// flashladder — tests/ring_fake_rank.cpp: a CPU stand-in for steps/11_ring_attention/ring.cu, linked
// into flashladder_ring_launcher (tests only) so that the launcher of app/ring_cmd.cpp — fork, the NCCL
// id through pipes, outputs through shared memory, reaping, ending the peers of a failed rank, the
// oracle check — is tested on machines without GPUs or NCCL. Each fake rank writes the oracle's own
// answer (rounded to the storage type) into its rows, so the launcher's check must pass; switches in
// the environment make it fail in the ways a real rank can:
//   FLASHLADDER_RING_FAIL_RANK=r   rank r throws (as ring.cu's hook does)
//   FAKE_RING_HANG_RANK=r          rank r never returns (a rank stuck in NCCL waiting for a dead peer)
//   FAKE_RING_NAN_RANK=r           rank r leaves one O entry unwritten (NaN)
//   FAKE_RING_GPUS=n               the machine has n GPUs (default 2)
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reference/oracle.hpp"
#include "steps/11_ring_attention/ring.hpp"

namespace fl::ring {

namespace {
int env_rank(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : -1;
}
char id_byte(int i) { return char(i * 7 + 1); }
}  // namespace

void make_unique_id(char id[kUniqueIdBytes]) {
  for (int i = 0; i < kUniqueIdBytes; ++i) id[i] = id_byte(i);
}

int device_count(std::string* why) {
  *why = "fake GPUs of tests/ring_fake_rank.cpp";
  const char* v = std::getenv("FAKE_RING_GPUS");
  return v && *v ? std::atoi(v) : 2;
}

void run_rank(const RankConfig& cfg, int rank, const char id[kUniqueIdBytes], const Inputs* in, SharedOutputs out,
              RankReport* rep) {
  const Plan& P = cfg.plan;
  const Problem& p = P.p;
  if (P.G > 1)
    for (int i = 0; i < kUniqueIdBytes; ++i)
      if (id[i] != id_byte(i)) throw Error("rank " + std::to_string(rank) + ": the unique id arrived damaged");
  if (env_rank("FLASHLADDER_RING_FAIL_RANK") == rank)
    throw Error("rank " + std::to_string(rank) + ": failure injected by FLASHLADDER_RING_FAIL_RANK");
  if (env_rank("FAKE_RING_HANG_RANK") == rank)
    for (;;) pause();
  std::snprintf(rep->device, sizeof rep->device, "fake GPU %d", rank);
  std::snprintf(rep->fwd_step, sizeof rep->fwd_step, "fake");
  if (cfg.backward) std::snprintf(rep->bwd_step, sizeof rep->bwd_step, "fake");
  if (in && cfg.check) {
    const ref::Forward f = ref::forward(*in);
    ref::Backward b;
    if (cfg.backward) b = ref::backward(*in, f);
    for (int i = 0; i < P.slots(); ++i) {
      const int c = P.chunk_of(rank, i);
      for (int64_t x = P.start[size_t(c)]; x < P.start[size_t(c)] + P.len[size_t(c)]; ++x)
        for (int64_t bb = 0; bb < p.B; ++bb) {
          for (int64_t h = 0; h < p.H; ++h) {
            out.lse[p.lse_at(bb, h, x)] = float(f.lse[size_t(p.lse_at(bb, h, x))]);
            for (int64_t k = 0; k < p.d; ++k) {
              const int64_t at = p.q_row(bb, h, x) + k;
              out.o[at] = round_to(p.dtype, float(f.o[size_t(at)]));
              if (cfg.backward) out.dq[at] = round_to(p.dtype, float(b.dq[size_t(at)]));
            }
          }
          if (cfg.backward)
            for (int64_t h = 0; h < p.H_kv; ++h)
              for (int64_t k = 0; k < p.d; ++k) {
                const int64_t at = p.kv_row(bb, h, x) + k;
                out.dk[at] = round_to(p.dtype, float(b.dk[size_t(at)]));
                out.dv[at] = round_to(p.dtype, float(b.dv[size_t(at)]));
              }
        }
    }
    if (env_rank("FAKE_RING_NAN_RANK") == rank) out.o[p.q_row(0, 0, P.start[size_t(P.chunk_of(rank, 0))])] = NAN;
  }
  for (Timing* t : {&rep->fwd, &rep->bwd}) {
    t->reps = cfg.reps;
    t->total_median = t->total_min = t->total_p90 = 1 + rank;
    t->busy_median = 0.5 + rank;
  }
  rep->fwd.steps = P.G;  // the forward's ring steps, the backward's phases: what ring.cu reports
  for (int s = 0; s < P.G; ++s) rep->fwd.pairs[s] = int(P.pairs(rank, s).size());
  const std::vector<Phase> phases = P.backward_phases(rank);
  rep->bwd.steps = int(phases.size());
  for (size_t k = 0; k < phases.size(); ++k) rep->bwd.pairs[k] = int(phases[k].pairs.size());
  rep->ok = 1;
}

}  // namespace fl::ring
