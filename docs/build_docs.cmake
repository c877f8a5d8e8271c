# flashladder — docs/build_docs.cmake: builds the Doxygen site (the `docs` target and the docs.build test).
#   cmake -DPYTHON=… -DROOT=… -DPAGES=… -DOUT=… -DDOXYGEN=… -DDOXYFILE=… -DMATHJAX=… -P build_docs.cmake
# 1. scripts/docs_pages.py writes the generated pages (front page, ladder, step pages with their diffs,
#    theory pages with the measured ceilings) into PAGES;
# 2. the parts of Debian's MathJax that the pages load are copied next to them (offline formulas);
# 3. Doxygen runs; any warning fails the build, and the warnings are printed;
# 4. scripts/check_links.py: a broken local link in the site fails the build.
foreach(v PYTHON ROOT PAGES OUT DOXYGEN DOXYFILE MATHJAX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "build_docs.cmake: -D${v}=… is required")
  endif()
endforeach()

execute_process(COMMAND "${PYTHON}" "${ROOT}/scripts/docs_pages.py" --root "${ROOT}" --out "${PAGES}"
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "docs: scripts/docs_pages.py failed (${rc})")
endif()

# MathJax 2: the loader, TeX input, HTML-CSS output, its TeX web fonts, the extensions and English.
set(mj "${OUT}/html/mathjax")
if(NOT EXISTS "${mj}/MathJax.js")
  file(MAKE_DIRECTORY "${mj}/jax/input" "${mj}/jax/output" "${mj}/fonts/HTML-CSS/TeX" "${mj}/localization")
  file(COPY "${MATHJAX}/MathJax.js" DESTINATION "${mj}")
  file(COPY "${MATHJAX}/extensions" DESTINATION "${mj}")
  file(COPY "${MATHJAX}/jax/element" DESTINATION "${mj}/jax")
  file(COPY "${MATHJAX}/jax/input/TeX" DESTINATION "${mj}/jax/input")
  file(COPY "${MATHJAX}/jax/output/HTML-CSS" DESTINATION "${mj}/jax/output")
  file(COPY "${MATHJAX}/fonts/HTML-CSS/TeX/woff" DESTINATION "${mj}/fonts/HTML-CSS/TeX")
  file(COPY "${MATHJAX}/localization/en" DESTINATION "${mj}/localization")
endif()

# The notebooks, linked from the pages (docs/golden_sets.md links oracle_loop.ipynb).
file(GLOB notebooks "${ROOT}/notebooks/*.ipynb")
file(COPY ${notebooks} DESTINATION "${OUT}/html/notebooks")

file(REMOVE "${OUT}/warnings.log")
execute_process(COMMAND "${DOXYGEN}" "${DOXYFILE}" WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE rc)
set(warnings "")
if(EXISTS "${OUT}/warnings.log")
  file(READ "${OUT}/warnings.log" warnings)
endif()
if(rc OR NOT warnings STREQUAL "")
  message(FATAL_ERROR "docs: Doxygen reported warnings (they are errors here):\n${warnings}")
endif()
# 4. Every local link of the site resolves: Doxygen warns about an unknown @ref but not about a
#    Markdown link to a file it does not copy.
execute_process(COMMAND "${PYTHON}" "${ROOT}/scripts/check_links.py" "${OUT}/html" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "docs: the site has broken local links (listed above)")
endif()
message(STATUS "docs: the site is in ${OUT}/html/index.html")
