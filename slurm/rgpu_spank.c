/* rgpu's SPANK plugin: remote GPUs for Slurm jobs (docs/slurm.md).
 *
 *   srun|sbatch|salloc --rgpu=N [--rgpu-mem=SIZE] [--rgpu-share=P] ...
 *
 * At submission (srun: local context; sbatch, salloc: allocator context) the options are
 * checked and the request is written to the job control environment (SPANK_RGPU_GPUS,
 * SPANK_RGPU_SHARE, SPANK_RGPU_MEM), which slurmctld hands to its job_submit plugin:
 * slurm/job_submit.lua turns it into the cluster license rgpu:N*P (hundredths of a GPU), so
 * slurmctld counts the pool and a job beyond what is free pends (reason Licenses). A request
 * larger than the license's total can never start: it is refused here, before submission, with
 * the pool's size in the message (slurmctld refuses it too, in its own words).
 *
 * At the start of each step (remote context, slurmstepd, in user_init: as the job's user) the
 * job is placed on the pool's servers by rgpu's own placement (client/session/pool.c over the
 * user's client configuration, as `rgpu run` would read it), and the step's tasks get the servers,
 * the memory and the tenant in their environment, with rgpu's libraries first in LD_LIBRARY_PATH.
 * Nothing is held for the job outside its tasks: each task's sessions are its own and end with
 * it (job end, scancel, a node that dies: the server sees the connection go), and slurmctld
 * frees the license when the job ends.
 *
 * plugstack.conf arguments: libdir=DIR (rgpu's client libraries, default /usr/lib/rgpu),
 * config=FILE (a client configuration for every job instead of the user's own),
 * license=NAME (default rgpu; the name job_submit.lua counts). */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "client/session/config.h"
#include "client/session/pool.h"
#include "common/config.h"
#include "common/log.h"

SPANK_PLUGIN(rgpu, 1);

#define SHARE_FULL   100 /* hundredths of a GPU: one whole GPU */
#define STANDBY_MAX  4   /* servers after the chosen ones that stand by for a task's start */
#define ENV_IMPORTED 16

/* Why the step could not be placed (user_init), told by each task on its own stderr, the
 * job's output, before it ends (task_init): failing user_init itself would make slurmd drain
 * the node for what is a fact of the pool, not of the node. */
static char step_failed[4096];

/* What this job asked for, from its options (one job per srun, sbatch or slurmstepd process). */
static struct rgpu_request {
    int gpus;     /* 0: no --rgpu */
    int share;    /* hundredths of each GPU (1..100) */
    uint64_t mem; /* bytes per GPU; 0: the tenant's quota */
    bool mem_set, share_set;
} req = {.share = SHARE_FULL};

static struct rgpu_args {
    char libdir[PATH_MAX];
    char config[PATH_MAX];
    char license[64];
} args = {.libdir = "/usr/lib/rgpu", .license = "rgpu"};

/* ---- options -------------------------------------------------------------------------------- */

enum { OPT_GPUS = 1, OPT_MEM, OPT_SHARE };

static int opt_cb(int val, const char *optarg, int remote)
{
    char *end = NULL;
    long n;

    (void)remote;
    switch (val) {
    case OPT_GPUS:
        n = optarg ? strtol(optarg, &end, 10) : 0;
        if (optarg == NULL || end == optarg || *end != '\0' || n < 1 || n > CLI_GPUS_MAX) {
            slurm_error("rgpu: --rgpu=%s: the number of remote GPUs, 1 to %d", optarg ? optarg : "",
                        CLI_GPUS_MAX);
            return -1;
        }
        req.gpus = (int)n;
        return 0;
    case OPT_MEM:
        if (optarg == NULL || !rg_parse_size(optarg, &req.mem) || req.mem == 0) {
            slurm_error("rgpu: --rgpu-mem=%s: a size per GPU such as 8GiB", optarg ? optarg : "");
            return -1;
        }
        req.mem_set = true;
        return 0;
    case OPT_SHARE:
        n = optarg ? strtol(optarg, &end, 10) : 0;
        if (optarg == NULL || end == optarg || (*end != '\0' && strcmp(end, "%") != 0) || n < 1 ||
            n > SHARE_FULL) {
            slurm_error("rgpu: --rgpu-share=%s: the job's part of each GPU in percent, 1 to 100",
                        optarg ? optarg : "");
            return -1;
        }
        req.share = (int)n;
        req.share_set = true;
        return 0;
    }
    return -1;
}

/* Registered by slurm_spank_init in every context: Slurm reads a static spank_options table
 * in srun and slurmstepd but not in sbatch and salloc (allocator context). */
static struct spank_option rgpu_options[] = {
    {"rgpu", "N", "Remote GPUs from the rgpu pool for this job (1 to 64).", 1, OPT_GPUS, opt_cb},
    {"rgpu-mem", "SIZE", "GPU memory the job reserves on each remote GPU (e.g. 8GiB).", 1, OPT_MEM,
     opt_cb},
    {"rgpu-share", "P", "The job's part of each remote GPU, percent (1-100, default 100).", 1,
     OPT_SHARE, opt_cb},
    SPANK_OPTIONS_TABLE_END};

/* ---- plugstack.conf arguments --------------------------------------------------------------- */

static int parse_args(int ac, char **av)
{
    static const struct {
        const char *key;
        char *dst;
        size_t len;
    } keys[] = {{"libdir=", args.libdir, sizeof(args.libdir)},
                {"config=", args.config, sizeof(args.config)},
                {"license=", args.license, sizeof(args.license)}};

    for (int i = 0; i < ac; i++) {
        size_t k;
        for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            size_t kl = strlen(keys[k].key);
            if (strncmp(av[i], keys[k].key, kl) == 0 && av[i][kl] != '\0' &&
                strlen(av[i] + kl) < keys[k].len) {
                snprintf(keys[k].dst, keys[k].len, "%s", av[i] + kl);
                break;
            }
        }
        if (k == sizeof(keys) / sizeof(keys[0])) {
            slurm_error("rgpu: plugstack.conf: unknown or empty argument '%s' (accepted: "
                        "libdir=DIR, config=FILE, license=NAME)",
                        av[i]);
            return -1;
        }
    }
    return 0;
}

/* rgpu's log lines go to Slurm's log (slurmd's, or the user's terminal for srun/sbatch). */
static void log_to_slurm(enum rg_log_level level, const char *line)
{
    if (level == RG_LOG_ERROR)
        slurm_error("rgpu: %s", line);
    else if (level == RG_LOG_WARN || level == RG_LOG_INFO)
        slurm_info("rgpu: %s", line);
    else
        slurm_debug("rgpu: %s", line);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();

    rg_log_set_callback(log_to_slurm);
    if (parse_args(ac, av) != 0)
        return -1;
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
        return 0; /* slurmd, prolog and epilog: no options there */
    for (struct spank_option *o = rgpu_options; o->name != NULL; o++)
        if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
            slurm_error("rgpu: cannot register the option --%s", o->name);
            return -1;
        }
    return 0;
}

/* ---- submission: srun (local), sbatch and salloc (allocator) ------------------------------ */

/* The total of the license job_submit.lua counts, from slurmctld: 1 and *total_p when found,
 * 0 when Slurm has no such license, -1 when slurmctld could not be asked. libslurm's symbols
 * are those of the srun, sbatch or salloc that loaded the plugin. */
static int license_total(const char *name, uint32_t *total_p)
{
    int (*load)(time_t, license_info_msg_t **, uint16_t) =
        (int (*)(time_t, license_info_msg_t **, uint16_t))dlsym(RTLD_DEFAULT,
                                                                "slurm_load_licenses");
    void (*release)(license_info_msg_t *) =
        (void (*)(license_info_msg_t *))dlsym(RTLD_DEFAULT, "slurm_free_license_info_msg");
    license_info_msg_t *msg = NULL;
    int found = 0;

    if (load == NULL || release == NULL || load(0, &msg, 0) != 0 || msg == NULL)
        return -1;
    for (uint32_t i = 0; i < msg->num_lic; i++)
        if (msg->lic_array[i].name && strcmp(msg->lic_array[i].name, args.license) == 0) {
            *total_p = msg->lic_array[i].total;
            found = 1;
        }
    release(msg);
    return found;
}

static int check_request(void)
{
    uint32_t total = 0;
    int known;

    if (req.gpus == 0) {
        if (req.mem_set || req.share_set) {
            slurm_error("rgpu: --rgpu-mem and --rgpu-share need --rgpu=N (how many remote GPUs)");
            return -1;
        }
        return 0;
    }
    if (req.share < SHARE_FULL && !req.mem_set) {
        slurm_error("rgpu: --rgpu-share=%d needs --rgpu-mem=SIZE: the memory this job holds on "
                    "each GPU it shares with others",
                    req.share);
        return -1;
    }
    known = license_total(args.license, &total);
    if (known == 0) {
        slurm_error("rgpu: Slurm counts no license '%s': the cluster's slurm.conf needs "
                    "Licenses=%s:<100 x the pool's GPUs> and JobSubmitPlugins=lua with rgpu's "
                    "job_submit.lua (rgpu-slurm-licenses prints the line; docs/slurm.md)",
                    args.license, args.license);
        return -1;
    }
    if (known > 0 && (uint64_t)req.gpus * (uint64_t)req.share > total) {
        slurm_error("rgpu: --rgpu=%d%s asks for %s%d GPU(s) but the rgpu pool has %u.%02u "
                    "(license %s:%u): this job could never start",
                    req.gpus, req.share < SHARE_FULL ? " --rgpu-share" : "",
                    req.share < SHARE_FULL ? "a part of " : "", req.gpus, total / SHARE_FULL,
                    total % SHARE_FULL, args.license, total);
        return -1;
    }
    return 0;
}

static int submit_request(spank_t sp)
{
    char v[32];

    snprintf(v, sizeof(v), "%d", req.gpus);
    if (spank_job_control_setenv(sp, "RGPU_GPUS", v, 1) != ESPANK_SUCCESS)
        return -1;
    snprintf(v, sizeof(v), "%d", req.share);
    if (spank_job_control_setenv(sp, "RGPU_SHARE", v, 1) != ESPANK_SUCCESS)
        return -1;
    snprintf(v, sizeof(v), "%" PRIu64, req.mem);
    return spank_job_control_setenv(sp, "RGPU_MEM", v, 1) == ESPANK_SUCCESS ? 0 : -1;
}

/* ---- start: slurmstepd (remote), as the job's user ----------------------------------------- */

/* The job's licenses from slurmctld: does it hold the hundredths its tasks will use? 1 yes,
 * 0 no (why says so), -1 slurmctld could not be asked (then the job is not held up). */
static int job_holds_license(uint32_t job_id, uint64_t want, char *why, size_t why_len)
{
    int (*load)(job_info_msg_t **, uint32_t, uint16_t) =
        (int (*)(job_info_msg_t **, uint32_t, uint16_t))dlsym(RTLD_DEFAULT, "slurm_load_job");
    void (*release)(job_info_msg_t *) =
        (void (*)(job_info_msg_t *))dlsym(RTLD_DEFAULT, "slurm_free_job_info_msg");
    job_info_msg_t *msg = NULL;
    uint64_t held = 0;
    int res = 0;

    if (load == NULL || release == NULL || load(&msg, job_id, SHOW_ALL) != 0 || msg == NULL ||
        msg->record_count < 1) {
        if (msg != NULL)
            release(msg);
        return -1;
    }
    for (const char *p = msg->job_array[0].licenses; p && *p;) { /* "a:1,rgpu:100" */
        size_t nl = strlen(args.license);
        if (strncmp(p, args.license, nl) == 0 && (p[nl] == ':' || p[nl] == ',' || !p[nl]))
            held += p[nl] == ':' ? strtoull(p + nl + 1, NULL, 10) : 1;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (held >= want)
        res = 1;
    else
        snprintf(why, why_len,
                 "job %u holds %" PRIu64 " of license %s, its --rgpu asks for %" PRIu64
                 ": slurmctld did not count this request (JobSubmitPlugins=lua with rgpu's "
                 "job_submit.lua missing?)",
                 job_id, held, args.license, want);
    release(msg);
    return res;
}

/* The job's own environment, as the client configuration reads it, into this process (which is
 * the step's slurmstepd: nothing else reads these), so that cli_conf_load finds what the job's
 * tasks will find. Restored by env_restore. */
static const char *const imported_vars[] = {"HOME",
                                            "RGPU_CONFIG",
                                            "RGPU_SERVER",
                                            "RGPU_POOL",
                                            "RGPU_TENANT",
                                            "RGPU_TOKEN",
                                            "RGPU_TOKEN_FILE",
                                            "RGPU_MEM_QUOTA",
                                            "RGPU_POLICY",
                                            "RGPU_GPUS",
                                            "RGPU_CONNECT_TIMEOUT_MS",
                                            "RGPU_PROBE_TIMEOUT_MS",
                                            "RGPU_TRANSPORT",
                                            "RGPU_LANES"};

struct env_saved {
    char *old[ENV_IMPORTED];
};

static void env_import(spank_t sp, struct env_saved *saved)
{
    char buf[4096];

    for (size_t i = 0; i < sizeof(imported_vars) / sizeof(imported_vars[0]); i++) {
        const char *cur = getenv(imported_vars[i]);
        saved->old[i] = cur ? strdup(cur) : NULL;
        if (spank_getenv(sp, imported_vars[i], buf, sizeof(buf)) == ESPANK_SUCCESS)
            setenv(imported_vars[i], buf, 1);
        else
            unsetenv(imported_vars[i]);
    }
    if (args.config[0] != '\0')
        setenv("RGPU_CONFIG", args.config, 1);
}

static void env_restore(struct env_saved *saved)
{
    for (size_t i = 0; i < sizeof(imported_vars) / sizeof(imported_vars[0]); i++) {
        if (saved->old[i] != NULL)
            setenv(imported_vars[i], saved->old[i], 1);
        else
            unsetenv(imported_vars[i]);
        free(saved->old[i]);
    }
}

/* dir first in the job's variable name (LD_LIBRARY_PATH, LD_PRELOAD), as rgpu run does. */
static int job_prepend(spank_t sp, const char *name, const char *dir, char sep)
{
    char old[8192] = "", val[8192 + PATH_MAX + 2];

    if (spank_getenv(sp, name, old, sizeof(old)) != ESPANK_SUCCESS)
        old[0] = '\0';
    snprintf(val, sizeof(val), "%s%s%s", dir, old[0] ? (sep == ':' ? ":" : " ") : "", old);
    return spank_setenv(sp, name, val, 1) == ESPANK_SUCCESS ? 0 : -1;
}

static void fail_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_step(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(step_failed, sizeof(step_failed), fmt, ap);
    va_end(ap);
    slurm_error("%s", step_failed);
}

static int job_setenv(spank_t sp, const char *name, const char *value)
{
    if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS) {
        slurm_error("rgpu: cannot set %s in the job's environment", name);
        return -1;
    }
    return 0;
}

/* The step's environment for rgpu run semantics: the servers placement chose (first), those
 * standing by, tried in that order (policy first) for want GPUs; memory; tenant; libraries. */
static int job_environment(spank_t sp, const struct cli_conf *conf, const char *pool,
                           const char *chosen, uint32_t job_id)
{
    char v[64], nccl[PATH_MAX + 16], off[8] = "";
    int rc = 0;

    spank_unsetenv(sp, "RGPU_SERVER"); /* it would win over the pool */
    rc |= job_setenv(sp, "RGPU_POOL", pool);
    rc |= job_setenv(sp, "RGPU_POLICY", "first");
    snprintf(v, sizeof(v), "%d", req.gpus);
    rc |= job_setenv(sp, "RGPU_GPUS", v);
    if (req.mem_set) {
        snprintf(v, sizeof(v), "%" PRIu64, req.mem);
        rc |= job_setenv(sp, "RGPU_MEM_QUOTA", v);
    }
    if (conf->tenant[0] != '\0')
        rc |= job_setenv(sp, "RGPU_TENANT", conf->tenant);
    if (args.config[0] != '\0')
        rc |= job_setenv(sp, "RGPU_CONFIG", args.config);
    rc |= job_setenv(sp, "RGPU_SLURM_SERVERS", chosen);
    snprintf(v, sizeof(v), "%u", job_id);
    rc |= job_setenv(sp, "RGPU_SLURM_JOB", v);
    rc |= job_prepend(sp, "LD_LIBRARY_PATH", args.libdir, ':');
    /* PyTorch finds libnccl.so.2 by its own RUNPATH: the shim is preloaded (RGPU_NCCL=0: not) */
    snprintf(nccl, sizeof(nccl), "%s/libnccl.so.2", args.libdir);
    if (spank_getenv(sp, "RGPU_NCCL", off, sizeof(off)) != ESPANK_SUCCESS)
        off[0] = '\0';
    if (strcmp(off, "0") != 0 && access(nccl, R_OK) == 0)
        rc |= job_prepend(sp, "LD_PRELOAD", nccl, ' ');
    return rc ? -1 : 0;
}

/* "a,b" + c -> "a,b,c" (an entry that does not fit is left out: the lists are sized for
 * CLI_GPUS_MAX + STANDBY_MAX entries of a server address). */
static void list_add(char *list, size_t cap, const char *entry)
{
    size_t used = strlen(list), len = strlen(entry);

    if (used + len + 2 > cap)
        return;
    if (used > 0)
        list[used++] = ',';
    memcpy(list + used, entry, len + 1);
}

static int place_step(spank_t sp, uint32_t job_id)
{
    struct cli_conf *conf = calloc(1, sizeof(*conf));
    struct cli_placed placed[CLI_GPUS_MAX + STANDBY_MAX];
    char why[4096] = "", pool[(CLI_GPUS_MAX + STANDBY_MAX) * 82] = "", chosen[sizeof(pool)] = "";
    struct env_saved saved;
    int n = 0, need = 0, have = 0, rc = -1;

    if (conf == NULL) {
        fail_step("rgpu: job %u: out of memory", job_id);
        return -1;
    }
    env_import(sp, &saved);
    if (cli_conf_load(conf, why, sizeof(why)) != RG_OK) {
        fail_step("rgpu: job %u: the client configuration: %s", job_id, why);
        goto out;
    }
    if (req.mem_set)
        conf->mem_quota = req.mem;
    conf->gpus = req.gpus;
    if (!conf->placed) { /* servers named (`server =`, RGPU_SERVER): the user's own choice */
        for (int i = 0; i < conf->npool; i++)
            list_add(pool, sizeof(pool), conf->pool[i]);
        memcpy(chosen, pool, sizeof(chosen));
        rc = job_environment(sp, conf, pool, chosen, job_id);
        if (rc == 0) /* the named servers stay servers of the process, not a pool */
            rc = job_setenv(sp, "RGPU_SERVER", pool) | (spank_unsetenv(sp, "RGPU_POOL"), 0);
        goto out;
    }
    n = cli_pool_place_gpus(conf, req.gpus, placed, CLI_GPUS_MAX + STANDBY_MAX, why, sizeof(why));
    if (n == 0) {
        fail_step("rgpu: job %u: no room in the pool for --rgpu=%d: %s", job_id, req.gpus, why);
        goto out;
    }
    for (need = 0; need < n && have < req.gpus; need++)
        have += placed[need].ngpus;
    if (n > need + STANDBY_MAX)
        n = need + STANDBY_MAX;
    for (int k = 0; k < n; k++) {
        list_add(pool, sizeof(pool), placed[k].addr);
        if (k < need)
            list_add(chosen, sizeof(chosen), placed[k].addr);
    }
    rc = job_environment(sp, conf, pool, chosen, job_id);
    if (rc == 0)
        slurm_info("rgpu: job %u placed on %s (%d GPU(s)%s%s)", job_id, chosen, req.gpus,
                   n > need ? "; standing by: " : "", n > need ? pool + strlen(chosen) + 1 : "");
out:
    if (rc != 0 && step_failed[0] == '\0')
        fail_step("rgpu: job %u: cannot set the servers in the step's environment", job_id);
    env_restore(&saved);
    free(conf);
    return rc;
}

/* ---- the plugin's entry points -------------------------------------------------------------- */

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() == S_CTX_LOCAL || spank_context() == S_CTX_ALLOCATOR) {
        if (check_request() != 0)
            return -1;
        return req.gpus > 0 ? submit_request(sp) : 0;
    }
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    uint32_t job_id = 0;
    char placed_for[32] = "", want_s[32], why[512] = "";

    (void)ac;
    (void)av;
    if (!spank_remote(sp) || spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS)
        return 0;
    /* A step inside a batch job whose batch step was placed: its environment came from there */
    if (spank_getenv(sp, "RGPU_SLURM_JOB", placed_for, sizeof(placed_for)) == ESPANK_SUCCESS &&
        (uint32_t)strtoul(placed_for, NULL, 10) == job_id)
        return 0;
    if (req.gpus == 0) { /* no --rgpu on this step (salloc's steps): sbatch and salloc put the
                            job control environment into the job's as SLURM_SPANK_<name> */
        if (spank_getenv(sp, "SLURM_SPANK_RGPU_GPUS", want_s, sizeof(want_s)) != ESPANK_SUCCESS)
            return 0;
        req.gpus = atoi(want_s);
        if (spank_getenv(sp, "SLURM_SPANK_RGPU_SHARE", want_s, sizeof(want_s)) == ESPANK_SUCCESS)
            req.share = atoi(want_s);
        if (spank_getenv(sp, "SLURM_SPANK_RGPU_MEM", want_s, sizeof(want_s)) == ESPANK_SUCCESS &&
            (req.mem = strtoull(want_s, NULL, 10)) > 0)
            req.mem_set = true;
        if (req.gpus <= 0 || req.gpus > CLI_GPUS_MAX || req.share < 1 || req.share > SHARE_FULL)
            return 0;
    }
    if (job_holds_license(job_id, (uint64_t)req.gpus * (uint64_t)req.share, why, sizeof(why)) ==
        0) {
        fail_step("rgpu: %s", why);
        return 0;
    }
    place_step(sp, job_id);
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp) || step_failed[0] == '\0')
        return 0;
    fprintf(stderr, "%s\n", step_failed);
    fflush(stderr);
    return -1;
}
