// flashladder — tests/grid_env.hpp: FLASHLADDER_PERSISTENT_GRID for one test, restored after.
//
// A persistent kernel (08k, 09g) launches one block per SM, or one per unit of work if there are fewer
// (steps/launch.cuh, persistent_grid). The test problems are small, so each block would take one unit
// and the walk across units would go untested; a test that sets the variable to a few blocks makes
// every block walk many.
#pragma once

#include <cstdlib>
#include <string>

namespace fl::test {

class GridEnv {
 public:
  explicit GridEnv(const std::string& value) {  // "" = unset
    if (const char* e = std::getenv(kName)) old_ = e, had_ = true;
    if (value.empty()) unsetenv(kName);
    else setenv(kName, value.c_str(), 1);
  }
  ~GridEnv() {
    if (had_) setenv(kName, old_.c_str(), 1);
    else unsetenv(kName);
  }
  GridEnv(const GridEnv&) = delete;
  GridEnv& operator=(const GridEnv&) = delete;

 private:
  static constexpr const char* kName = "FLASHLADDER_PERSISTENT_GRID";
  std::string old_;
  bool had_ = false;
};

}  // namespace fl::test
