/* XLA's collective-permute over the devices of one process (tests/nccl/ppermute.c). */
#ifndef RGPU_TESTS_NCCL_PPERMUTE_H
#define RGPU_TESTS_NCCL_PPERMUTE_H

#define PPERMUTE_MAX_DEVICES 8

/* How the clique's communicators are made: in one group from one thread (XLA until 2024), each
 * by a blocking init on a thread of its own (XLA now), or split so from communicators made so. */
enum ppermute_make { PPERMUTE_GROUP, PPERMUTE_THREADS, PPERMUTE_SPLIT };

/* Communicators over devices 0..ndev-1 made as `how` says, then two exchanges from a thread per
 * device (send to the next, receive from the previous); the number of failed checks. */
int ppermute_run(int ndev, enum ppermute_make how);

#endif
