/* Growable arrays: the one place that doubles an array's capacity when it is full. */
#ifndef RGPU_COMMON_ARRAY_GROW_H
#define RGPU_COMMON_ARRAY_GROW_H

#include <stdbool.h>
#include <stddef.h>

/* Make room for one more element in *arr (n in use, *cap allocated, elem bytes each): when full,
 * double *cap (to first when it is 0) and reallocate. False, with *arr and *cap unchanged, if
 * that cannot be done. Call as rg_array_grow((void **)&arr, &cap, n, sizeof(*arr), 16). */
bool rg_array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first);

#endif
