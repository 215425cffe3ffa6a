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

# On a host with AMX the decode cases above run the AMX score and P·V path (src/cpu/fast/amx.h);
# these run them again with it off (FLASHBACK_CPU_AMX=0), on the Highway targets' own paths.
foreach(t test_fast_paged test_fast_invariance test_fast_targets)
  add_test(NAME ${t}_no_amx COMMAND ${t})
  set_tests_properties(${t}_no_amx PROPERTIES LABELS cpu ENVIRONMENT FLASHBACK_CPU_AMX=0)
endforeach()
