/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * server.h - the Unix listening socket.
 */

#ifndef ADMITD_SERVER_H
#define ADMITD_SERVER_H

#include "admitd.h"

/*
 * server_new - create the socket at ad->conf->socket (refusing to steal it
 * from a live daemon, replacing a stale one), chown it to socket_group
 * when set, chmod it to socket_mode and start accepting (peers outside
 * allow_uids/allow_gids are refused at accept). NULL with a logged error on failure.
 */
struct server *server_new(struct admitd *ad);

/* server_stop - stop accepting and remove the socket file. */
void server_free(struct server *s);

#endif
