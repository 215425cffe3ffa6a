# GPU tests of the long-query (prefill / extend / ragged) kernels, included by
# tests/cuda/CMakeLists.txt (label gpu; run on the GPU machine by scripts/gpu_final.sh).
flashback_add_test(cuda_test_prefill gpu ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill.cc)
target_link_libraries(cuda_test_prefill PRIVATE flashback_cuda_testing)
target_compile_definitions(cuda_test_prefill PRIVATE FLASHBACK_TEST_HEAD_DIMS="${_fb_test_dims}")

# The Hopper MMA primitives (src/cuda/common/wgmma.cuh) on their own, against a CPU product.
flashback_add_test(cuda_test_wgmma gpu ${CMAKE_CURRENT_SOURCE_DIR}/test_wgmma.cu)
set_target_properties(cuda_test_wgmma PROPERTIES CUDA_ARCHITECTURES "${FLASHBACK_CUDA_ARCHS}"
  CUDA_STANDARD 20)
target_link_libraries(cuda_test_wgmma PRIVATE CUDA::cudart)
target_compile_options(cuda_test_wgmma PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
