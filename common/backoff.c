#include "common/backoff.h"

#include <time.h>
#include <unistd.h>

void rg_backoff_init(struct rg_backoff *b, int first_ms, int max_ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    b->next_ms = first_ms > 0 ? first_ms : 1;
    b->max_ms = max_ms > b->next_ms ? max_ms : b->next_ms;
    b->state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ (uintptr_t)b;
    b->state |= 1;
}

int rg_backoff_next(struct rg_backoff *b, int hint_ms)
{
    int d = b->next_ms > hint_ms ? b->next_ms : hint_ms;

    d = d < b->max_ms ? d : b->max_ms;
    b->state ^= b->state << 13; /* xorshift64 */
    b->state ^= b->state >> 7;
    b->state ^= b->state << 17;
    b->next_ms = d < b->max_ms / 2 ? 2 * d : b->max_ms;
    return d / 2 + (int)(b->state % (uint64_t)(d - d / 2 > 0 ? d - d / 2 : 1));
}
