target_sources(flashback PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kv_cache.cc
  ${CMAKE_CURRENT_LIST_DIR}/backend.cc)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/trace/trace.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/trace/trace.cmake)
endif()
