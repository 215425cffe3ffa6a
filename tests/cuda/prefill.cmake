# GPU tests of the long-query (prefill / extend / ragged) kernels, included by
# tests/cuda/CMakeLists.txt (label gpu; run on the GPU machine by scripts/gpu_final.sh).
flashback_add_test(cuda_test_prefill gpu ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill.cc)
target_link_libraries(cuda_test_prefill PRIVATE flashback_cuda_testing)
target_compile_definitions(cuda_test_prefill PRIVATE FLASHBACK_TEST_HEAD_DIMS="${_fb_test_dims}")

# The prefill kernel run on the CPU under a small emulation of the CUDA execution model
# (prefill_emu/), against the oracle: needs no GPU, so it runs wherever the CUDA build does.
flashback_add_test(cpu_test_prefill_emu cpu ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill_emu.cc)
target_include_directories(cpu_test_prefill_emu BEFORE PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/prefill_emu)
target_compile_options(cpu_test_prefill_emu PRIVATE -O2)
