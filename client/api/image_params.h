/* Kernel parameter layouts read from a module image (image_params.c). */
#ifndef RGPU_CLIENT_IMAGE_PARAMS_H
#define RGPU_CLIENT_IMAGE_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The layout of kernel name in a cubin, or in a fatbin's first uncompressed cubin: n
 * parameters, their offsets and sizes by ordinal (malloc'd arrays, NULL when n is 0). false
 * when the image has no such kernel or its description is not understood. */
bool cli_image_kernel_params(const void *image, size_t len, const char *name, unsigned *n_p,
                             uint32_t **off_p, uint32_t **size_p);

#endif
