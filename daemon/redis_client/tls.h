/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * tls.h - TLS for Redis connections: one client context, one bufferevent
 * per connection.
 *
 * Owns: the OpenSSL context (CA, client certificate and key, verification
 * mode) and each connection's SSL object (handed to the bufferevent, which
 * frees it). The only file of the daemon that includes OpenSSL.
 */

#ifndef ADMITD_TLS_H
#define ADMITD_TLS_H

#include <stdbool.h>
#include <stddef.h>

struct bufferevent;
struct event_base;
struct tls_ctx;

struct tls_conf {
	const char *ca_file;	 /* NULL: the system's default CA paths */
	const char *cert_file;	 /* client certificate (chain), or NULL */
	const char *key_file;	 /* its key; NULL with cert_file: the same file */
	const char *server_name; /* checked name and SNI; NULL: the host connected to */
	bool verify;		 /* false only when redis_tls_verify = no */
};

/*
 * tls_ctx_new - a client context. NULL with a one-line message in err when
 * a file cannot be read or the key does not match the certificate.
 */
struct tls_ctx *tls_ctx_new(const struct tls_conf *tc, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *t);

/*
 * tls_bufferevent_new - an unconnected bufferevent that will run a TLS
 * handshake once connected (bufferevent_socket_connect), verifying the
 * server's chain and its name (conf server_name, else host; an IP address
 * is matched against the certificate's IP entries). NULL on failure.
 */
struct bufferevent *tls_bufferevent_new(struct event_base *base, struct tls_ctx *t,
					const char *host);

/*
 * tls_error - why a TLS bufferevent failed (verification result first),
 * into buf; false when the failure was not a TLS one.
 */
bool tls_error(struct bufferevent *bev, char *buf, size_t len);

#endif
