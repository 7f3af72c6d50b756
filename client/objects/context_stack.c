/* The calling thread's context stack (the current context is its top) and the hooks run when a
 * context goes. Below the entry points: the call API fills a call's context from here, and the
 * parts that keep state per context register their teardown here. */
#include "client/objects/objects.h"

#define CTX_STACK_MAX 64

static __thread struct cli_ctx *ctx_stack[CTX_STACK_MAX];
static __thread int ctx_depth; /* ctx_stack[ctx_depth - 1] is current */

struct cli_ctx *cli_ctx_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

void cli_ctx_set_current(struct cli_ctx *ctx)
{
    if (ctx_depth == 0) {
        if (ctx == NULL)
            return;
        ctx_depth = 1;
    }
    ctx_stack[ctx_depth - 1] = ctx;
}

bool cli_ctx_push(struct cli_ctx *ctx)
{
    if (ctx_depth == CTX_STACK_MAX)
        return false;
    ctx_stack[ctx_depth++] = ctx;
    return true;
}

bool cli_ctx_pop(struct cli_ctx **ctx_p)
{
    if (ctx_depth == 0)
        return false;
    ctx_depth--;
    if (ctx_p != NULL)
        *ctx_p = ctx_stack[ctx_depth];
    return true;
}

void cli_ctx_forget(const struct cli_ctx *ctx)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == ctx)
            ctx_stack[i] = NULL;
    while (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == NULL)
        ctx_depth--;
}

uint64_t cli_ctx_current_id(void)
{
    struct cli_ctx *ctx = cli_ctx_current();

    return ctx != NULL ? ctx->h.id : 0;
}

CUresult cli_need_ctx(void)
{
    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    return cli_ctx_current() != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- teardown hooks ---------------------------------------------------------------------- */

static void (*teardown_hooks[CLI_CTX_HOOKS])(struct cli_ctx *ctx);
static int nteardown_hooks;

void cli_ctx_on_teardown(void (*hook)(struct cli_ctx *ctx))
{
    if (nteardown_hooks < CLI_CTX_HOOKS) /* a fixed set of parts registers, at load time */
        teardown_hooks[nteardown_hooks++] = hook;
}

void cli_ctx_teardown(struct cli_ctx *ctx)
{
    for (int i = 0; i < nteardown_hooks; i++)
        teardown_hooks[i](ctx);
}
