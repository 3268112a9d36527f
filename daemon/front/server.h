/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * server.h - the Unix listening socket.
 */

#ifndef ADMITD_SERVER_H
#define ADMITD_SERVER_H

#include "conn.h"

/*
 * server_new - create the socket at conf->socket, serving into cs (refusing to steal it
 * from a live daemon, replacing a stale one), chown it to socket_group
 * when set, chmod it to socket_mode and start accepting (peers outside
 * allow_uids/allow_gids are refused at accept). Out of descriptors, the
 * peers waiting are answered `unavailable` and closed (a spare descriptor
 * is given up for that). NULL with a logged error on failure.
 */
struct server *server_new(struct conns *cs);

/*
 * server_recheck_peers - after a reload: every open connection whose peer
 * (its credentials as recorded at accept) the running allow_uids and
 * allow_gids no longer let in gets one `forbidden` line and is closed; its
 * waiters are cancelled and its leases released as on any close.
 */
void server_recheck_peers(struct conns *cs);

/* server_free - stop accepting and remove the socket file. */
void server_free(struct server *s);

#endif
