/* Data lanes of a TCP session (server/lanes.c): extra connections that carry the bytes of large
 * copies in parallel stripes. */
#ifndef RGPU_SERVER_LANES_H
#define RGPU_SERVER_LANES_H

#include "server/session.h"

#define SRV_LANES_MAX 16

/* Listen for the session's lanes and name them in the Welcome (left empty when none can be). */
void srv_lanes_offer(struct srv_session *s, Rgpu__Welcome *w);
/* Free the lanes' pinned staging (their context is going). */
void srv_lanes_staging_release(struct srv_session *s);
/* Stop the lane threads, close the lanes, free everything (session teardown). */
void srv_lanes_end(struct srv_session *s);

#endif
