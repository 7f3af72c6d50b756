/* Handles given to the application: pointers to client objects that start with struct
 * cli_handle. Ids are minted here, so creating an object never waits for the server. */
#include <stdlib.h>

#include "client/objects/objects.h"

static uint64_t next_counter = PROTO_ID_FIRST_COUNTER;

void cli_handle_init(struct cli_handle *h, enum proto_handle_type type)
{
    uint64_t counter = __atomic_fetch_add(&next_counter, 1, __ATOMIC_RELAXED);

    h->id = (counter << 4) | (uint64_t)type;
    h->type = type;
    h->magic = CLI_HANDLE_MAGIC;
}

void *cli_handle_check(const void *p, enum proto_handle_type type)
{
    const struct cli_handle *h = p;

    /* Small values are never ours: NULL, CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2)... */
    if ((uintptr_t)h < 4096 || h->magic != CLI_HANDLE_MAGIC || h->type != type)
        return NULL;
    return (void *)h;
}

void cli_handle_kill(struct cli_handle *h)
{
    h->magic = 0;
}

CUresult cli_handle_destroy(struct cli_handle *h, unsigned op, const struct cli_ctx *ctx)
{
    /* the destroy ops that come here (ARRAY_, EVENT_, STREAM_DESTROY) take the one `handle` */
    struct cli_call call = {CLI_ARGS_AS(op, EVENT_DESTROY, .handle = h->id)};
    CUresult res;

    if (ctx != NULL)
        cli_call_in(&call, ctx);
    res = cli_call_async(&call);
    cli_handle_kill(h);
    free(h);
    return res;
}
