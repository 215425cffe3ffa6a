# Fast CPU kernels (issue #4): OpenMP threads + Highway SIMD with run-time target dispatch.
# Highway is found as a plain library path (not an imported target) so the installed package
# config of the static flashback library needs no extra find_dependency.
find_path(HWY_INCLUDE_DIR hwy/highway.h REQUIRED)
find_library(HWY_LIBRARY hwy REQUIRED)

target_sources(flashback PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/fast/amx.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/attention_kernel.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/dpbf16.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/merge_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/tile_bf16.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/tile_f16.cc)
target_include_directories(flashback PRIVATE ${HWY_INCLUDE_DIR})
target_compile_definitions(flashback PRIVATE HWY_SHARED_DEFINE)
target_link_libraries(flashback PRIVATE ${HWY_LIBRARY})
# Highway compiles attention_kernel.cc and the tile kernels' files once per x86 target (the same
# targets in each: they call each other within a target); SSSE3 only adds build time for
# machines SSE4 covers, so it is left out (the scalar/EMU128 target stays as the portable
# fallback). AVX-512 (HWY_AVX3) is in: its softcap fault (test_fast_targets, first seen on a
# Sapphire Rapids host) came from tanh_f32 inlined into the softmax loops, now out of line
# (simd-inl.h); on a Zen 4 host every CPU test passes on it and decode runs 12-18 % faster than
# on AVX2 (docs/PERFORMANCE_CPU.md, session 13). HWY_AVX3_DL stays out (no machine here has
# run it; AVX3 serves those CPUs). Keep FLASHBACK_HWY_DISABLED in sync with
# tests/cpu/fast.cmake (the targets test enumerates the same list).
set(FLASHBACK_HWY_DISABLED "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_AVX3_DL)")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/fast/attention_kernel.cc
  ${CMAKE_CURRENT_LIST_DIR}/fast/tile_bf16.cc ${CMAKE_CURRENT_LIST_DIR}/fast/tile_f16.cc
  PROPERTIES COMPILE_DEFINITIONS "${FLASHBACK_HWY_DISABLED}")
