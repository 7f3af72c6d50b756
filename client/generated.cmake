# Driver-API sources generated at build time by tools/gen_driver_api.py (included from
# client/CMakeLists.txt): weak stubs for every symbol the toolkit's stub libcuda exports, the
# cuGetProcAddress version table, and cuGetErrorName/String.
set(RGPU_CUDA_STUB "${CUDA_HOME}/lib64/stubs/libcuda.so" CACHE FILEPATH
    "The toolkit's stub libcuda.so: its dynamic symbols are the driver API the client exports")
if(NOT EXISTS "${RGPU_CUDA_STUB}")
  message(FATAL_ERROR "stub libcuda not found at ${RGPU_CUDA_STUB}: set -DRGPU_CUDA_STUB")
endif()
if(CMAKE_NM)
  set(RGPU_NM "${CMAKE_NM}")
else()
  set(RGPU_NM nm)
endif()
set(RGPU_GEN_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)
set(CLIENT_GENERATED_SOURCES
    ${RGPU_GEN_DIR}/driver_stubs.c ${RGPU_GEN_DIR}/procaddr_table.c
    ${RGPU_GEN_DIR}/procaddr_table.h ${RGPU_GEN_DIR}/error_strings.c)
add_custom_command(
  OUTPUT ${CLIENT_GENERATED_SOURCES}
  COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tools/gen_driver_api.py
          --cuda-include ${CUDA_HOME}/include --stub ${RGPU_CUDA_STUB} --nm ${RGPU_NM}
          --out-dir ${RGPU_GEN_DIR}
  DEPENDS ${CMAKE_SOURCE_DIR}/tools/gen_driver_api.py ${CUDA_HOME}/include/cuda.h
          ${CUDA_HOME}/include/cudaTypedefs.h ${RGPU_CUDA_STUB}
  COMMENT "Generating driver API stubs and tables from the CUDA headers"
  VERBATIM)
# api/procaddr.c includes procaddr_table.h.
include_directories(${RGPU_GEN_DIR})

# docs/api-coverage.md from client/api_coverage.txt and the built library's symbols (strong =
# hand-written, weak = generated stub): regenerated into the build tree with every build,
# rewritten in the source tree by the api-coverage-update target, and compared with the committed
# copy by the api_coverage test (tests/api_coverage), which also fails when the table and the
# code disagree.
set(RGPU_COVERAGE_ARGS
    ${CMAKE_SOURCE_DIR}/tools/gen_driver_api.py --cuda-include ${CUDA_HOME}/include
    --stub ${RGPU_CUDA_STUB} --nm ${RGPU_NM}
    --coverage-table ${CMAKE_CURRENT_SOURCE_DIR}/api_coverage.txt --lib $<TARGET_FILE:rgpu_client>
    CACHE INTERNAL "gen_driver_api.py arguments for the coverage document (tests use them too)")
add_custom_target(api_coverage_doc ALL
  COMMAND Python3::Interpreter ${RGPU_COVERAGE_ARGS}
          --coverage-out ${CMAKE_BINARY_DIR}/docs/api-coverage.md || true
  DEPENDS rgpu_client ${CMAKE_CURRENT_SOURCE_DIR}/api_coverage.txt
  COMMENT "Generating docs/api-coverage.md in the build tree"
  VERBATIM)
add_custom_target(api-coverage-update
  COMMAND Python3::Interpreter ${RGPU_COVERAGE_ARGS}
          --coverage-out ${CMAKE_SOURCE_DIR}/docs/api-coverage.md
  DEPENDS rgpu_client
  COMMENT "Rewriting docs/api-coverage.md"
  VERBATIM)
