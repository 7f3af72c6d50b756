/* XLA's collective-permute over the devices of one process (tests/nccl/ppermute.c). */
#ifndef RGPU_TESTS_NCCL_PPERMUTE_H
#define RGPU_TESTS_NCCL_PPERMUTE_H

#include <stdbool.h>

#define PPERMUTE_MAX_DEVICES 8

/* Communicators over devices 0..ndev-1 made in one group (threads: each by a blocking init on a
 * thread of its own), then two exchanges from a thread per device (send to the next, receive
 * from the previous); the number of failed checks. */
int ppermute_run(int ndev, bool threads);

#endif
