/* The session's keepalive (server/keepalive.h), a component of the session. */
#include "server/keepalive.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "proto/frame.h"
#include "server/session.h"

/* The keepalive component's state (server/components.def): its lock and condition live from
 * the component's init to its teardown; the thread runs from srv_keepalive_start to the
 * teardown. */
struct srv_keepalive {
    bool running; /* the thread is started (written by the worker's thread only) */
    struct transport_conn *conn;
    pthread_t thread;
    pthread_mutex_t lock; /* held by the thread while it writes, and to change the fields */
    pthread_cond_t cond;  /* the thread's sleep, cut short by stop */
    uint64_t tick_ms;
    bool stop;
    bool in_call;      /* between call_begin and call_end or reply_begin */
    uint64_t call_seq; /* calls begun */
    uint64_t seen_seq; /* the call the thread saw running at its last tick */
};

static void deadline_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Every tick: a call that was running at the previous tick too has run at least a tick, so
 * the client hears a Keepalive; a call begun since is left alone (most end within a tick). */
static void *keepalive_thread(void *arg)
{
    struct srv_keepalive *k = arg;
    struct timespec ts;

    pthread_mutex_lock(&k->lock);
    while (!k->stop) {
        deadline_in(&ts, k->tick_ms);
        while (!k->stop && pthread_cond_timedwait(&k->cond, &k->lock, &ts) != ETIMEDOUT)
            ;
        if (k->stop)
            break;
        if (k->in_call && k->call_seq == k->seen_seq &&
            proto_send(k->conn, PROTO_KEEPALIVE, NULL, NULL, 0) != RG_OK)
            break; /* the connection is gone: the worker's own thread will see it */
        k->seen_seq = k->in_call ? k->call_seq : 0;
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

/* The session's keepalive, NULL until started (and after the teardown). */
static struct srv_keepalive *keepalive_of(struct srv_session *s)
{
    struct srv_keepalive *k = srv_component_state(s, SRV_COMP_KEEPALIVE);

    return k != NULL && k->running ? k : NULL;
}

rg_status_t srv_keepalive_start(struct srv_session *s, uint32_t timeout_ms)
{
    struct srv_keepalive *k = srv_component_state(s, SRV_COMP_KEEPALIVE);

    if (timeout_ms == 0 || s->proto_minor < PROTO_MINOR_KEEPALIVE || k->running)
        return RG_OK;
    k->conn = s->conn;
    k->tick_ms = timeout_ms / 4 > SRV_KEEPALIVE_MIN_MS ? timeout_ms / 4 : SRV_KEEPALIVE_MIN_MS;
    if (pthread_create(&k->thread, NULL, keepalive_thread, k) != 0) {
        rg_error("session %llu: cannot start the keepalive thread", (unsigned long long)s->id);
        return RG_ERR_NOMEM;
    }
    k->running = true;
    rg_debug("session %llu: keepalive every %llu ms while a call runs", (unsigned long long)s->id,
             (unsigned long long)k->tick_ms);
    return RG_OK;
}

static rg_status_t keepalive_init(struct srv_session *s, void *state)
{
    struct srv_keepalive *k = state;
    pthread_condattr_t ca;
    int rc;

    if (pthread_mutex_init(&k->lock, NULL) != 0)
        return RG_ERR_NOMEM;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&k->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&k->lock);
        return RG_ERR_NOMEM;
    }
    return RG_OK;
}

/* The thread stopped before anything else of the session goes (and before the worker closes
 * the connection it writes on). */
static void keepalive_teardown(struct srv_session *s, void *state)
{
    struct srv_keepalive *k = state;

    if (k->running) {
        pthread_mutex_lock(&k->lock);
        k->stop = true;
        pthread_cond_signal(&k->cond);
        pthread_mutex_unlock(&k->lock);
        pthread_join(k->thread, NULL);
        k->running = false;
    }
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->lock);
}

const struct srv_component srv_keepalive_component = {.name = "keepalive",
                                                      .state_size = sizeof(struct srv_keepalive),
                                                      .init = keepalive_init,
                                                      .teardown = keepalive_teardown};

void srv_keepalive_call_begin(struct srv_session *s)
{
    struct srv_keepalive *k = keepalive_of(s);

    if (k == NULL)
        return;
    pthread_mutex_lock(&k->lock);
    k->in_call = true;
    k->call_seq++;
    pthread_mutex_unlock(&k->lock);
}

void srv_keepalive_call_end(struct srv_session *s)
{
    struct srv_keepalive *k = keepalive_of(s);

    if (k == NULL)
        return;
    pthread_mutex_lock(&k->lock); /* waits for a keepalive being written */
    k->in_call = false;
    pthread_mutex_unlock(&k->lock);
}

void srv_keepalive_reply_begin(struct srv_session *s)
{
    srv_keepalive_call_end(s);
}
