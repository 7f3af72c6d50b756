/* Exponential backoff with jitter, for a client that was refused for load and tries again
 * (client/session/session.c, client/session/pool.c): each wait is drawn in [d/2, d) where d starts
 * at first_ms (or the server's hint, if larger) and doubles up to max_ms, so that clients refused
 * together do not all come back together. */
#ifndef RGPU_COMMON_BACKOFF_H
#define RGPU_COMMON_BACKOFF_H

#include <stdint.h>

struct rg_backoff {
    int next_ms, max_ms;
    uint64_t state; /* the jitter's generator (its own: the program's rand() is left alone) */
};

void rg_backoff_init(struct rg_backoff *b, int first_ms, int max_ms);
/* The next wait in ms: at least half of max(the current step, hint_ms), capped at max_ms. */
int rg_backoff_next(struct rg_backoff *b, int hint_ms);

#endif
