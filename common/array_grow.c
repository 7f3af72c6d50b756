#include "common/array_grow.h"

#include <stdint.h>
#include <stdlib.h>

bool rg_array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first)
{
    size_t want = *cap != 0 ? *cap * 2 : first;
    void *p;

    if (n < *cap)
        return true;
    if (elem == 0 || want < *cap || want > SIZE_MAX / elem ||
        (p = realloc(*arr, want * elem)) == NULL)
        return false;
    *arr = p;
    *cap = want;
    return true;
}
