# flashladder — tests/fuzz.cmake: libFuzzer on the .npy reader (tests/fuzz_npy.cpp + common/npy.cpp).
# libFuzzer ships with clang (Debian: clang and libclang-rt-14-dev), not with g++, so the target is
# compiled by a custom command with clang++ outside the project's toolchain, and only when a probe
# at configure time links a fuzzer. The test runs it for FL_FUZZ_SECONDS on the committed seed corpus
# (tests/fuzz_corpus/npy); new inputs go to the build tree, crashes to fuzz-artifacts/ there.
set(FL_FUZZ_SECONDS 20 CACHE STRING "Seconds the fuzz.npy test runs libFuzzer")
find_program(FL_CLANGXX NAMES clang++ clang++-16 clang++-15 clang++-14)
set(FL_FUZZ_FLAGS -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
set(FL_FUZZ_OK OFF)
if(FL_CLANGXX)
  set(probe ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe.cpp)
  file(WRITE ${probe} "#include <cstdint>\n#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${FL_CLANGXX} ${FL_FUZZ_FLAGS} ${probe} -o ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe
                  RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_VARIABLE probe_err)
  if(probe_rc EQUAL 0)
    set(FL_FUZZ_OK ON)
  else()
    set(FL_FUZZ_WHY "${FL_CLANGXX} cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)")
  endif()
else()
  set(FL_FUZZ_WHY "no clang++ found (tools/install-deps installs clang and libclang-rt-14-dev)")
endif()

if(FL_FUZZ_OK)
  message(STATUS "flashladder: fuzz target fuzz_npy with ${FL_CLANGXX}")
  set(fuzz_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_npy)
  add_custom_command(OUTPUT ${fuzz_bin}
    COMMAND ${FL_CLANGXX} ${FL_FUZZ_FLAGS} -I${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_npy.cpp
            ${PROJECT_SOURCE_DIR}/common/npy.cpp -o ${fuzz_bin}
    DEPENDS fuzz_npy.cpp ${PROJECT_SOURCE_DIR}/common/npy.cpp ${PROJECT_SOURCE_DIR}/common/npy.hpp
            ${PROJECT_SOURCE_DIR}/common/problem.hpp
    COMMENT "libFuzzer target fuzz_npy (clang++)" VERBATIM)
  add_custom_target(fl_fuzz_npy ALL DEPENDS ${fuzz_bin})
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts)
  add_test(NAME fuzz.npy COMMAND ${fuzz_bin} -max_total_time=${FL_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
           -max_len=4096 -print_final_stats=1 -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz_npy.dict
           -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts/
           ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_corpus/npy)
  set_tests_properties(fuzz.npy PROPERTIES TIMEOUT 300)
else()
  # Visible in the test list, skipped with the reason (exit 77), never silently absent.
  message(STATUS "flashladder: no fuzz target: ${FL_FUZZ_WHY}")
  add_test(NAME fuzz.npy COMMAND sh -c "echo 'fuzz.npy skipped: ${FL_FUZZ_WHY}'; exit 77")
  set_tests_properties(fuzz.npy PROPERTIES SKIP_RETURN_CODE 77)
endif()
