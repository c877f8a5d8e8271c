# flashladder — tests/capi_installed.cmake (ctest capi.installed): the C library and its header as a C user
# meets them. `cmake --install` the capi component to a fresh prefix, compile tests/capi_c.c against that
# prefix alone (its include folder and library; the CUDA runtime from the toolkit), run its refusals.
# Any step failing fails the test with its output; the last line is printed only when all passed.
foreach(v BUILD_DIR WORK SOURCE CC CUDA_INCLUDE CUDA_LIB LIBDIR INCLUDEDIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "capi_installed.cmake: -D${v}=… is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/install_step.cmake)  # step()
set(prefix ${WORK}/prefix)
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component capi)
foreach(f ${prefix}/${INCLUDEDIR}/flashladder.h ${prefix}/${LIBDIR}/libflashladder_capi.so)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "cmake --install --component capi did not install ${f}")
  endif()
endforeach()
set(includes -I${prefix}/${INCLUDEDIR})
foreach(dir ${CUDA_INCLUDE})
  list(APPEND includes -I${dir})
endforeach()
step("compile against the prefix" ${CC} -std=c11 -Wall -Wextra -pedantic -Werror ${includes} ${SOURCE}
     -L${prefix}/${LIBDIR} -lflashladder_capi -L${CUDA_LIB} -lcudart -lm
     -Wl,-rpath,${prefix}/${LIBDIR} -Wl,-rpath,${CUDA_LIB} -o ${WORK}/capi_c)
step("run the refusals" ${WORK}/capi_c refusals)
message(STATUS "capi.installed: ok (header and library from ${prefix})")
