/* The post-reply hooks (call.h, "After the reply of a synchronizing op"): one list, ordered, of
 * what the layers above do once a synchronizing op's reply came, on any session. */
#include "client/session/session.h"

static struct {
    unsigned order;
    cli_synced_fn fn;
} hooks[CLI_SYNCED_HOOKS];
static int nhooks;

void cli_session_on_synced(unsigned order, cli_synced_fn fn)
{
    int i = nhooks;

    if (nhooks == CLI_SYNCED_HOOKS) { /* a fixed set of parts registers, at load time */
        rg_error("more than %d post-reply hooks: raise CLI_SYNCED_HOOKS", CLI_SYNCED_HOOKS);
        return;
    }
    for (; i > 0 && hooks[i - 1].order > order; i--)
        hooks[i] = hooks[i - 1];
    hooks[i].order = order;
    hooks[i].fn = fn;
    nhooks++;
}

CUresult cli_session_synced(struct cli_session *s, const struct cli_call *call, CUresult res,
                            bool lost)
{
    struct cli_synced sync = {.sess = s, .call = call, .lost = lost};

    if (call->op >= PROTO_OP_COUNT || !(proto_ops[call->op].flags & PROTO_OPF_SYNCHRONIZING))
        return res;
    for (int i = 0; i < nhooks; i++)
        res = hooks[i].fn(&sync, res);
    return res;
}
