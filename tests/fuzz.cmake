# flashladder — tests/fuzz.cmake: libFuzzer on the .npy reader (tests/fuzz_npy.cpp + common/npy.cpp)
# and on the golden manifest's reader (tests/fuzz_manifest.cpp + the oracle library's sources).
# libFuzzer ships with clang (Debian: clang and libclang-rt-14-dev), not with g++, so the target is
# compiled by a custom command with clang++ outside the project's toolchain, and only when a probe
# at configure time links a fuzzer. The test runs it for FL_FUZZ_SECONDS on the committed seed corpus
# (tests/fuzz_corpus/npy); new inputs go to the build tree, crashes to fuzz-artifacts/ there.
set(FL_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz.* test runs libFuzzer")
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

# fl_fuzz(NAME name SOURCES ... INCLUDES ... MAX_LEN n CORPUS dir [DICT file] [SECONDS s]): the
# target `name` compiled by clang++ from SOURCES, and the test fuzz.<suffix> running it for SECONDS
# on CORPUS (committed seeds; new inputs go to the build tree, crashes to fuzz-artifacts/ there).
function(fl_fuzz)
  cmake_parse_arguments(F "" "NAME;TEST;MAX_LEN;CORPUS;DICT;SECONDS" "SOURCES;INCLUDES;DEPENDS" ${ARGN})
  if(NOT F_SECONDS)
    set(F_SECONDS ${FL_FUZZ_SECONDS})
  endif()
  if(NOT FL_FUZZ_OK)
    # Visible in the test list, skipped with the reason (exit 77), never silently absent.
    add_test(NAME ${F_TEST} COMMAND sh -c "echo '${F_TEST} skipped: ${FL_FUZZ_WHY}'; exit 77")
    set_tests_properties(${F_TEST} PROPERTIES SKIP_RETURN_CODE 77)
    return()
  endif()
  set(bin ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME})
  set(incs -I${PROJECT_SOURCE_DIR})
  foreach(d IN LISTS F_INCLUDES)
    list(APPEND incs -I${d})
  endforeach()
  add_custom_command(OUTPUT ${bin}
    COMMAND ${FL_CLANGXX} ${FL_FUZZ_FLAGS} ${incs} ${F_SOURCES} -o ${bin}
    DEPENDS ${F_SOURCES} ${F_DEPENDS}
    COMMENT "libFuzzer target ${F_NAME} (clang++)" VERBATIM)
  add_custom_target(fl_${F_NAME} ALL DEPENDS ${bin})
  set(work ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}_corpus_work)
  file(MAKE_DIRECTORY ${work} ${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts)
  set(dict)
  if(F_DICT)
    set(dict -dict=${F_DICT})
  endif()
  add_test(NAME ${F_TEST} COMMAND ${bin} -max_total_time=${F_SECONDS} -timeout=10 -rss_limit_mb=2048
           -max_len=${F_MAX_LEN} -print_final_stats=1 ${dict}
           -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz-artifacts/${F_NAME}-
           ${work} ${F_CORPUS})
  set_tests_properties(${F_TEST} PROPERTIES TIMEOUT 300)
endfunction()

if(FL_FUZZ_OK)
  message(STATUS "flashladder: fuzz targets fuzz_npy, fuzz_manifest with ${FL_CLANGXX}")
else()
  message(STATUS "flashladder: no fuzz targets: ${FL_FUZZ_WHY}")
endif()
fl_fuzz(NAME fuzz_npy TEST fuzz.npy MAX_LEN 4096 CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_corpus/npy
        DICT ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_npy.dict
        SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_npy.cpp ${PROJECT_SOURCE_DIR}/common/npy.cpp
        DEPENDS ${PROJECT_SOURCE_DIR}/common/npy.hpp ${PROJECT_SOURCE_DIR}/common/problem.hpp)

# The golden manifest's reader (issue 13): reference/golden.cpp's parse_manifest_text, with what it
# links (the oracle library's sources; Eigen and nlohmann-json headers; no OpenMP, so its pragmas
# are ignored: the reader runs none of that code).
get_target_property(fl_eigen_inc Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(fl_json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
set(fl_fuzz_manifest_src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_manifest.cpp)
foreach(f common/problem.cpp common/tensor.cpp common/compare.cpp common/npy.cpp reference/oracle.cpp
          reference/verify.cpp reference/golden.cpp)
  list(APPEND fl_fuzz_manifest_src ${PROJECT_SOURCE_DIR}/${f})
endforeach()
file(GLOB fl_fuzz_manifest_hdr ${PROJECT_SOURCE_DIR}/common/*.hpp ${PROJECT_SOURCE_DIR}/reference/*.hpp)
fl_fuzz(NAME fuzz_manifest TEST fuzz.manifest MAX_LEN 8192 CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_corpus/manifest
        DICT ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_manifest.dict
        SOURCES ${fl_fuzz_manifest_src} INCLUDES ${fl_eigen_inc} ${fl_json_inc} DEPENDS ${fl_fuzz_manifest_hdr})
