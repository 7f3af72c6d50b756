/* Client-internal API shared by the files of client/ (libcuda.so.1), in three parts: the call
 * API (call.h), client objects and their lookups (objects.h), the bulk paths (bulk.h). Nothing
 * here is exported: the library exports only the CUDA driver API (cu*, CLI_EXPORT). */
#ifndef RGPU_CLIENT_H
#define RGPU_CLIENT_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/log.h"
#include "common/status.h"
#include "proto/ops.h"

#define CLI_EXPORT __attribute__((visibility("default")))

#include "client/bulk.h"
#include "client/call.h"
#include "client/objects.h"

#endif
