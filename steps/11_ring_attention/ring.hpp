// flashladder — steps/11_ring_attention/ring.hpp: one rank of the ring (ring.cu, built only where
// NCCL was found). The program (app/ring_cmd.cpp) forks one process per GPU and calls run_rank in each;
// nothing here knows about processes, and nothing in this header needs CUDA or NCCL, so the launcher
// compiles without them.
#pragma once

#include <cstdint>
#include <string>

#include "common/tensor.hpp"
#include "steps/11_ring_attention/plan.hpp"

namespace fl::ring {

constexpr int kMaxRanks = 16;           // single host: 8 GPUs is the usual most; 16 leaves room
constexpr int kUniqueIdBytes = 128;     // NCCL_UNIQUE_ID_BYTES (ring.cu checks that they agree)

/// One pass (forward or backward) timed on one rank: medians over the timed repetitions (ms). total:
/// from the start to the end of the ring on the compute stream; busy: the sum of the compute of all
/// entries; per entry s: compute (the local kernels, merges and sums of it, from the arrival of its K|V;
/// a wait for an incoming dK, dV sum counts as compute) and transfer (the NCCL group beside it on its
/// own stream, from the moment the stream may start it: a wait for the peer counts as transfer; 0 where
/// nothing moves). The forward's entries are its ring steps 0 … G − 1; the backward's are its phases
/// (plan.hpp's Phase: one for G = 1, else G + 1: own keys part A, ring steps 1 … G − 1, own keys part
/// B beside the final hop of the dK, dV sums; part B's compute is its pairs only, so the hop hides while
/// it is shorter, and the pass that writes dK, dV after the hop is in no entry).
struct Timing {
  int reps = 0;
  double total_median = 0, total_min = 0, total_p90 = 0, busy_median = 0;
  int steps = 0;               // entries below
  double compute_ms[kMaxRanks + 1] = {}, transfer_ms[kMaxRanks + 1] = {};
  int pairs[kMaxRanks + 1] = {};  // pairs computed in each entry (0: the rank idles there)
};

/// What one rank reports back to the launcher through shared memory: plain data only (it crosses a
/// fork), fixed-size strings.
struct RankReport {
  int ok = 0;                  // 1 when the rank finished without an error
  char error[2048] = {};       // the error, naming the rank and the call
  char device[256] = {};       // the GPU's name
  int sm_count = 0;
  char cuda[16] = {}, driver[16] = {};
  char fwd_step[64] = {}, bwd_step[64] = {};  // the ladder steps used locally
  int bitwise = -1;            // --bitwise-local: 1 equal, 0 not (G = 1 only), -1 not asked
  char bitwise_note[1024] = {};
  Timing fwd, bwd;             // the forward, and (with --backward) the backward on the forward's O, L
};

/// Full-size host outputs (float, the whole problem's layout) that every rank writes its rows into.
struct SharedOutputs {
  float *o = nullptr, *lse = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

struct RankConfig {
  Plan plan;
  std::string fwd_step, bwd_step;  // "" : the last forward (backward) step of the ladder that accepts every pair
  bool backward = false;
  bool check = true;        // run once with poisoned outputs and write them into `out`
  bool bitwise_local = false;  // G = 1: compare with the local steps run on the whole problem
  int warmup = 2, reps = 10;   // reps = 0: no timing
  uint64_t seed = 1;
  int nccl_ctas = 0;           // > 0: ncclConfig_t::maxCTAs, the most SMs NCCL's kernels take; 0: NCCL's choice
};

/// Rank 0 makes the NCCL unique id (the launcher must not touch CUDA or NCCL before forking).
void make_unique_id(char id[kUniqueIdBytes]);

/// Runs one rank: cudaSetDevice(rank), NCCL communicator (G > 1), the checked run (when in != null
/// and cfg.check), then the timed runs. Errors are thrown as fl::Error naming the rank and the call;
/// the communicator is aborted first, so the peers' NCCL calls fail instead of waiting forever.
void run_rank(const RankConfig& cfg, int rank, const char id[kUniqueIdBytes], const Inputs* in,
              SharedOutputs out, RankReport* rep);

/// The number of CUDA devices and the first one's name ("" and *why when none). Call it only in a
/// process that will not fork a CUDA user afterwards (the launcher runs it in a child of its own).
int device_count(std::string* why);

}  // namespace fl::ring
