/* The session's components (server/component.h): the lifetime rules over a table made here
 * (each teardown once, in phase then table order, also after a failed init; none for a
 * component whose init did not run or failed), and the session's own table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/component.h"
#include "server/session.h"

/* ---- the lifetime rules, on a table of recording components --------------------------- */

#define NTEST 6

static struct {
    char inits[NTEST + 1], teardowns[NTEST + 1]; /* the names, in the order called */
    size_t ninit, nteardown;
    char fail; /* the component whose init fails, 0 = none */
} rec;

struct rec_state {
    char name;
    uint64_t zero[4]; /* allocated zeroed */
};

static rg_status_t rec_init(struct srv_session *s, void *state)
{
    struct rec_state *st = state;

    assert_non_null(st);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(st->zero[i], 0);
    st->name = (char)('a' + (int)rec.ninit);
    rec.inits[rec.ninit++] = st->name;
    return st->name == rec.fail ? RG_ERR_NOMEM : RG_OK;
}

static void rec_teardown(struct srv_session *s, void *state)
{
    struct rec_state *st = state;

    rec.teardowns[rec.nteardown++] = st->name;
}

static const struct srv_component rec_comp = {"rec", sizeof(struct rec_state), rec_init,
                                              rec_teardown};
static const struct srv_component bare_comp = {"bare", 0, NULL, NULL};

/* Table order a..f; phases chosen so that teardown order differs from it. */
static const struct srv_component_row rows[NTEST] = {
    {&rec_comp, SRV_PHASE_OBJECTS}, /* a */
    {&rec_comp, SRV_PHASE_STOP},    /* b */
    {&rec_comp, SRV_PHASE_RECORDS}, /* c */
    {&rec_comp, SRV_PHASE_STOP},    /* d */
    {&rec_comp, SRV_PHASE_HOST},    /* e */
    {&rec_comp, SRV_PHASE_OBJECTS}, /* f */
};

static int reset(void **state)
{
    memset(&rec, 0, sizeof(rec));
    return 0;
}

static void test_teardown_order(void **state)
{
    struct srv_components c = {{0}, 0};

    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_OK);
    assert_string_equal(rec.inits, "abcdef"); /* inits: table order */
    assert_string_equal(rec.teardowns, "");
    srv_components_teardown(&c, rows, NTEST, NULL);
    assert_string_equal(rec.teardowns, "bdeafc"); /* phase, then table order */
    srv_components_teardown(&c, rows, NTEST, NULL); /* once only */
    assert_string_equal(rec.teardowns, "bdeafc");
    for (size_t i = 0; i < NTEST; i++) /* readable until freed */
        assert_int_equal(((struct rec_state *)c.state[i])->name, 'a' + (int)i);
    srv_components_free(&c, NTEST);
    for (size_t i = 0; i < NTEST; i++)
        assert_null(c.state[i]);
}

/* e's init fails: a..d are torn down at once (in phase order), e and f never are, and the
 * session's teardown afterwards does nothing. */
static void test_failed_init(void **state)
{
    struct srv_components c = {{0}, 0};

    rec.fail = 'e';
    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_ERR_NOMEM);
    assert_string_equal(rec.inits, "abcde");
    assert_string_equal(rec.teardowns, "bdac");
    assert_int_equal(c.live, 0);
    for (size_t i = 0; i < NTEST; i++)
        assert_null(c.state[i]); /* freed, the failed one's too */
    srv_components_teardown(&c, rows, NTEST, NULL);
    srv_components_free(&c, NTEST);
    assert_string_equal(rec.teardowns, "bdac");
}

/* The first init fails: nothing is torn down. */
static void test_first_init_fails(void **state)
{
    struct srv_components c = {{0}, 0};

    rec.fail = 'a';
    assert_int_equal(srv_components_init(&c, rows, NTEST, NULL), RG_ERR_NOMEM);
    assert_string_equal(rec.teardowns, "");
    srv_components_teardown(&c, rows, NTEST, NULL);
    assert_string_equal(rec.teardowns, "");
}

/* A component without state, init or teardown is live with a NULL state; too many rows are
 * refused before anything is set up. */
static void test_bare_and_bounds(void **state)
{
    struct srv_component_row two[2] = {{&bare_comp, SRV_PHASE_STOP}, {&rec_comp, SRV_PHASE_STOP}};
    struct srv_component_row many[SRV_COMPONENTS_MAX + 1];
    struct srv_components c = {{0}, 0};

    assert_int_equal(srv_components_init(&c, two, 2, NULL), RG_OK);
    assert_null(c.state[0]);
    assert_int_equal(c.live, 3);
    srv_components_teardown(&c, two, 2, NULL);
    srv_components_free(&c, 2);
    assert_string_equal(rec.teardowns, "a");
    for (size_t i = 0; i < SRV_COMPONENTS_MAX + 1; i++)
        many[i] = two[1];
    assert_int_equal(srv_components_init(&c, many, SRV_COMPONENTS_MAX + 1, NULL), RG_ERR_INVALID);
    assert_int_equal(rec.ninit, 1);
}

/* ---- the session's table ---------------------------------------------------------------- */

/* Every row names a component once, in a known phase. */
static void test_session_table(void **state)
{
    for (size_t i = 0; i < SRV_COMP_COUNT; i++) {
        const struct srv_component_row *r = &srv_component_table[i];
        assert_non_null(r->comp);
        assert_non_null(r->comp->name);
        assert_true(r->phase < SRV_PHASE_COUNT);
        for (size_t j = 0; j < i; j++) {
            assert_ptr_not_equal(srv_component_table[j].comp, r->comp);
            assert_string_not_equal(srv_component_table[j].comp->name, r->comp->name);
        }
    }
}

/* A session set up and torn down without a handshake (a port probe): every component's
 * teardown copes with a session that never opened its driver, and nothing leaks (ASan). */
static void test_session_without_handshake(void **state)
{
    struct srv_session s;

    memset(&s, 0, sizeof(s));
    assert_int_equal(srv_session_init(&s), RG_OK);
    for (size_t i = 0; i < SRV_COMP_COUNT; i++)
        assert_true(s.comps.live & (1ull << i));
    srv_session_teardown(&s);
    assert_int_equal(s.comps.live, 0);
    srv_session_teardown(&s); /* a second teardown finds nothing to do */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_teardown_order, reset),
        cmocka_unit_test_setup(test_failed_init, reset),
        cmocka_unit_test_setup(test_first_init_fails, reset),
        cmocka_unit_test_setup(test_bare_and_bounds, reset),
        cmocka_unit_test(test_session_table),
        cmocka_unit_test(test_session_without_handshake),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
