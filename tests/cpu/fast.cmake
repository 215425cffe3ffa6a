# Fast CPU kernel tests (label cpu). The benchmark is `flashback bench --device cpu`.
flashback_add_test(test_fast_paged cpu test_fast_paged.cc)
flashback_add_test(test_fast_invariance cpu test_fast_invariance.cc)
flashback_add_test(test_fast_ops cpu test_fast_ops.cc)

# Forces Highway's dispatch to each compiled target; same target list as the kernels.
flashback_add_test(test_fast_targets cpu test_fast_targets.cc)
target_include_directories(test_fast_targets PRIVATE ${HWY_INCLUDE_DIR})
target_compile_definitions(test_fast_targets PRIVATE HWY_SHARED_DEFINE "${FLASHBACK_HWY_DISABLED}")
target_link_libraries(test_fast_targets PRIVATE ${HWY_LIBRARY})
