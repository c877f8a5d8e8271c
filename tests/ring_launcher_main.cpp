// flashladder — tests/ring_launcher_main.cpp: `flashladder_ring_launcher ring …`, the ring command of
// app/ring_cmd.cpp over the fake ranks of ring_fake_rank.cpp (see there), for the launcher's CPU tests.
#include <iostream>

#include "app/ring_cmd.hpp"

int main(int argc, char** argv) {
  CLI::App app{"flashladder's ring launcher over fake CPU ranks (tests only)"};
  app.require_subcommand(1, 1);
  fl::cli::RingOptions o;
  add_ring_command(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return fl::cli::run_ring(o);
  } catch (const std::exception& e) {
    std::cerr << "flashladder: error: " << e.what() << "\n";
    return 2;
  }
}
