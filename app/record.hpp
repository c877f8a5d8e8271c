// flashladder — app/record.hpp: one benchmark result as a JSON object (a line of docs/results/*.jsonl).
//
// The fields of ../shared/design/ladder.md keep their names: impl, pass, dtype, B, H, H_kv, Nq, Nk,
// d, causal, median_ms, min_ms, p90_ms, tflops, tol_used, device, sm_count, cuda, driver, commit,
// date. Tables and plots are made from these records, never by parsing printed text.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/problem.hpp"
#include "app/timing.hpp"

namespace fl {

struct Environment {
  std::string device;   // "NVIDIA H200" or the CPU model
  int sm_count = 0;     // 0 on the CPU
  std::string cuda;     // runtime version or ""
  std::string driver;   // driver version or ""
  std::string commit;   // git commit of the sources (with "-dirty" when they had local changes)
  std::string date;     // UTC, ISO 8601
};

/// The CPU's model name (from /proc/cpuinfo) and the time and commit; GPU fields left empty.
Environment cpu_environment();
/// The CUDA device's fields filled in, when there is one.
Environment gpu_environment();

/// The driver's own version ("580.159.04") from nvidia-smi; "" where there is none. No CUDA call.
std::string driver_version_text();

/// The git commit of the source tree this binary was built from ("unknown" outside a checkout).
std::string source_commit();

/// impl: a step folder or a baseline name; pass: "fwd" or "bwd"; tol_used: null when unchecked.
nlohmann::json make_record(const std::string& impl, const std::string& pass, const Problem& p, const Stats& t,
                           std::optional<double> tol_used, const Environment& env);

/// Lost records. Deliberately not an fl::Error: the ladder catches fl::Error per step and goes on
/// to the next one, while a file that can no longer be written must end the run (exit 2).
struct RecordWriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A JSON-lines file of records, opened for appending. Every line is flushed and the stream checked
/// at once: on a full disk (or /dev/full) write() throws RecordWriteError naming the file, so a run whose
/// records were lost never ends with exit 0. An empty path writes nothing.
class RecordFile {
 public:
  explicit RecordFile(const std::string& path);
  void write(const nlohmann::json& record);
  /// Closes the file and checks the close too (buffered bytes are written there). Throws like write().
  void close();

 private:
  std::string path_;
  std::ofstream f_;
};

}  // namespace fl
