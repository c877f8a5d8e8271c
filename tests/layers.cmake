# flashladder — tests/layers.cmake: the folders are layers and every #include points down.
#   common/     includes nothing of ours but common/
#   reference/  common/ and reference/
#   steps/      common/ and steps/   (never app/: the program sits above the ladder)
#   app/        common/, reference/, steps/ and app/   (never tests/: the tests use the program and
#               the libraries, not the other way round; what both need lives in app/ or reference/)
# "Ours" is an include whose first folder is one of the project's folders; other quoted includes with
# a slash (a library's "nlohmann/json.hpp") are not this test's business.
# Run: cmake -DROOT=<source dir> -P layers.cmake. Fails naming each file and include that points up.
cmake_policy(VERSION 3.25)
set(ours common reference steps app tests python scripts tools docs notebooks cmake)
set(allowed_common "common")
set(allowed_reference "common;reference")
set(allowed_steps "common;steps")
set(allowed_app "common;reference;steps;app")
set(bad "")
set(checked 0)
foreach(layer common reference steps app)
  file(GLOB_RECURSE files "${ROOT}/${layer}/*.hpp" "${ROOT}/${layer}/*.cpp" "${ROOT}/${layer}/*.cu" "${ROOT}/${layer}/*.cuh")
  foreach(f IN LISTS files)
    math(EXPR checked "${checked} + 1")
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" inc "${line}")
      string(REGEX MATCH "^[^/]+" top "${inc}")
      if(inc MATCHES "/" AND top IN_LIST ours AND NOT top IN_LIST allowed_${layer})
        file(RELATIVE_PATH rel "${ROOT}" "${f}")
        string(APPEND bad "\n  ${rel} includes ${inc} (${layer}/ may include only: ${allowed_${layer}})")
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "an include points up a layer:${bad}")
endif()
# The program's sources are app/'s (and the steps'): a tests/ source compiled into it is a dependency
# too, one that no #include shows (the ring command once compiled tests/sampled_reference.cpp).
file(READ "${ROOT}/CMakeLists.txt" top_cmake)
string(REGEX MATCHALL "tests/[A-Za-z0-9_./-]+\\.(cpp|cu|hpp)" from_tests "${top_cmake}")
if(from_tests)
  string(REPLACE ";" ", " from_tests "${from_tests}")
  message(FATAL_ERROR "CMakeLists.txt compiles sources of tests/ into the program or its libraries: ${from_tests}")
endif()
if(checked LESS 20)
  message(FATAL_ERROR "layers: only ${checked} sources found under ${ROOT}: is ROOT the source folder?")
endif()
message(STATUS "layers: every include of common/, reference/, steps/ and app/ points down (${checked} files)")
