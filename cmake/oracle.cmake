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
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FL_ORACLE_HEADERS common/problem.hpp common/tensor.hpp common/compare.hpp common/npy.hpp
    reference/oracle.hpp reference/verify.hpp reference/golden.hpp)
add_library(flashladder_oracle STATIC
  common/problem.cpp common/tensor.cpp common/compare.cpp common/npy.cpp
  reference/oracle.cpp reference/verify.cpp reference/golden.cpp)
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
target_compile_options(flashladder_oracle PRIVATE -Wall -Wextra $<$<BOOL:${FLASHLADDER_NATIVE}>:-march=native>)

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
