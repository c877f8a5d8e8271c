# The installed package, as a user meets it: cmake --install the oracle component to a fresh prefix,
# configure tests/consumer against that prefix only (no package registry, no source tree), build it,
# run it; then the installed program: `oracle check` on the consumer's files, and `diff`, which must
# read the step sources installed in the prefix, not the build-time source tree. Any step failing
# fails the test with its output.
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/install_step.cmake)  # step()
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix --component oracle)
step("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER} -B ${WORK}/build -G ${GENERATOR}
     -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK}/prefix
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(NOT last_out MATCHES "flashladder [0-9.]+ from ${WORK}/prefix/")
  message(FATAL_ERROR "the consumer did not find the package in ${WORK}/prefix:\n${last_out}")
endif()
step("build consumer" ${CMAKE_COMMAND} --build ${WORK}/build)
step("run consumer" ${WORK}/build/consumer ${WORK}/golden)
message(STATUS "${last_out}")
# The installed program, run from the prefix (not the build tree).
set(FL ${WORK}/prefix/bin/flashladder)
if(NOT EXISTS ${FL})
  message(FATAL_ERROR "cmake --install did not install the program: no ${FL}")
endif()
step("installed oracle check" ${FL} oracle check --golden ${WORK}/golden/golden --candidate ${WORK}/golden/candidate --backward)
if(NOT last_out MATCHES "oracle check: PASS \\(5 tensors")
  message(FATAL_ERROR "the installed program's oracle check did not pass the consumer's candidate:\n${last_out}")
endif()
step("installed diff" ${FL} diff 02)
if(NOT last_out MATCHES "--- ${WORK}/prefix/share/flashladder/steps/01_cpu_standard/attention.cpp")
  message(FATAL_ERROR "the installed 'flashladder diff' did not read the installed step sources:\n${last_out}")
endif()
message(STATUS "consumer: ok (library, program and installed step sources)")
