# The plan layer (issue #3): host-side metadata for every forward mode. Pure C++, no CUDA.
target_sources(flashback PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/rows.cc
  ${CMAKE_CURRENT_LIST_DIR}/build.cc
  ${CMAKE_CURRENT_LIST_DIR}/planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/metadata.cc
  ${CMAKE_CURRENT_LIST_DIR}/visible.cc)
