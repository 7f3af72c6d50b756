/* A session's components: each feature that keeps per-session state (memory, modules,
 * streams, graphs, VMM, IPC, peer copies...) owns a private struct in its own file and
 * registers its lifetime in one table, server/components.def, as libevent backends and kernel
 * modules register theirs. The session (server/session.h) keeps only what every feature
 * shares: the connection, the driver, the handle table and the quota.
 *
 * Lifetime rules (tested in tests/worker/test_components.c):
 * - srv_components_init allocates each component's state zeroed (state_size bytes; none when
 *   0) and calls its init, in table order, before the session's handshake: an init must not
 *   use the driver or the connection. A component with no init is ready once its zeroed state
 *   is allocated.
 * - An init that fails undoes its own work. The components initialised before it are then
 *   torn down at once (in teardown order); those after it, and it, never are.
 * - srv_components_teardown calls the teardown of every initialised component exactly once,
 *   in increasing phase and, within a phase, in table order. Calling it again (or after a
 *   failed init) does nothing. Every state stays readable until srv_components_free, so a
 *   teardown may call the public functions of any component, but what an earlier one held is
 *   gone by then.
 * - A component reaches another's state only through that component's public functions.
 *
 * Adding a component: a file with its state struct, init/teardown and descriptor
 * (`const struct srv_component srv_X_component`), one row in components.def, a test. */
#ifndef RGPU_SERVER_COMPONENT_H
#define RGPU_SERVER_COMPONENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

struct srv_session;

/* Teardown phases, in the order they run (components.def says what each is for). */
enum srv_phase {
    SRV_PHASE_STOP,       /* threads and listeners that act on the session from outside */
    SRV_PHASE_UNREGISTER, /* registrations with the connection */
    SRV_PHASE_HOST,       /* pinned host memory, communicators, imported memory, mirrors */
    SRV_PHASE_MEMORY,     /* the allocation table's device memory */
    SRV_PHASE_OBJECTS,    /* the client's objects, contexts last */
    SRV_PHASE_RECORDS,    /* bookkeeping about objects gone now */
    SRV_PHASE_COUNT
};

struct srv_component {
    const char *name;
    size_t state_size; /* bytes of private state, allocated zeroed; 0 = none (state NULL) */
    /* Set the state up (may be NULL). RG_OK, or an error after undoing what it did. */
    rg_status_t (*init)(struct srv_session *s, void *state);
    /* Give back everything the component holds for the session (may be NULL). Runs once,
     * after the session's last call, whether or not the handshake succeeded (so on a session
     * that may never have opened its driver); must not fail. */
    void (*teardown)(struct srv_session *s, void *state);
};

/* A row of the table: the component and its teardown phase (the order is a relation between
 * components, so it lives in the table, not in the component). */
struct srv_component_row {
    const struct srv_component *comp;
    enum srv_phase phase;
};

enum srv_component_id {
#define SRV_COMPONENT(id, desc, phase) SRV_COMP_##id,
#include "server/components.def"
#undef SRV_COMPONENT
    SRV_COMP_COUNT
};

#define SRV_COMPONENTS_MAX 64

/* The components' states and which are live (initialised, not torn down yet). */
struct srv_components {
    void *state[SRV_COMPONENTS_MAX];
    uint64_t live;
};

#define SRV_COMPONENT(id, desc, phase) extern const struct srv_component desc;
#include "server/components.def"
#undef SRV_COMPONENT

/* The session's table, indexed by enum srv_component_id. */
extern const struct srv_component_row srv_component_table[SRV_COMP_COUNT];

/* Run the lifetimes of n rows (at most SRV_COMPONENTS_MAX) over c, for the session s (which
 * the callbacks receive). The session uses srv_component_table through srv_session_init and
 * srv_session_teardown; tests pass their own rows. */
rg_status_t srv_components_init(struct srv_components *c, const struct srv_component_row *rows,
                                size_t n, struct srv_session *s);
void srv_components_teardown(struct srv_components *c, const struct srv_component_row *rows,
                             size_t n, struct srv_session *s);
/* Free the states (after srv_components_teardown). */
void srv_components_free(struct srv_components *c, size_t n);

#endif
