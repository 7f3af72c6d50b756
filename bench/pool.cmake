# Pool scale (bench/pool_scale.sh, docs/pool.md): a job's start through rgpu, the probe and
# placement alone, and many probe-answering pool members in one process.
add_executable(rgpu-bench-pool-start ${CMAKE_CURRENT_LIST_DIR}/pool_start.c)
target_include_directories(rgpu-bench-pool-start PRIVATE ${CUDA_HOME}/include)
target_link_libraries(rgpu-bench-pool-start PRIVATE rgpu_client)
add_executable(rgpu-bench-pool-place ${CMAKE_CURRENT_LIST_DIR}/pool_place.c
               ${CMAKE_SOURCE_DIR}/client/session/config.c ${CMAKE_SOURCE_DIR}/client/session/pool.c)
target_include_directories(rgpu-bench-pool-place PRIVATE ${CMAKE_SOURCE_DIR}/client)
target_link_libraries(rgpu-bench-pool-place PRIVATE rgpu_proto rgpu_transport rgpu_scheduler
                      rgpu_common pthread dl)
add_executable(rgpu-bench-pool-fake ${CMAKE_CURRENT_LIST_DIR}/pool_fake.c)
target_link_libraries(rgpu-bench-pool-fake PRIVATE rgpu_proto rgpu_common)
set_target_properties(rgpu-bench-pool-start rgpu-bench-pool-place rgpu-bench-pool-fake
                      PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
