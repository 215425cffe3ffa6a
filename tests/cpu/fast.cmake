# Fast CPU kernel tests (label cpu) and the CPU kernel benchmark (not a test).
flashback_add_test(test_fast_paged cpu test_fast_paged.cc)
flashback_add_test(test_fast_invariance cpu test_fast_invariance.cc)
flashback_add_test(test_fast_ops cpu test_fast_ops.cc)

# Benchmark of the fast CPU kernels on the cpu workloads (bench/workloads.json); not a test.
add_executable(bench_cpu_kernels ${PROJECT_SOURCE_DIR}/bench/cpu_kernels.cc)
target_link_libraries(bench_cpu_kernels PRIVATE flashback_testing OpenMP::OpenMP_CXX)
