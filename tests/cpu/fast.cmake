# Fast CPU kernel tests (label cpu). The benchmark is `flashback bench --device cpu`.
flashback_add_test(test_fast_paged cpu test_fast_paged.cc)
flashback_add_test(test_fast_invariance cpu test_fast_invariance.cc)
flashback_add_test(test_fast_ops cpu test_fast_ops.cc)
flashback_add_test(test_fast_nan cpu test_fast_nan.cc)
flashback_add_test(test_next_rows cpu test_next_rows.cc)
flashback_add_test(test_stealing_runs cpu test_stealing_runs.cc)

# Forces Highway's dispatch to each compiled target; same target list as the kernels.
flashback_add_test(test_fast_targets cpu test_fast_targets.cc)
target_include_directories(test_fast_targets PRIVATE ${HWY_INCLUDE_DIR})
target_compile_definitions(test_fast_targets PRIVATE HWY_SHARED_DEFINE "${FLASHBACK_HWY_DISABLED}")
target_link_libraries(test_fast_targets PRIVATE ${HWY_LIBRARY})

# On a host with AMX the decode cases above run the AMX score and P·V path (src/cpu/fast/amx.h),
# on one with AVX512-BF16 and no AMX the VDPBF16PS path (src/cpu/fast/dpbf16.h); the _no_amx
# runs turn AMX off (FLASHBACK_CPU_AMX=0: the VDPBF16PS path where the host has it), the
# _highway runs both (the Highway targets' own fp32 paths).
foreach(t test_fast_paged test_fast_invariance test_fast_targets)
  add_test(NAME ${t}_no_amx COMMAND ${t})
  set_tests_properties(${t}_no_amx PROPERTIES LABELS cpu ENVIRONMENT FLASHBACK_CPU_AMX=0)
endforeach()
foreach(t test_fast_paged test_fast_invariance test_fast_nan)
  add_test(NAME ${t}_highway COMMAND ${t})
  set_tests_properties(${t}_highway PROPERTIES LABELS cpu
                       ENVIRONMENT "FLASHBACK_CPU_AMX=0;FLASHBACK_CPU_DPBF16=0")
endforeach()
