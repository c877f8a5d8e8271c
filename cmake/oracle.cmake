# flashladder — cmake/oracle.cmake: the oracle as a library, and as an installable CMake package.
#
#   find_package(flashladder)  +  target_link_libraries(x flashladder::oracle)
#
# The library is the CPU-only part of the project: the problem, tensors, the tolerance rule, the .npy
# reader/writer, the fp64 oracle, verify() and golden sets. No CUDA, no steps. flashladder_core links
# it, so it is compiled once. Eigen and nlohmann-json are header-only and used inside the .cpp files
# only, so consumers need neither (BUILD_INTERFACE); OpenMP is linked, so the package config finds it.
# With FLASHLADDER_NATIVE (the default) the library carries this machine's instruction set:
# configure with -DFLASHLADDER_NATIVE=OFF to install a portable one.
#
# -ffp-contract=off: the oracle's numbers must not depend on the machine that built it. GCC's default
# in GNU mode is -ffp-contract=fast, so under -march=native on a CPU with FMA it fuses every a*b + c it
# sees (the oracle's and the baseline's own loops: softmax sums, rescaling, the tolerance rule's
# arithmetic in compare.cpp, Eigen's coefficient-wise expressions) into one FMA with one rounding, and
# leaves them as two roundings elsewhere: the fp32 baseline, hence every tolerance, came out differently
# with and without -march=native. With contraction off, each of those is the two roundings the source
# writes, on every x86 machine. What this flag cannot reach: Eigen's matrix-product kernels call FMA
# intrinsics themselves when the target has FMA (EIGEN_VECTORIZE_FMA), so the last bits of a product
# still follow -march. For an oracle that is bitwise the same everywhere, configure the whole build with
# -DFLASHLADDER_NATIVE=OFF (the oracle alone cannot drop -march: its Eigen template instantiations are
# the CPU steps' too, and a binary keeps one copy of each).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FL_ORACLE_HEADERS common/problem.hpp common/tensor.hpp common/compare.hpp common/npy.hpp
    reference/oracle.hpp reference/verify.hpp reference/golden.hpp reference/sampled.hpp)
add_library(flashladder_oracle STATIC
  common/problem.cpp common/tensor.cpp common/compare.cpp common/npy.cpp
  reference/oracle.cpp reference/verify.cpp reference/golden.cpp reference/sampled.cpp)
add_library(flashladder::oracle ALIAS flashladder_oracle)
set_target_properties(flashladder_oracle PROPERTIES EXPORT_NAME oracle OUTPUT_NAME flashladder_oracle
                      POSITION_INDEPENDENT_CODE ON)  # linkable into shared libraries (the C API)
target_compile_features(flashladder_oracle PUBLIC cxx_std_17)
target_include_directories(flashladder_oracle PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/flashladder>)
target_link_libraries(flashladder_oracle
  PUBLIC OpenMP::OpenMP_CXX
  PRIVATE $<BUILD_INTERFACE:Eigen3::Eigen> $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)
target_compile_options(flashladder_oracle PRIVATE -Wall -Wextra -ffp-contract=off $<$<BOOL:${FLASHLADDER_NATIVE}>:-march=native>)

install(TARGETS flashladder_oracle EXPORT flashladderTargets COMPONENT oracle
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(h IN LISTS FL_ORACLE_HEADERS)
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashladder/${dir} COMPONENT oracle)
endforeach()
set(FL_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashladder)
install(EXPORT flashladderTargets NAMESPACE flashladder:: DESTINATION ${FL_CONFIG_DIR} COMPONENT oracle)
configure_package_config_file(cmake/flashladderConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashladderConfig.cmake INSTALL_DESTINATION ${FL_CONFIG_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashladderConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashladderConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashladderConfigVersion.cmake
        DESTINATION ${FL_CONFIG_DIR} COMPONENT oracle)
