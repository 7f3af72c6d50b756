/* Data lanes of a TCP session (server/lanes.c): extra connections that carry the bytes of large
 * copies in parallel stripes. The lanes component (server/components.def, SRV_COMP_LANES) owns
 * the listener, the connections, their threads and their pinned staging; its teardown stops
 * the threads and closes the lanes before the session's memory goes. */
#ifndef RGPU_SERVER_LANES_H
#define RGPU_SERVER_LANES_H

#include "server/session.h"

#define SRV_LANES_MAX 16

/* Listen for the session's lanes and name them in the Welcome (left empty when none can be). */
void srv_lanes_offer(struct srv_session *s, Rgpu__Welcome *w);
/* Free the lanes' pinned staging (their context is going). */
void srv_lanes_staging_release(struct srv_session *s);
/* The most pinned staging the session's lanes held (both chunks of every lane; known once the
 * component's teardown ran, for the session's teardown log). */
size_t srv_lanes_staging_most(struct srv_session *s);

#endif
