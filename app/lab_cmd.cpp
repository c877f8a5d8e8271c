// flashladder — app/lab_cmd.cpp: the lab kit (issue 20). `flashladder lab new STEP DIR` hands a step
// out as an exercise; `flashladder lab check DIR` builds the student's source in place of the step and
// runs that step's part of the suite (app/lab_suite.cpp).
//
// The marks. In a step's source, the lines of its one idea sit between two comment lines:
//     // LAB:BEGIN <hint: what to write, which lines of which algorithm>
//     ... the step's code ...
//     // LAB:END
// and a region may carry `// LAB:STUB <code>` lines: the code handed out in its place, so that the
// exercise compiles (most regions need none: without them, the outputs stay as the runner poisoned
// them, NaN, and every check fails). Every line whose first non-blank text is `// LAB:` is a mark, and
// marks are invisible wherever a step is shown (`flashladder diff`, scripts/diff_table.py's counts,
// the docs' pages): they are not part of the idea, only of the exercise.
//
// The design of `lab check`. The flashladder build writes an archive, libflashladder_lab.a, holding
// every object of the core (runner, oracle, ladder, steps) and the lab program's main, and a file,
// flashladder_lab.cmake, that names it with the flags the core was compiled with. The folder that
// `lab new` writes is a CMake project of one source: the student's attention.cpp/.cu, compiled with
// those flags and linked before the archive. The linker takes the archive's members only for symbols
// still undefined, so the ladder's reference to fl::sNN::impl resolves to the student's definition and
// the step's own object is never pulled in: the student's code runs under the step's name, through
// the same runner (NaN poisoning, checked launches) and the same verify(), on the same shape matrix as
// tests/test_ladder.cpp (app/cases.hpp). Nothing of the core is recompiled.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>

#include "app/commands.hpp"
#include "steps/ladder.hpp"

#include <sys/wait.h>
#include <unistd.h>

#ifndef FLASHLADDER_BINARY_DIR
#error "FLASHLADDER_BINARY_DIR must name the build folder (CMakeLists.txt defines it)"
#endif
#ifndef FLASHLADDER_CMAKE_COMMAND
#define FLASHLADDER_CMAKE_COMMAND "cmake"
#endif

namespace fl::cli {
namespace fs = std::filesystem;

namespace {

const char* kMark = "// LAB:";

// The text after "// LAB:" when the line is a mark, else nullopt.
std::optional<std::string> mark_of(const std::string& line) {
  const size_t k = line.find_first_not_of(" \t");
  if (k == std::string::npos || line.compare(k, 7, kMark) != 0) return std::nullopt;
  return line.substr(k + 7);
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error("cannot read " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  // Closed and checked: a short file stays in the stream's buffer until the close, where a full disk
  // failed unseen (lab new said it wrote an empty CMakeLists.txt).
  if (!(f << text) || (f.close(), f.fail())) throw Error("cannot write " + p.string() + " (disk full?)");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

fs::path step_source(const Step& s) {
  const fs::path dir = fs::path(FLASHLADDER_SOURCE_DIR) / "steps" / s.folder;
  for (const char* f : {"attention.cu", "attention.cpp"})
    if (fs::exists(dir / f)) return dir / f;
  throw Error("no attention.cu or attention.cpp in " + dir.string());
}

struct Region {
  size_t begin_line;  // 1-based line of LAB:BEGIN in the step's source
  std::string hint;
};

// The step's source as handed out (solution = false: each region replaced by its TODO and stub) or
// as the solution (the regions kept); the marks removed either way. Throws naming an unbalanced mark.
std::string hand_out(const std::string& text, const std::string& file, bool solution, std::vector<Region>* regions) {
  std::ostringstream out;
  bool inside = false;
  size_t n = 0, begin = 0;
  for (const std::string& line : lines_of(text)) {
    ++n;
    const auto m = mark_of(line);
    if (!m) {
      if (!inside || solution) out << line << "\n";
      continue;
    }
    const std::string indent = line.substr(0, line.find_first_not_of(" \t"));
    if (m->rfind("BEGIN", 0) == 0) {
      if (inside) throw Error(file + ":" + std::to_string(n) + ": LAB:BEGIN inside the region opened at line " + std::to_string(begin));
      inside = true;
      begin = n;
      std::string hint = m->substr(5);
      hint.erase(0, hint.find_first_not_of(" "));
      if (regions) regions->push_back({n, hint});
      if (!solution) out << indent << "// TODO(lab): " << hint << "\n";
    } else if (m->rfind("END", 0) == 0) {
      if (!inside) throw Error(file + ":" + std::to_string(n) + ": LAB:END without a LAB:BEGIN");
      inside = false;
    } else if (m->rfind("STUB", 0) == 0) {
      if (!inside) throw Error(file + ":" + std::to_string(n) + ": LAB:STUB outside a region");
      if (!solution) out << indent << m->substr(m->size() > 4 && (*m)[4] == ' ' ? 5 : 4) << "\n";
    } else {
      throw Error(file + ":" + std::to_string(n) + ": unknown mark '// LAB:" + *m + "' (BEGIN, END or STUB)");
    }
  }
  if (inside) throw Error(file + ":" + std::to_string(begin) + ": LAB:BEGIN without a LAB:END");
  return out.str();
}

// An instructor's mutation (tests/lab/*.txt): lines "- old" and "+ new" in pairs; the one line of the
// source that contains old (it must be exactly one) is replaced, whole, by new at its indentation;
// "#" lines are comments (tests/lab_test.cmake reads "# expect: REGEX" from them). A fixture whose old line is gone from the step fails loudly: it has drifted.
std::string apply_mutation(const std::string& src, const fs::path& fixture) {
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t\r") + 1);
    return s;
  };
  std::error_code ec;
  if (!fs::is_regular_file(fixture, ec))  // /dev/zero was read without end
    throw Error("fixture " + fixture.string() + " is not a regular file (a tests/lab/*.txt mutation)");
  if (fs::file_size(fixture, ec) > (1u << 20))
    throw Error("fixture " + fixture.string() + " is over 1 MiB: a mutation is a few '- old' / '+ new' lines");
  std::vector<std::string> lines = lines_of(src);
  std::string old;
  bool have_old = false;
  size_t n = 0, applied = 0;
  for (const std::string& raw : lines_of(read_text(fixture))) {
    ++n;
    const std::string where = fixture.string() + ":" + std::to_string(n);
    if (raw.empty() || raw[0] == '#') continue;
    if (raw.rfind("- ", 0) == 0) {
      if (have_old) throw Error(where + ": two '- ' lines in a row; each needs its '+ ' line");
      old = trim(raw.substr(2));
      have_old = true;
    } else if (raw.rfind("+ ", 0) == 0 || raw == "+") {
      if (!have_old) throw Error(where + ": a '+ ' line without the '- ' line it replaces");
      const std::string neu = raw.size() > 2 ? raw.substr(2) : "";
      size_t hits = 0, at = 0;
      for (size_t k = 0; k < lines.size(); ++k)
        if (lines[k].find(old) != std::string::npos) ++hits, at = k;
      if (hits != 1)
        throw Error(where + ": '" + old + "' is in " + std::to_string(hits) +
                    " lines of the step's source (it must be in exactly one): the fixture has drifted from the step");
      lines[at] = lines[at].substr(0, lines[at].find_first_not_of(" \t")) + neu;
      have_old = false;
      ++applied;
    } else {
      throw Error(where + ": expected '# …', '- old line' or '+ new line'");
    }
  }
  if (have_old) throw Error(fixture.string() + ": the last '- ' line has no '+ ' line");
  if (applied == 0)
    throw Error(fixture.string() + ": no '- old' / '+ new' pair: the fixture changes nothing (empty or truncated?)");
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

std::string exercises_text() {
  std::string s;
  for (const Step& st : ladder()) {
    const fs::path dir = fs::path(FLASHLADDER_SOURCE_DIR) / "steps" / st.folder;
    for (const char* f : {"attention.cu", "attention.cpp"})
      if (fs::exists(dir / f) && read_text(dir / f).find("// LAB:BEGIN") != std::string::npos)
        s += (s.empty() ? "" : ", ") + st.number;
  }
  return s;
}

// Whether build is a build of an exercise folder: cmake/lab.cmake runs in a project named
// flashladder_lab_NN, which CMake records in the build's CMakeCache.txt.
bool is_lab_build(const fs::path& build) {
  std::ifstream f(build / "CMakeCache.txt");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("CMAKE_PROJECT_NAME:STATIC=flashladder_lab_", 0) == 0) return true;
  return false;
}

std::string cmake_quote(const std::string& s) { return "\"" + std::regex_replace(s, std::regex(R"(["\\$])"), R"(\$&)") + "\""; }
std::string sh_quote(const std::string& s) { return "'" + std::regex_replace(s, std::regex("'"), R"('\'')") + "'"; }

}  // namespace

std::string strip_lab_marks(const std::string& text) {
  std::string out;
  for (const std::string& line : lines_of(text))
    if (!mark_of(line)) out += line + "\n";
  return out;
}

std::string lab_stripped_copy(const std::string& source, const std::string& dir) {
  fs::create_directories(dir);
  const fs::path p = fs::path(dir) / (fs::path(source).parent_path().filename().string() + "_" + fs::path(source).filename().string());
  write_text(p, strip_lab_marks(read_text(source)));
  return p.string();
}

// The command that runs this program, as a student can type it (the build's flashladder need not be on PATH).
static std::string self_command() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("flashladder") : self.string();
}

int lab_new(const std::string& step, const std::string& dir_s, bool solution, const std::string& mutation, bool force) {
  const Step* s = find_step(step);
  if (!s) throw Error("unknown step '" + step + "'; the exercises are steps " + exercises_text());
  if (solution && !mutation.empty())  // the mutated code was handed out labelled as the solution
    throw Error("--solution and --mutate together: --mutate hands out the solution with a known mistake already");
  const fs::path src = step_source(*s);
  std::vector<Region> regions;
  std::string text = hand_out(read_text(src), src.string(), solution || !mutation.empty(), &regions);
  if (regions.empty())
    throw Error("step " + s->folder + " has no exercise (no // LAB:BEGIN marks in its source); the exercises are steps " +
                exercises_text());
  if (!mutation.empty()) text = apply_mutation(text, mutation);
  if (dir_s.empty()) throw Error("lab new: the folder is empty text; name a new folder for the exercise");
  const fs::path dir(dir_s);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(dir.string() + " exists and is not a folder; name a new folder for the exercise");
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !force)
    throw Error(dir.string() + " exists and is not empty; choose a new folder (or --force to overwrite the exercise's "
                "files and remove its lab build, build/)");
  // A stale build of another step must not be reused, so --force removes DIR/build; but only a lab
  // build: a build/ of anything else (it removed a user's files) is refused, before a file is written.
  const fs::path build = dir / "build";
  const bool stale_build = fs::exists(build, ec) && !(fs::is_directory(build, ec) && fs::is_empty(build, ec));
  if (stale_build && !is_lab_build(build))
    throw Error(build.string() + " is not a lab build (no CMakeCache.txt of a flashladder_lab project): --force removes "
                "only the build 'flashladder lab check' made; move it away or choose a new folder");
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot make the folder " + dir.string() + ": " + ec.message());
  if (stale_build && (fs::remove_all(build, ec), ec))
    throw Error("cannot remove the old lab build " + build.string() + ": " + ec.message());
  write_text(dir / src.filename(), text);

  // README: the exercise (docs/lab/NN.md: what to write, which lines, what speed to expect and why),
  // then the step's own README, the formulas the code implements.
  const fs::path questions = fs::path(FLASHLADDER_SOURCE_DIR) / "docs" / "lab" / (s->number + ".md");
  std::ostringstream readme;
  readme << "# Exercise " << s->number << ": " << s->change << "\n\n";
  readme << "You write the lines of step `" << s->folder << "` marked `TODO(lab)` in `" << src.filename().string()
         << "` (" << regions.size() << (regions.size() == 1 ? " place" : " places") << "). Then:\n\n"
         << "```sh\n" << self_command() << " lab check " << fs::absolute(dir).string() << "\n```\n\n"
         << "builds your file in place of the step and runs the step's part of the test suite: the ragged\n"
         << "shape matrix against the fp64 oracle, by the same tolerance rule as the ladder. The report names\n"
         << "the shapes that fail, the first bad (b, h, i, j), the fraction of the tolerance used and any NaN.\n"
         << "Outputs are filled with NaN before your code runs: an output you never write fails as NaN.\n\n";
  if (fs::exists(questions)) readme << read_text(questions) << "\n";
  readme << "---\n\n# The step's README (" << s->folder << ")\n\n"
         << read_text(fs::path(FLASHLADDER_SOURCE_DIR) / "steps" / s->folder / "README.md");
  write_text(dir / "README.md", readme.str());

  // The build file: one source, the core's archive (see the top of this file).
  std::ostringstream cm;
  cm << "# The build of exercise " << s->number << ", written by `flashladder lab new`: your "
     << src.filename().string() << " in place of\n# step " << s->folder
     << ", linked against the flashladder build below. `flashladder lab check` runs it; by hand:\n"
     << "#   cmake -S . -B build && cmake --build build && build/lab_suite " << s->number << "\n"
     << "cmake_minimum_required(VERSION 3.25)\n"
     << "set(FLASHLADDER_LAB_STEP " << s->number << ")\n"
     << "set(FLASHLADDER_LAB_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/" << src.filename().string() << ")\n"
     << "set(FLASHLADDER_LAB_BASE " << (s->base_step() ? s->base_step()->number : std::string()) << ")  # timed against it (GPU steps)\n"
     << "# The flashladder build this exercise links: its archive, flags and compilers.\n"
     << "include(" << cmake_quote((fs::path(FLASHLADDER_BINARY_DIR) / "flashladder_lab.cmake").string()) << ")\n"
     << "project(flashladder_lab_" << s->number << " LANGUAGES CXX)\n"
     << "include(${FLASHLADDER_SOURCE_DIR}/cmake/lab.cmake)\n";
  write_text(dir / "CMakeLists.txt", cm.str());

  std::cout << "wrote " << dir.string() << ": " << src.filename().string() << " ("
            << (solution ? "the solution" : !mutation.empty() ? "the solution with " + mutation + " applied"
                                                               : std::to_string(regions.size()) + " TODO(lab) to write")
            << "), README.md (the exercise), CMakeLists.txt\n";
  if (!solution && mutation.empty()) {
    std::cout << "next: edit " << (dir / src.filename()).string() << " where it says TODO(lab), then\n"
              << "  " << self_command() << " lab check " << dir.string() << "\n";
  }
  return 0;
}

int lab_check(const std::string& dir_s) {
  if (dir_s.empty()) throw Error("lab check: the folder is empty text; name the exercise's folder (made by 'flashladder lab new')");
  const fs::path dir = fs::absolute(dir_s);
  const fs::path cml = dir / "CMakeLists.txt";
  if (!fs::exists(cml)) throw Error(dir.string() + " is not an exercise folder (no CMakeLists.txt); make one with 'flashladder lab new STEP " + dir_s + "'");
  std::smatch m;
  const std::string text = read_text(cml);
  if (!std::regex_search(text, m, std::regex(R"(set\(FLASHLADDER_LAB_STEP ([0-9a-z]+)\))")))
    throw Error(cml.string() + " names no step (set(FLASHLADDER_LAB_STEP …)); it was not written by 'flashladder lab new'");
  const std::string step = m[1];
  if (!find_step(step)) throw Error(cml.string() + " names step '" + step + "', which the ladder does not have");
  // The step must be an exercise, and this folder's: a CMakeLists.txt edited to name step 01 compiled the
  // student's 02 and then judged the archive's own step 01 (PASS).
  {
    const fs::path src = step_source(*find_step(step));
    if (read_text(src).find("// LAB:BEGIN") == std::string::npos)
      throw Error(cml.string() + " names step " + find_step(step)->folder + ", which is not an exercise; the exercises are steps " +
                  exercises_text());
    if (!fs::exists(dir / src.filename()))
      throw Error(cml.string() + " names step " + find_step(step)->folder + ", but " + (dir / src.filename()).string() +
                  ", its source, is not in the folder: the CMakeLists.txt was not written for this folder");
  }
#ifndef FLASHLADDER_HAVE_CUDA
  if (find_step(step)->gpu()) {
    std::cout << "lab check: step " << find_step(step)->folder << " needs a GPU, and a flashladder build with CUDA: "
              << "this one was configured without nvcc, so the exercise is not built (skipped)\n";
    return 77;
  }
#endif
  const fs::path build = dir / "build";
  const std::string cmake = FLASHLADDER_CMAKE_COMMAND;
  std::cout << "lab check: building " << dir.string() << " (step " << step << ") in " << build.string() << "\n" << std::flush;
  if (!fs::exists(build / "CMakeCache.txt")) {
    const std::string cfg = sh_quote(cmake) + " -S " + sh_quote(dir.string()) + " -B " + sh_quote(build.string()) +
                            " -DCMAKE_BUILD_TYPE=Release > " + sh_quote((dir / "configure.log").string()) + " 2>&1";
    if (std::system(cfg.c_str()) != 0) {
      std::cout << read_text(dir / "configure.log");
      std::cout << "lab check: FAIL: the exercise's build could not be configured (cmake's messages are above)\n";
      return 1;
    }
  }
  const std::string bld = sh_quote(cmake) + " --build " + sh_quote(build.string());
  if (std::system(bld.c_str()) != 0) {
    std::cout << "lab check: FAIL: your source does not compile or link (the compiler's messages are above)\n";
    return 1;
  }
  // A build that made no suite (a CMakeLists.txt edited beyond the exercise) would end in the shell's
  // "not found", exit 127: outside this command's exits.
  const fs::path suite = build / "lab_suite";
  if (!fs::is_regular_file(suite))
    throw Error("the build of " + dir.string() + " made no lab_suite executable (" + suite.string() +
                " is missing); its CMakeLists.txt must build the lab_suite target that 'flashladder lab new' wrote");
  const std::string run = sh_quote(suite.string()) + " " + step;
  const int rc = std::system(run.c_str());
  if (rc == -1) throw Error("could not run " + run);
  // The student's code may crash the suite: a signal (or the shell's 128 + signal) is a FAIL, exit 1,
  // said here; it was exit 139 and the shell's "Segmentation fault", as if flashladder had crashed.
  const int sig = WIFSIGNALED(rc) ? WTERMSIG(rc) : WIFEXITED(rc) && WEXITSTATUS(rc) > 128 ? WEXITSTATUS(rc) - 128 : 0;
  if (sig) {
    std::cout << "lab check: FAIL: your code crashed the suite (signal " << sig << ", " << strsignal(sig)
              << "); the shapes named above were judged before it\n";
    return 1;
  }
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

}  // namespace fl::cli
