/* Fork and exit: a forked child cannot use its parent's session (as in CUDA); at exit the
 * pending calls are flushed and the server told goodbye. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "client/session/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

/* A child forked while the flusher held the lock (over RDMA a flush holds it longer, while the
 * slot is posted) must not inherit it held: the child takes it only to learn that it cannot use
 * the session (CUDA_ERROR_NOT_INITIALIZED). */
void cli_session_atfork_child(void)
{
    for (int k = 0; k < cli_proc.nsessions; k++) {
        pthread_mutex_init(&cli_proc.sessions[k]->lock, NULL);
        cli_proc.sessions[k]->forked = true;
    }
}

/* At exit: flush what is pending and say goodbye. trylock: another thread may be blocked in a
 * synchronous call (holding the lock) while the process exits; never hang the exit for it. */
static void session_close(struct cli_session *s)
{
    int tries = 0;

    while (pthread_mutex_trylock(&s->lock) != 0)
        if (++tries > 100 || usleep(1000) != 0)
            return;
    /* A forked child exiting must not end its parent's session. */
    if (s->conn != NULL && !s->dead && getpid() == s->pid && cli_batch_flush(s) == CUDA_SUCCESS) {
        proto_send(s->conn, PROTO_BYE, NULL, NULL, 0);
        s->said_bye = true; /* pinned memory freed by later destructors needs no fence */
    }
    pthread_mutex_unlock(&s->lock);
}

__attribute__((destructor)) static void sessions_close(void)
{
    for (int k = 0; k < cli_proc.nsessions; k++)
        session_close(cli_proc.sessions[k]);
}
