/* The session's component table and the one place that runs the components' lifetimes
 * (server/component.h). */
#include "server/component.h"

#include <stdlib.h>

#include "common/log.h"
#include "server/session.h"

_Static_assert(SRV_COMP_COUNT <= SRV_COMPONENTS_MAX, "one bit of srv_components.live each");

const struct srv_component_row srv_component_table[SRV_COMP_COUNT] = {
#define SRV_COMPONENT(id, desc, phase) [SRV_COMP_##id] = {&desc, phase},
#include "server/components.def"
#undef SRV_COMPONENT
};

static void teardown_phases(struct srv_components *c, const struct srv_component_row *rows,
                            size_t n, struct srv_session *s)
{
    for (unsigned p = 0; p < SRV_PHASE_COUNT; p++) {
        for (size_t i = 0; i < n; i++) {
            if (rows[i].phase != p || !(c->live & (1ull << i)))
                continue;
            c->live &= ~(1ull << i); /* before the call: never twice, even if it re-enters */
            if (rows[i].comp->teardown != NULL)
                rows[i].comp->teardown(s, c->state[i]);
        }
    }
}

static void states_free(struct srv_components *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c->state[i]);
        c->state[i] = NULL;
    }
}

rg_status_t srv_components_init(struct srv_components *c, const struct srv_component_row *rows,
                                size_t n, struct srv_session *s)
{
    rg_status_t st = RG_OK;
    size_t i;

    if (n > SRV_COMPONENTS_MAX)
        return RG_ERR_INVALID;
    for (i = 0; i < n && st == RG_OK; i++) {
        const struct srv_component *comp = rows[i].comp;
        if (comp->state_size > 0 && (c->state[i] = calloc(1, comp->state_size)) == NULL)
            st = RG_ERR_NOMEM;
        else if (comp->init != NULL)
            st = comp->init(s, c->state[i]);
        if (st == RG_OK)
            c->live |= 1ull << i;
        else
            rg_error("session component %s: cannot set up: %s", comp->name, rg_status_str(st));
    }
    if (st != RG_OK) {
        teardown_phases(c, rows, n, s);
        states_free(c, n);
    }
    return st;
}

void srv_components_teardown(struct srv_components *c, const struct srv_component_row *rows,
                             size_t n, struct srv_session *s)
{
    teardown_phases(c, rows, n, s);
}

void srv_components_free(struct srv_components *c, size_t n)
{
    states_free(c, n);
}

/* ---- parts whose state is still in struct srv_session (to move into their own files) ---- */
