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
# procaddr.c includes procaddr_table.h.
include_directories(${RGPU_GEN_DIR})
