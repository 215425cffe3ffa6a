# GPU tests of the long-query (prefill / extend / ragged) kernels, included by
# tests/cuda/CMakeLists.txt (label gpu; run on the GPU machine by run_prefill_h200.sh).
flashback_add_test(cuda_test_prefill gpu ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill.cc)
target_link_libraries(cuda_test_prefill PRIVATE flashback_cuda_testing)
target_compile_definitions(cuda_test_prefill PRIVATE FLASHBACK_TEST_HEAD_DIMS="${_fb_test_dims}")

# Timing driver for the long-query workloads (not a test; run by run_prefill_h200.sh).
add_executable(cuda_bench_prefill ${CMAKE_CURRENT_SOURCE_DIR}/bench_prefill.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/bench_fill.cu)
target_link_libraries(cuda_bench_prefill PRIVATE flashback_cuda_testing)
set_target_properties(cuda_bench_prefill PROPERTIES CUDA_ARCHITECTURES "${FLASHBACK_CUDA_ARCHS}")

# The prefill kernel run on the CPU under a small emulation of the CUDA execution model
# (prefill_emu/), against the oracle: needs no GPU, so it runs wherever the CUDA build does.
flashback_add_test(cpu_test_prefill_emu cpu ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill_emu.cc)
target_include_directories(cpu_test_prefill_emu BEFORE PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/prefill_emu)
target_compile_options(cpu_test_prefill_emu PRIVATE -O2)
