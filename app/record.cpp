// flashladder — app/record.cpp
#include "app/record.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include "app/runner.hpp"

#ifndef FLASHLADDER_SOURCE_DIR
#define FLASHLADDER_SOURCE_DIR "."
#endif

namespace fl {

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), int(buf.size()), f)) out += buf.data();
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

std::string source_commit() {
  if (const char* c = std::getenv("FLASHLADDER_COMMIT")) return c;  // set by the device script
  const std::string dir = FLASHLADDER_SOURCE_DIR;
  std::string sha = run("git -C '" + dir + "' rev-parse --short=12 HEAD 2>/dev/null");
  if (sha.empty()) return "unknown";
  std::string dirty = run("git -C '" + dir + "' status --porcelain --untracked-files=no 2>/dev/null");
  return dirty.empty() ? sha : sha + "-dirty";
}

Environment cpu_environment() {
  Environment e;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      e.device = line.substr(line.find(':') + 2);
      break;
    }
  if (e.device.empty()) e.device = "unknown CPU";
  e.commit = source_commit();
  e.date = utc_now();
  return e;
}

std::string driver_version_text() {
  return run("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1");
}

Environment gpu_environment() {
  Environment e = cpu_environment();
  std::string why;
  if (auto d = gpu_device(&why)) {
    e.device = d->name;
    e.sm_count = d->sm_count;
    e.cuda = d->cuda;
    // The driver's own version (580.x) from nvidia-smi; the CUDA version the driver supports otherwise.
    std::string v = driver_version_text();
    e.driver = v.empty() ? d->driver : v;
  }
  return e;
}

nlohmann::json make_record(const std::string& impl, const std::string& pass, const Problem& p, const Stats& t,
                           std::optional<double> tol_used, const Environment& env) {
  const double flops = pass == "bwd" ? flops_backward(p) : flops_forward(p);
  nlohmann::json r;
  r["impl"] = impl;
  r["pass"] = pass;
  r["dtype"] = dtype_name(p.dtype);
  r["B"] = p.B;
  r["H"] = p.H;
  r["H_kv"] = p.H_kv;
  r["Nq"] = p.Nq;
  r["Nk"] = p.Nk;
  r["d"] = p.d;
  r["causal"] = p.causal;
  // A record of a variant names it (../shared/design/ladder.md); a plain record has none of these, so
  // the tables made from plain records (scripts/fl_results.py matches) never pick up a variant's.
  if (p.windowed()) r["window"] = {p.window_left, p.window_right};
  if (p.softcap) r["softcap"] = *p.softcap;
  if (p.alibi != Alibi::none) r["alibi"] = alibi_name(p.alibi);
  if (p.varlen()) {
    r["varlen"] = true;
    r["cu_seqlens_q"] = p.cu_seqlens_q;
    r["cu_seqlens_k"] = p.cu_seqlens_k;
  }
  if (!p.seqused_k.empty()) r["seqused_k"] = p.seqused_k;
  r["median_ms"] = t.median_ms;
  r["min_ms"] = t.min_ms;
  r["p90_ms"] = t.p90_ms;
  r["reps"] = t.reps;
  r["tflops"] = t.median_ms > 0 ? flops / (t.median_ms * 1e-3) / 1e12 : 0.0;
  r["tol_used"] = tol_used ? nlohmann::json(*tol_used) : nlohmann::json(nullptr);
  r["device"] = env.device;
  r["sm_count"] = env.sm_count;
  r["cuda"] = env.cuda;
  r["driver"] = env.driver;
  r["commit"] = env.commit;
  r["date"] = env.date;
  return r;
}

RecordFile::RecordFile(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  f_.open(path_, std::ios::app);
  if (!f_) throw Error("cannot open '" + path_ + "' for writing: " + std::strerror(errno));
}

void RecordFile::write(const nlohmann::json& record) {
  if (path_.empty()) return;
  errno = 0;
  f_ << record.dump() << "\n";
  f_.flush();
  if (!f_)
    throw RecordWriteError("writing a record to '" + path_ + "' failed" + (errno ? std::string(": ") + std::strerror(errno) : "") +
                ": the results of this run are not all in the file");
}

void RecordFile::close() {
  if (path_.empty() || !f_.is_open()) return;
  errno = 0;
  f_.close();
  if (!f_)
    throw RecordWriteError("closing '" + path_ + "' failed" + (errno ? std::string(": ") + std::strerror(errno) : "") +
                ": the results of this run are not all in the file");
}

}  // namespace fl
