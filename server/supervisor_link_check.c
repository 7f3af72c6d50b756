/* Linked from every supervisor object and the shared piece only (server/CMakeLists.txt): that it
 * links at all is the check that the supervisor reaches nothing of the worker library (the
 * driver, a session, a handler). Run, it says so. */
#include <stdio.h>

#include "server/server.h"

int main(void)
{
    int (*volatile run)(const struct srv_config *, const char *) = srv_supervisor_run;

    printf("the supervisor links without the worker library (%s)\n",
           run != NULL ? "srv_supervisor_run resolved" : "?");
    return run != NULL ? 0 : 1;
}
