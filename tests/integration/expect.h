/* Shared by the driver-API integration programs: checks that print a FAIL line with the place,
 * count the failure and go on (main returns failures != 0). Thread safe. */
#ifndef RGPU_TESTS_INTEGRATION_EXPECT_H
#define RGPU_TESTS_INTEGRATION_EXPECT_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                                    \
        }                                                                                          \
    } while (0)
/* The driver call must succeed / must return want. */
#define OK(call) EXPECT_RESULT(call, CUDA_SUCCESS)
#define EXPECT_RESULT(call, want)                                                                  \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        EXPECT(r_ == (want), "%s = %d, expected %d", #call, (int)r_, (int)(want));                 \
    } while (0)
/* The driver call must succeed, or the program ends (what follows needs its result). */
#define NEED(call)                                                                                 \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            printf("FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_);                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A byte pattern that differs by seed and from page to page: write it, and check for it. */
static inline void pattern_fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131 + (i >> 13) + seed);
}

static inline int pattern_same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 131 + (i >> 13) + seed))
            return 0;
    return 1;
}

#endif
