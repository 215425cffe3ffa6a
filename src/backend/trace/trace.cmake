# The serving trace (issue #5 item 3): a small engine driving AttentionBackend, checked against
# the oracle. Linked by the `flashback` tool (flashback check) and the backend tests.
add_library(flashback_backend_trace STATIC
  ${CMAKE_CURRENT_LIST_DIR}/device.cc
  ${CMAKE_CURRENT_LIST_DIR}/model.cc
  ${CMAKE_CURRENT_LIST_DIR}/history.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cc
  ${CMAKE_CURRENT_LIST_DIR}/trace.cc)
target_include_directories(flashback_backend_trace PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashback_backend_trace PUBLIC flashback_testing)
target_compile_options(flashback_backend_trace PRIVATE -Wall -Wextra)
# `flashback check --device cuda`: device copies through src/cuda/memory.h (CUDA builds only).
if(FLASHBACK_CUDA)
  target_compile_definitions(flashback_backend_trace PRIVATE FLASHBACK_WITH_CUDA)
endif()
