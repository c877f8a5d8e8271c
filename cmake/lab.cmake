# flashladder — cmake/lab.cmake: the build of an exercise folder (`flashladder lab new` writes its
# CMakeLists.txt, which includes the build's flashladder_lab.cmake, calls project() and includes this).
#
# One program, lab_suite: the student's FLASHLADDER_LAB_SOURCE (defining fl::sNN::impl), then the
# core's archive. The linker takes an archive member only for a symbol still undefined, so the
# ladder's reference to the step's impl resolves to the student's object and the step's own is never
# linked (app/lab_cmd.cpp explains the design). The source is compiled with the core's include
# folders, definitions and options, so it sees exactly what the step saw.
if(NOT FLASHLADDER_LAB_SOURCE OR NOT EXISTS "${FLASHLADDER_LAB_SOURCE}")
  message(FATAL_ERROR "flashladder lab: FLASHLADDER_LAB_SOURCE ('${FLASHLADDER_LAB_SOURCE}') is not a file")
endif()
foreach(a IN LISTS FL_LAB_ARCHIVES)
  if(NOT EXISTS "${a}")
    message(FATAL_ERROR "flashladder lab: ${a} is missing: build flashladder first (ninja -C <build> flashladder)")
  endif()
endforeach()
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
if(FLASHLADDER_LAB_SOURCE MATCHES "\\.cu$")
  if(NOT FL_LAB_HAVE_CUDA)
    message(FATAL_ERROR "flashladder lab: this exercise is a GPU step (${FLASHLADDER_LAB_SOURCE}), and the "
                        "flashladder build it links was made without CUDA (nvcc was not found): build flashladder on a machine with nvcc")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${FL_LAB_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
find_package(OpenMP REQUIRED COMPONENTS CXX)
add_executable(lab_suite "${FLASHLADDER_LAB_SOURCE}")
target_include_directories(lab_suite PRIVATE ${FL_LAB_INCLUDES})
target_compile_definitions(lab_suite PRIVATE ${FL_LAB_DEFINITIONS})
target_compile_options(lab_suite PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FL_LAB_NATIVE}>>:-march=native>
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr -Xptxas=-warn-spills>)
target_link_libraries(lab_suite PRIVATE ${FL_LAB_ARCHIVES} OpenMP::OpenMP_CXX)
# The step before (FLASHLADDER_LAB_BASE, its namespace sNN) is linked too, for the speed comparison of a
# GPU step: the ladder refers to GPU steps weakly, and a weak reference does not pull an archive member,
# so its impl (fl::sNN::impl, mangled _ZN2fl<len>sNN4implE) is named as undefined to the linker.
if(FLASHLADDER_LAB_BASE AND FLASHLADDER_LAB_SOURCE MATCHES "\\.cu$")
  string(LENGTH "s${FLASHLADDER_LAB_BASE}" fl_ns_len)
  target_link_options(lab_suite PRIVATE "LINKER:--undefined=_ZN2fl${fl_ns_len}s${FLASHLADDER_LAB_BASE}4implE")
endif()
if(FL_LAB_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(lab_suite PRIVATE CUDA::cudart CUDA::cublas)  # the archive's runner and baselines
endif()
