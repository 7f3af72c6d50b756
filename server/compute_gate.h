/* Private to server/tenancy.c and server/compute_gate.c: the tenancy component's state (its
 * slot in the shared table, once admitted) and its gate. */
#ifndef RGPU_SERVER_COMPUTE_GATE_H
#define RGPU_SERVER_COMPUTE_GATE_H

#include "server/tenancy.h"

struct srv_gate;

struct srv_tenancy {
    struct srv_table *table; /* NULL until the session is admitted (and on a worker without one) */
    int slot;
    struct srv_gate *gate; /* NULL when the meter thread could not start (launches pass) */
};

/* The session's gate, NULL when it has none (not admitted, or no meter thread). */
struct srv_gate *srv_tenancy_gate(struct srv_session *s);

/* The gate of slot `slot` and its meter thread; NULL (logged) on failure. */
struct srv_gate *srv_gate_create(struct srv_session *s, struct srv_table *table, int slot);
/* Stop the meter, waiting at most a second for launches in flight (a kernel that never ends
 * must not keep the worker from exiting), and destroy the events it can. */
void srv_gate_destroy(struct srv_session *s, struct srv_gate *g);

#endif
