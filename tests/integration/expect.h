/* Shared by the driver-API integration programs: checks that print a FAIL line with the place,
 * count the failure and go on (main returns failures != 0). Thread safe. */
#ifndef RGPU_TESTS_INTEGRATION_EXPECT_H
#define RGPU_TESTS_INTEGRATION_EXPECT_H

#include <stdio.h>

#include <cuda.h>

static int failures;

#define EXPECT(cond, ...)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                                \
        }                                                                                      \
    } while (0)
/* The driver call must succeed / must return want. */
#define OK(call) EXPECT_RESULT(call, CUDA_SUCCESS)
#define EXPECT_RESULT(call, want)                                                              \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        EXPECT(r_ == (want), "%s = %d, expected %d", #call, (int)r_, (int)(want));             \
    } while (0)

#endif
