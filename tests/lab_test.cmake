# flashladder — tests/lab_test.cmake: one exercise of the lab kit (issue 20), as a new student gets it.
#   cmake -DFL=<flashladder> -DSTEP=02 -DDIR=<scratch folder> -DMODE=handout|solution|mutate
#         [-DFIXTURE=tests/lab/NN_name.txt] -P lab_test.cmake
# handout: `lab new` must write the folder, and `lab check` must FAIL it (the exercise is incomplete).
# solution: the marked regions put back (`lab new --solution`): `lab check` must PASS.
# mutate: a known wrong solution (a fixture; `lab new --mutate`): `lab check` must FAIL, and its report
#   must match each of the fixture's "# expect: REGEX" lines, the messages that point at the mistake.
# A GPU exercise without a GPU (or in a build without CUDA) prints "needs a GPU" and the test is
# skipped (SKIP_REGULAR_EXPRESSION), after `lab new` has proved the folder is written (its marks are
# balanced, its fixtures still apply); under FLASHLADDER_REQUIRE_GPU=1 that is a failure.
cmake_policy(VERSION 3.25)
file(REMOVE_RECURSE "${DIR}")
set(args lab new ${STEP} ${DIR})
if(MODE STREQUAL "solution")
  list(APPEND args --solution)
elseif(MODE STREQUAL "mutate")
  list(APPEND args --mutate ${FIXTURE})
  # One regex per "# expect:" line, each matched on its own (a single regex spanning lines, (.|\n)*,
  # backtracks for minutes over a long report in CMake's engine).
  file(STRINGS "${FIXTURE}" expect_lines REGEX "^# expect: ")
  if(NOT expect_lines)
    message(FATAL_ERROR "${FIXTURE} has no '# expect: REGEX' line: a wrong solution must say what message points at its mistake")
  endif()
endif()
execute_process(COMMAND ${FL} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "flashladder ${args} failed (exit ${rc}):\n${out}${err}")
endif()
execute_process(COMMAND ${FL} lab check ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc EQUAL 77)
  if(DEFINED ENV{FLASHLADDER_REQUIRE_GPU} AND NOT "$ENV{FLASHLADDER_REQUIRE_GPU}" STREQUAL "" AND NOT "$ENV{FLASHLADDER_REQUIRE_GPU}" STREQUAL "0")
    message(FATAL_ERROR "exercise ${STEP} needs a GPU, and FLASHLADDER_REQUIRE_GPU is set")
  endif()
  message("GPU test skipped: exercise ${STEP} needs a GPU (its folder was written; the check did not run)")
  return()
endif()
if(MODE STREQUAL "solution")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "lab check: PASS")
    message(FATAL_ERROR "exercise ${STEP} with the marked regions put back did not pass its check (exit ${rc}): the kit has drifted from the step")
  endif()
else()
  # The suite must have run: a handout (or a fixture) that does not compile also prints "lab check: FAIL"
  # with exit 1, and must not pass as "builds and fails its check".
  if(NOT out MATCHES "lab check: [0-9]+ of [0-9]+ shapes pass")
    message(FATAL_ERROR "exercise ${STEP} (${MODE}): the check did not run its suite (exit ${rc}); does the source build?")
  endif()
  if(NOT rc EQUAL 1 OR NOT out MATCHES "lab check: FAIL")
    message(FATAL_ERROR "exercise ${STEP} (${MODE}) was expected to FAIL its check (exit 1), got exit ${rc}: a check that cannot fail is a defect")
  endif()
  foreach(line IN LISTS expect_lines)
    string(REGEX REPLACE "^# expect: " "" expect "${line}")
    if(NOT out MATCHES "${expect}")
      message(FATAL_ERROR "exercise ${STEP}: ${FIXTURE} failed, but the report does not point at its mistake: no match for\n  ${expect}")
    endif()
  endforeach()
endif()
