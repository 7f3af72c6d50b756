/* The fuzz targets' entry points (libFuzzer's), shared by the libFuzzer builds and the replay
 * driver (replay.c), which feeds files to the same functions in any build. */
#ifndef RGPU_TESTS_FUZZ_H
#define RGPU_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A connected pair of TCP sockets on the loopback: what the test writes on fds[0] (from a thread,
 * then shut down for writing) is what the code under test reads on fds[1]; what it writes back is
 * read and dropped. fuzz_feed_start starts that thread; fuzz_feed_end joins it. */
struct fuzz_feed {
    int fds[2];
    const uint8_t *head, *data;
    size_t head_len, len;
    void *thread;
};
int fuzz_feed_start(struct fuzz_feed *f, const void *head, size_t head_len, const uint8_t *data,
                    size_t len);
void fuzz_feed_end(struct fuzz_feed *f);

#endif
