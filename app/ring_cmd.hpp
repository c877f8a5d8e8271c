// flashladder — app/ring_cmd.hpp: `flashladder ring`, step 11 (ring attention across GPUs on NCCL).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "app/commands.hpp"

namespace fl::cli {

struct RingOptions {
  ProblemOptions prob;
  int gpus = 2;
  bool backward = false;
  std::string layout = "zigzag";   // contiguous | zigzag
  std::string json;                // JSONL output path (appended)
  std::string check = "auto";      // auto | full | sampled | none
  int check_kv_heads = 2;          // sampled: K/V heads whose dK, dV rows are checked (each costs a full CPU pass)
  bool check_kv_heads_given = false;  // set on the command line: then it may not exceed H_kv (the default clamps)
  std::string step, bwd_step;      // local steps; "" = the ladder's last that accepts every pair
  bool bitwise_local = false;      // G = 1, contiguous: the ring must equal the local steps bit for bit
  int reps = 20, warmup = 3;
  int timeout_s = 1200;            // the whole run; then every rank is ended and the run fails
  int nccl_ctas = 0;               // > 0: NCCL's kernels use at most this many thread blocks; 0: NCCL's choice
};

/// Adds the `ring` subcommand and its options to app; returns it.
CLI::App* add_ring_command(CLI::App& app, RingOptions& o);
/// Runs it: exit 0 pass, 1 a check failed, 2 bad input or a rank failed (named).
int run_ring(const RingOptions& o);

}  // namespace fl::cli
