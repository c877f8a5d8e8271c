// flashladder — app/ring_cmd.cpp: `flashladder ring`, step 11 on G GPUs of one host.
//
// The launcher forks one process per GPU (rank r uses device r) and waits for them. Why processes and
// not threads: it is the shape of every multi-GPU training job (one process per GPU, as MPI or
// torchrun start them), so the rank code (steps/11_ring_attention/ring.cu) is the same as it would be
// across hosts; only this launcher is single-host. No MPI is needed: the NCCL unique id that the ranks
// share is made by rank 0 and handed to the others through pipes the parent opened before forking.
//
// The parent never touches CUDA or NCCL: a CUDA context does not survive fork(), so a parent that
// initialised CUDA would leave its children unable to use it. It counts the GPUs in a child of its own,
// makes the seeded inputs (when checking) before forking, so the ranks inherit them, and gets the
// outputs and timings back through shared memory (mmap, MAP_SHARED). It then checks O, L (and dQ, dK,
// dV) against the fp64 oracle by the tolerance rule — the full oracle for small problems, sampled rows
// (reference/sampled.hpp) for long ones — and writes one JSON record per pass.
//
// A rank that fails prints its error, aborts its NCCL communicator and exits non-zero; the parent then
// ends the other ranks (SIGTERM, then SIGKILL) so none waits forever on a peer that is gone, and names
// the rank that failed. A run past --timeout is ended the same way.
#include "app/ring_cmd.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "app/record.hpp"
#include "app/runner.hpp"
#include "reference/verify.hpp"
#include "steps/11_ring_attention/plan.hpp"
#include "steps/11_ring_attention/ring.hpp"
#include "reference/sampled.hpp"

#ifndef FLASHLADDER_NCCL_WHY
#define FLASHLADDER_NCCL_WHY "NCCL was not looked for"
#endif

namespace fl::cli {

CLI::App* add_ring_command(CLI::App& app, RingOptions& o) {
  CLI::App* c = app.add_subcommand(
      "ring",
      "Step 11: ring attention on G GPUs of this host over NCCL (one process per GPU), checked against the "
      "oracle and timed; exit 0 pass, 1 a check failed, 2 bad input or a failed rank");
  o.prob.add_to(*c);
  c->add_option("--gpus", o.gpus, "Ranks in the ring, one GPU each (devices 0 … G−1)")
      ->capture_default_str()
      ->check(fits<int>());  // ints: CLI11 said only "Could not convert" beyond one (the limits are checked in run_ring)
  c->add_flag("--backward", o.backward, "Also run and time the backward (dQ, dK, dV)");
  c->add_option("--layout", o.layout,
                "contiguous: rank r holds chunk r of G; zigzag: chunks r and 2G−1−r of 2G (balances causal work)")
      ->check(CLI::IsMember({"contiguous", "zigzag"}))
      ->capture_default_str();
  c->add_option("--json", o.json, "Append one JSON record per pass (fwd, bwd) to this file");
  c->add_option("--check", o.check,
                "auto (full oracle up to N = 4096, sampled rows beyond), full, sampled, or none (timing only)")
      ->check(CLI::IsMember({"auto", "full", "sampled", "none"}))
      ->capture_default_str();
  c->add_option("--check-kv-heads", o.check_kv_heads,
                "Sampled check: K/V heads whose dK, dV rows are judged (each costs an O(N²·d) CPU pass); at most "
                "--heads-kv (the default takes H_kv where it is below 2)")
      ->capture_default_str()
      ->check(fits<int>())
      ->each([&o](const std::string&) { o.check_kv_heads_given = true; });
  c->add_option("--step", o.step, "Local forward step (default: the ladder's last forward rung that accepts every pair)");
  c->add_option("--bwd-step", o.bwd_step, "Local backward step (default: the ladder's last backward that accepts every pair)");
  c->add_flag("--bitwise-local", o.bitwise_local,
              "With --gpus 1 --layout contiguous: also run the local steps on the whole problem and require "
              "bit-for-bit equal outputs");
  c->add_option("--reps", o.reps, "Timed repetitions (0: no timing); the median is reported")
      ->capture_default_str()->check(CLI::Range(0, kMaxReps));
  c->add_option("--warmup", o.warmup, "Untimed warm-up repetitions")->capture_default_str()->check(CLI::Range(0, kMaxReps));
  c->add_option("--timeout", o.timeout_s, "Seconds the whole run may take before every rank is ended")
      ->capture_default_str()
      ->check(fits<int>());
  c->add_option("--nccl-ctas", o.nccl_ctas,
                "At most this many thread blocks for NCCL's send/recv kernels (ncclConfig_t maxCTAs, 1-32): each "
                "one holds an SM that the local step then lacks; 0: NCCL's own choice")
      ->capture_default_str()
      ->check(fits<int>());
  return c;
}

#ifndef FLASHLADDER_HAVE_NCCL

int run_ring(const RingOptions&) {
  throw Error(std::string("flashladder ring (step 11) is not in this build: ") + FLASHLADDER_NCCL_WHY);
}

#else

namespace {

using ring::Layout;
using ring::Plan;
using ring::RankReport;
using ring::Timing;

// Shared anonymous memory: written by the ranks, read by the parent after they exit.
template <class T>
T* shared_array(size_t n, const char* what) {
  if (n == 0) return nullptr;
  void* p = mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(std::string("mmap of ") + std::to_string(n * sizeof(T)) + " bytes of shared memory for " + what +
                " failed: " + std::strerror(errno));
  return static_cast<T*>(p);
}

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(std::string("write to a pipe failed: ") + std::strerror(errno));
    c += w;
    n -= size_t(w);
  }
}
bool read_all(int fd, void* p, size_t n) {  // false on end of file before n bytes
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// The GPUs of this machine, counted in a child so that this process never initialises CUDA.
int count_gpus(std::string* why, std::string* name) {
  int fd[2];
  if (pipe(fd) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
  std::cout << std::flush;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    close(fd[0]);
    std::string w;
    int n = ring::device_count(&w);
    char msg[512] = {};
    std::snprintf(msg, sizeof msg, "%s", w.c_str());
    try {
      write_all(fd[1], &n, sizeof n);
      write_all(fd[1], msg, sizeof msg);
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  close(fd[1]);
  int n = 0;
  char msg[512] = {};
  const bool ok = read_all(fd[0], &n, sizeof n) && read_all(fd[0], msg, sizeof msg);
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!ok) {
    *why = "the process that counts the GPUs failed";
    return 0;
  }
  *why = msg;
  (void)name;
  return n;
}

std::string fmt(double x, int prec) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(prec) << x;
  return s.str();
}

// Starts G ranks and waits for them. Returns "" when all finished, else what went wrong, by rank.
std::string launch(const ring::RankConfig& cfg, const Inputs* in, ring::SharedOutputs out, RankReport* reports,
                   int timeout_s) {
  const int G = cfg.plan.G;
  // pipes[r] carries the NCCL unique id from rank 0 to rank r (r ≥ 1).
  std::vector<std::array<int, 2>> pipes(size_t(G), {-1, -1});
  for (int r = 1; r < G; ++r)
    if (pipe(pipes[size_t(r)].data()) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
  std::cout << std::flush;
  std::cerr << std::flush;
  std::fflush(nullptr);  // or the children would print the parent's buffered output again
  std::vector<pid_t> pids(size_t(G), -1);
  for (int r = 0; r < G; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t q : pids)
        if (q > 0) kill(q, SIGKILL);
      throw Error(std::string("fork of rank ") + std::to_string(r) + " failed: " + std::strerror(errno));
    }
    if (pid > 0) {
      pids[size_t(r)] = pid;
      continue;
    }
    // ---- the child: rank r ----
    int rc = 0;
    try {
      for (int k = 1; k < G; ++k) {
        if (k != r) close(pipes[size_t(k)][0]);
        if (r != 0) close(pipes[size_t(k)][1]);  // only rank 0 writes; the others see EOF if it dies
      }
      char id[ring::kUniqueIdBytes] = {};
      if (G > 1) {
        if (r == 0) {
          ring::make_unique_id(id);
          for (int k = 1; k < G; ++k) {
            write_all(pipes[size_t(k)][1], id, sizeof id);
            close(pipes[size_t(k)][1]);
          }
        } else {
          const bool ok = read_all(pipes[size_t(r)][0], id, sizeof id);
          close(pipes[size_t(r)][0]);
          if (!ok) throw Error("rank 0 ended before it sent the NCCL unique id");
        }
      }
      ring::run_rank(cfg, r, id, in, out, &reports[r]);
    } catch (const std::exception& e) {
      std::snprintf(reports[r].error, sizeof reports[r].error, "%s", e.what());
      std::fprintf(stderr, "flashladder ring: rank %d failed: %s\n", r, e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    _exit(rc);  // not exit(): the parent's destructors and atexit handlers are not the child's to run
  }
  for (int r = 1; r < G; ++r) {
    close(pipes[size_t(r)][0]);
    close(pipes[size_t(r)][1]);
  }

  // ---- the parent: wait; on the first failure or past the deadline, end the others ----
  std::string failures;
  std::vector<bool> done(size_t(G), false);
  int left = G;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool ending = false;
  auto end_all = [&](int sig) {
    for (int r = 0; r < G; ++r)
      if (!done[size_t(r)]) kill(pids[size_t(r)], sig);
  };
  auto grace = std::chrono::steady_clock::time_point::max();
  while (left > 0) {
    for (int r = 0; r < G; ++r) {
      if (done[size_t(r)]) continue;
      int st = 0;
      const pid_t w = waitpid(pids[size_t(r)], &st, WNOHANG);
      if (w == 0) continue;  // still running
      done[size_t(r)] = true;
      --left;
      if (w < 0) {
        failures += "\n  rank " + std::to_string(r) + ": waitpid failed: " + std::strerror(errno);
        continue;
      }
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && reports[r].ok;
      if (ok) continue;
      std::string what = WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st)) +
                                               (ending ? " (ended by the launcher)" : "")
                                         : "exited with status " + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      if (reports[r].error[0]) what += ": " + std::string(reports[r].error);
      failures += "\n  rank " + std::to_string(r) + " " + what;
      if (!ending) {
        ending = true;
        end_all(SIGTERM);
        grace = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (!ending && now > deadline) {
      failures += "\n  the run passed --timeout " + std::to_string(timeout_s) + " s; ranks still running:";
      for (int r = 0; r < G; ++r)
        if (!done[size_t(r)]) failures += " " + std::to_string(r);
      ending = true;
      end_all(SIGTERM);
      grace = now + std::chrono::seconds(10);
    }
    if (ending && now > grace) {
      end_all(SIGKILL);
      grace = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failures;
}

// Query rows at the chunk edges (where a slicing mistake shows first) besides the sampler's own.
std::vector<int64_t> edge_rows(const Plan& P, int64_t heads) {
  std::vector<int64_t> flat;
  for (int64_t bh = 0; bh < P.p.B * heads; ++bh)
    for (size_t c = 0; c < P.start.size(); ++c)
      for (int64_t i : {P.start[c], P.start[c] + P.len[c] - 1}) flat.push_back(bh * P.p.Nq + i);
  return flat;
}

// The timed entries of a pass, the same on every rank: the forward's ring steps 0 … G − 1, the
// backward's phases (plan.hpp: own keys part A, steps 1 … G − 1, own keys part B), with what the
// transfer beside each moves ("" : nothing).
struct Entries {
  std::vector<std::string> labels, moves;
};
Entries entries(const Plan& P, bool bwd) {
  Entries x;
  if (bwd) {
    const std::vector<ring::Phase> ph = P.backward_phases(0);
    for (size_t k = 0; k < ph.size(); ++k) {
      x.labels.push_back(P.backward_phase_label(int(k)));
      x.moves.push_back(Plan::moves_text(ph[k]));
    }
  } else {
    for (int s = 0; s < P.G; ++s) {
      x.labels.push_back(std::to_string(s));
      x.moves.push_back(P.G > 1 && s < P.G - 1 ? "K|V" : "");
    }
  }
  return x;
}

// A rank that timed other entries than the plan names would make every table below wrong.
void check_entries(const Plan& P, const RankReport* rep, bool bwd) {
  const size_t n = entries(P, bwd).labels.size();
  for (int r = 0; r < P.G; ++r) {
    const Timing& t = bwd ? rep[r].bwd : rep[r].fwd;
    if (size_t(t.steps) != n)
      throw Error("rank " + std::to_string(r) + " timed " + std::to_string(t.steps) + " entries of the " +
                  (bwd ? "backward" : "forward") + "; the plan has " + std::to_string(n));
  }
}

void print_timing(const char* pass, const Plan& P, const RankReport* rep, bool bwd) {
  const int G = P.G;
  const Entries x = entries(P, bwd);
  std::cout << "\n" << pass << ": per rank, ms (medians of " << (bwd ? rep[0].bwd.reps : rep[0].fwd.reps)
            << "; transfer = the NCCL group of the step on its stream, a wait for the peer included)\n";
  if (bwd && G > 1) {
    // The backward's order, "own keys last": which transfer runs beside which compute.
    std::cout << "beside each entry's compute:";
    for (size_t k = 0; k < x.labels.size(); ++k)
      std::cout << (k ? "; " : " ") << x.labels[k] << ": " << (x.moves[k].empty() ? "nothing moves" : x.moves[k]);
    std::cout << "\n";
  }
  std::cout << std::left << std::setw(6) << "rank" << std::right << std::setw(11) << "total" << std::setw(11) << "busy";
  std::vector<int> w;
  for (const std::string& l : x.labels) {
    const std::string head = (std::isdigit(static_cast<unsigned char>(l[0])) ? "step " + l : l) + " comp/xfer";
    w.push_back(std::max(20, int(head.size()) + 2));
    std::cout << std::setw(w.back()) << head;
  }
  std::cout << "\n";
  for (int r = 0; r < G; ++r) {
    const Timing& t = bwd ? rep[r].bwd : rep[r].fwd;
    std::cout << std::left << std::setw(6) << r << std::right << std::setw(11) << fmt(t.total_median, 3) << std::setw(11)
              << fmt(t.busy_median, 3);
    for (int s = 0; s < t.steps; ++s) {
      // The backward shows "—" where nothing moves; the forward's table stays as it was (0 after its last step).
      const bool none = bwd && x.moves[size_t(s)].empty();
      std::cout << std::setw(w[size_t(s)] + (none ? 2 : 0))  // "—" is 3 bytes in one column
                << (fmt(t.compute_ms[s], 3) + " / " + (none ? "—" : fmt(t.transfer_ms[s], 3)));
    }
    std::cout << "\n";
  }
}

}  // namespace

int run_ring(const RingOptions& o) {
  const Problem p = o.prob.problem();
  if (p.has_variant())
    throw Error("flashladder ring (step 11) does not support the attention variants (" + p.variants_text() +
                "): its ring passes whole K/V blocks of one plain problem");
  const Layout layout = o.layout == "zigzag" ? Layout::zigzag : Layout::contiguous;
  if (o.gpus > ring::kMaxRanks)
    throw Error("--gpus " + std::to_string(o.gpus) + ": this launcher runs at most " + std::to_string(ring::kMaxRanks) +
                " ranks (one host)");
  Plan plan;
  const std::string why = ring::make_plan(p, o.gpus, layout, &plan);
  if (!why.empty()) throw Error(why);
  if (p.dtype == DType::f32) throw Error("flashladder ring runs the GPU steps, which store fp16 or bf16; got fp32");
  if (o.bitwise_local && (o.gpus != 1 || layout != Layout::contiguous))
    throw Error("--bitwise-local needs --gpus 1 --layout contiguous (one rank holding the whole problem in the "
                "local step's own layout)");
  if (o.reps < 0 || o.warmup < 0) throw Error("--reps and --warmup must be at least 0");
  if (o.check_kv_heads < 1) throw Error("--check-kv-heads must be at least 1 (dK, dV are judged on some K/V head)");
  // Asked for more heads than there are, the check judged H_kv of them and said nothing.
  if (o.check_kv_heads_given && o.check_kv_heads > p.H_kv)
    throw Error("--check-kv-heads " + std::to_string(o.check_kv_heads) + ": the problem has " +
                std::to_string(p.H_kv) + " K/V heads (--heads-kv); at most that many can be judged");
  if (o.timeout_s < 1) throw Error("--timeout must be at least 1 second");
  if (o.nccl_ctas < 0 || o.nccl_ctas > 32)
    throw Error("--nccl-ctas " + std::to_string(o.nccl_ctas) +
                " is out of range: 0 (NCCL's choice) or 1-32 thread blocks (NCCL's channel limit)");
  if (o.bitwise_local && o.check == "none") throw Error("--bitwise-local needs a checked run (not --check none)");

  // The steps named, here in the parent: each rank found a bad name on its own, after the GPUs were
  // counted and the inputs made (without GPUs "needs 2 GPUs" hid it).
  for (auto [opt, name, bwd] : {std::tuple{"--step", o.step, false}, std::tuple{"--bwd-step", o.bwd_step, true}}) {
    if (name.empty()) continue;
    const Step* s = find_step(name);
    if (!s) throw Error(std::string(opt) + " '" + name + "': unknown step; see 'flashladder steps'");
    if (!s->gpu()) throw Error(std::string(opt) + " " + s->folder + " runs on the CPU; the ring runs GPU steps");
    if (bwd && !s->has_backward()) throw Error(std::string(opt) + " " + s->folder + " has no backward pass");
  }
  if (!o.json.empty() && o.reps == 0)
    throw Error("--json " + o.json + " with --reps 0: nothing is timed, so no record would be written");

  std::string gpu_why, gpu_name;
  const int have = count_gpus(&gpu_why, &gpu_name);
  if (have < o.gpus)
    throw Error("flashladder ring --gpus " + std::to_string(o.gpus) + " needs " + std::to_string(o.gpus) +
                " GPUs; this machine has " + std::to_string(have) + (gpu_why.empty() ? "" : " (" + gpu_why + ")"));
  // NVLink multicast (NVLS) stays off on these machines; point-to-point sends do not use it, but the
  // communicator would set it up.
  if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); v && std::string(v) != "0")
    std::cout << "note: NCCL_NVLS_ENABLE=" << v << " replaced by 0 (NVLink multicast is kept off)\n";
  setenv("NCCL_NVLS_ENABLE", "0", 1);

  std::string check = o.check;
  if (check == "auto") check = p.Nq <= 4096 ? "full" : "sampled";
  const bool checking = check != "none";

  std::cout << "flashladder ring: " << p.describe() << ", " << o.gpus << " GPU" << (o.gpus > 1 ? "s" : "") << ", "
            << ring::layout_name(layout) << " layout (" << plan.chunks << " chunks of " << plan.len.back() << "–"
            << plan.len.front() << " positions), check " << check
            << (o.nccl_ctas > 0 ? ", NCCL's kernels at most " + std::to_string(o.nccl_ctas) + " thread blocks" : "") << "\n";
  // The work each rank does at each ring step, as a fraction of the whole problem's (a diagonal pair
  // counts half): what the layout balances, or does not.
  double whole = 0;
  for (int r = 0; r < plan.G; ++r)
    for (int s = 0; s < plan.G; ++s) whole += plan.work(r, s);
  std::cout << "work per rank at each ring step, as a fraction of the whole problem's:\n";
  for (int r = 0; r < plan.G; ++r) {
    double tot = 0;
    std::cout << "  rank " << r << ":";
    for (int s = 0; s < plan.G; ++s) {
      tot += plan.work(r, s);
      std::cout << " " << fmt(plan.work(r, s) / whole, 3);
    }
    std::cout << "   total " << fmt(tot / whole, 3) << "\n";
  }

  // Opened before the run: an unwritable file was said only after it (up to --timeout of work).
  RecordFile json(o.json);
  Inputs in;
  if (checking) {
    const size_t e = sizeof(float);
    require_host_memory(e * size_t(2 * p.q_elems() + 2 * p.kv_elems()) * (o.backward ? 2 : 1) +
                            e * size_t(p.q_elems() + 2 * p.kv_elems() + p.lse_elems()) * (o.backward ? 1 : 0),
                        "the ring's inputs and outputs on the host");
    in = make_inputs(p, o.prob.seed);
  }
  ring::SharedOutputs out;
  if (checking) {
    out.o = shared_array<float>(size_t(p.q_elems()), "O");
    out.lse = shared_array<float>(size_t(p.lse_elems()), "L");
    if (o.backward) {
      out.dq = shared_array<float>(size_t(p.q_elems()), "dQ");
      out.dk = shared_array<float>(size_t(p.kv_elems()), "dK");
      out.dv = shared_array<float>(size_t(p.kv_elems()), "dV");
    }
    for (float* x : {out.o, out.lse, out.dq, out.dk, out.dv})  // NaN: a row no rank wrote cannot pass
      if (x) std::fill(x, x + (x == out.lse ? p.lse_elems() : (x == out.dk || x == out.dv) ? p.kv_elems() : p.q_elems()), NAN);
  }
  RankReport* reports = shared_array<RankReport>(size_t(o.gpus), "the ranks' reports");
  for (int r = 0; r < o.gpus; ++r) new (&reports[r]) RankReport();

  ring::RankConfig cfg;
  cfg.plan = plan;
  cfg.fwd_step = o.step;
  cfg.bwd_step = o.bwd_step;
  cfg.backward = o.backward;
  cfg.check = checking;
  cfg.bitwise_local = o.bitwise_local;
  cfg.warmup = o.warmup;
  cfg.reps = o.reps;
  cfg.seed = o.prob.seed;
  cfg.nccl_ctas = o.nccl_ctas;
  const std::string failed = launch(cfg, checking ? &in : nullptr, out, reports, o.timeout_s);
  if (!failed.empty()) throw Error("the ring failed:" + failed);

  std::cout << "local steps: forward " << reports[0].fwd_step
            << (o.backward ? std::string(", backward ") + reports[0].bwd_step : std::string()) << "; GPU "
            << reports[0].device << "\n";
  bool pass = true;
  std::optional<double> tol_used;
  if (checking) {
    Outputs got;
    got.o.assign(out.o, out.o + p.q_elems());
    got.lse.assign(out.lse, out.lse + p.lse_elems());
    if (o.backward) {
      got.dq.assign(out.dq, out.dq + p.q_elems());
      got.dk.assign(out.dk, out.dk + p.kv_elems());
      got.dv.assign(out.dv, out.dv + p.kv_elems());
    }
    Verdict v;
    if (check == "full") {
      v = verify(in, got, expected_for(in, o.backward), o.backward);
    } else {
      // Every entry must at least be finite (outputs were poisoned: an unwritten one is NaN) ...
      auto finite = [&](const char* name, const std::vector<float>& x) {
        const auto bad = std::count_if(x.begin(), x.end(), [](float f) { return !std::isfinite(f); });
        if (bad) {
          std::cout << "FAIL: " << bad << " entries of " << name << " are NaN or Inf\n";
          pass = false;
        }
      };
      finite("O", got.o);
      finite("L", got.lse);  // Nq = Nk: every row sees a key, so no L is +inf
      if (o.backward) { finite("dQ", got.dq); finite("dK", got.dk); finite("dV", got.dv); }
      // ... and sampled rows are judged by the rule: the chunk edges of every head, and random rows.
      auto rows = pick_rows(p, o.prob.seed, 256, edge_rows(plan, p.H));
      std::vector<KeyId> keys;
      if (o.backward) {
        // K/V heads 0 and H_kv − 1, then 1, 2, …: as many as --check-kv-heads asks (each a full CPU pass)
        std::set<int64_t> heads = {0};
        if (o.check_kv_heads >= 2) heads.insert(p.H_kv - 1);
        for (int64_t hk = 1; int64_t(heads.size()) < std::min<int64_t>(o.check_kv_heads, p.H_kv); ++hk) heads.insert(hk);
        std::mt19937_64 g(o.prob.seed ^ 0x51ed27u);
        for (int64_t b : std::set<int64_t>{0, p.B - 1})
          for (int64_t hk : heads) {
            std::set<int64_t> js;
            for (size_t c = 0; c < plan.start.size(); ++c) { js.insert(plan.start[c]); js.insert(plan.start[c] + plan.len[c] - 1); }
            for (int k = 0; k < 32; ++k) js.insert(int64_t(g() % uint64_t(p.Nk)));
            for (int64_t j : js) keys.push_back({b, hk, j});
          }
      }
      std::cout << "sampled check: " << rows.size() << " query rows" << (o.backward ? ", " + std::to_string(keys.size()) + " key rows" : "")
                << " (the oracle and the baseline at those rows only)\n" << std::flush;
      v = verify_sampled(in, got, sampled_reference(in, rows, keys, o.backward), o.backward);
    }
    for (const Check& c : v.checks) std::cout << "  " << c.summary() << "\n";
    pass = pass && v.pass;
    tol_used = v.tol_used;
    std::cout << (pass ? "PASS" : "FAIL") << ": the ring against the fp64 oracle (" << check << "), tolerance used "
              << fmt(100 * v.tol_used, 1) << "%\n";
    if (o.bitwise_local) {
      const bool eq = reports[0].bitwise == 1;
      std::cout << (eq ? "PASS" : "FAIL") << ": the 1-GPU ring against the local steps run on the whole problem, bit "
                << "for bit: " << reports[0].bitwise_note << "\n";
      pass = pass && eq;
    }
  }

  if (o.reps > 0) {
    check_entries(plan, reports, false);
    if (o.backward) check_entries(plan, reports, true);
    print_timing("forward", plan, reports, false);
    if (o.backward) print_timing("backward", plan, reports, true);
    // json (opened before the run): every record flushed and checked; lost records end the run (exit 2)
    Environment env = cpu_environment();
    env.device = reports[0].device;
    env.sm_count = reports[0].sm_count;
    env.cuda = reports[0].cuda;
    // The parent never touches CUDA (its children could not use it after the fork), so not
    // gpu_environment(): the device fields come from rank 0, the driver from nvidia-smi.
    const std::string drv = driver_version_text();
    env.driver = drv.empty() ? reports[0].driver : drv;
    for (bool bwd : {false, true}) {
      if (bwd && !o.backward) break;
      // The ring is done when its slowest rank is: the time of the pass is the largest rank's.
      Stats st;
      nlohmann::json rank_ms, rank_busy, comp, xfer, pairs;
      for (int r = 0; r < o.gpus; ++r) {
        const Timing& t = bwd ? reports[r].bwd : reports[r].fwd;
        st.median_ms = std::max(st.median_ms, t.total_median);
        st.min_ms = std::max(st.min_ms, t.total_min);
        st.p90_ms = std::max(st.p90_ms, t.total_p90);
        st.reps = t.reps;
        rank_ms.push_back(t.total_median);
        rank_busy.push_back(t.busy_median);
        nlohmann::json c, x, n;
        for (int s = 0; s < t.steps; ++s) {
          c.push_back(t.compute_ms[s]);
          x.push_back(t.transfer_ms[s]);
          n.push_back(t.pairs[s]);
        }
        comp.push_back(c);
        xfer.push_back(x);
        pairs.push_back(n);
      }
      nlohmann::json rec = make_record("11_ring_attention", bwd ? "bwd" : "fwd", p, st, tol_used, env);
      rec["gpus"] = o.gpus;
      rec["layout"] = ring::layout_name(layout);
      rec["local_step"] = bwd ? reports[0].bwd_step : reports[0].fwd_step;
      rec["rank_ms"] = rank_ms;
      rec["rank_busy_ms"] = rank_busy;
      rec["step_compute_ms"] = comp;
      rec["step_transfer_ms"] = xfer;
      rec["step_pairs"] = pairs;
      // What each entry is and what moves beside it (the backward: own keys part A, steps 1 … G − 1,
      // own keys part B beside the final hop of the dK, dV sums), so that the tables need not guess.
      const Entries names = entries(plan, bwd);
      rec["step_labels"] = names.labels;
      rec["step_moves"] = names.moves;
      rec["kv_bytes_per_step"] = 2 * int64_t(dtype_bytes(p.dtype)) * plan.kv_elems(0);
      rec["check"] = check;
      rec["pass_check"] = checking ? nlohmann::json(pass) : nlohmann::json(nullptr);
      rec["nccl_nvls_enable"] = "0";
      rec["nccl_ctas"] = o.nccl_ctas;  // 0: NCCL's choice
      json.write(rec);
      double lo = 1e300, hi = 0;
      for (auto& b : rank_busy) { lo = std::min(lo, b.get<double>()); hi = std::max(hi, b.get<double>()); }
      std::cout << (bwd ? "backward" : "forward") << ": " << fmt(st.median_ms, 3) << " ms (slowest rank), "
                << fmt(rec["tflops"].get<double>(), 1) << " TFLOP/s over " << o.gpus << " GPU" << (o.gpus > 1 ? "s" : "")
                << "; busiest/idlest rank compute " << fmt(hi / std::max(lo, 1e-9), 3) << "x\n";
    }
  }
  return pass ? 0 : 1;
}

#endif  // FLASHLADDER_HAVE_NCCL

}  // namespace fl::cli
