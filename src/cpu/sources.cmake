# Fast CPU kernels (issue #4): OpenMP threads + Highway SIMD with run-time target dispatch.
# Highway is found as a plain library path (not an imported target) so the installed package
# config of the static flashback library needs no extra find_dependency.
find_path(HWY_INCLUDE_DIR hwy/highway.h REQUIRED)
find_library(HWY_LIBRARY hwy REQUIRED)

target_sources(flashback PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/fast/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/attention_kernel.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/merge_store.cc)
target_include_directories(flashback PRIVATE ${HWY_INCLUDE_DIR})
target_compile_definitions(flashback PRIVATE HWY_SHARED_DEFINE)
target_link_libraries(flashback PRIVATE ${HWY_LIBRARY})
# Highway compiles attention_kernel.cc once per x86 target; SSSE3 only adds build time for
# machines SSE4 covers, so it is left out (EMU128 stays as the portable fallback).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/fast/attention_kernel.cc PROPERTIES
  COMPILE_DEFINITIONS "HWY_DISABLED_TARGETS=HWY_SSSE3")
