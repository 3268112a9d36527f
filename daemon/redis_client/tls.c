/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * tls.c - OpenSSL client contexts for Redis connections (see tls.h).
 *
 * Owns: the SSL_CTX and the per-connection SSL objects until the
 * bufferevent takes them (BEV_OPT_CLOSE_ON_FREE frees both). Verification
 * is on unless the conf says no: the chain must lead to the CA file (or the
 * system store) and the certificate must name the server. A refused
 * handshake is an ordinary connection failure to the caller.
 */

#include "tls.h"

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tls_ctx {
	SSL_CTX *ctx;
	char *server_name;
	bool verify;
};

/* The oldest queued OpenSSL error as text, and clear the queue. */
static void ssl_errstr(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		snprintf(buf, len, "unknown error");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
}

struct tls_ctx *tls_ctx_new(const struct tls_conf *tc, char *err, size_t errlen)
{
	struct tls_ctx *t = calloc(1, sizeof(*t));
	const char *errpos = "calloc";
	char why[200] = "out of memory";

	if (t == NULL)
		goto fail;
	errpos = "SSL_CTX_new";
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (t->ctx == NULL)
		goto ssl_fail;
	if (SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) != 1)
		goto ssl_fail;
	t->verify = tc->verify;
	SSL_CTX_set_verify(t->ctx, tc->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	if (tc->ca_file != NULL) {
		errpos = "redis_tls_ca_file";
		if (SSL_CTX_load_verify_locations(t->ctx, tc->ca_file, NULL) != 1)
			goto ssl_fail;
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		errpos = "the system CA store";
		goto ssl_fail;
	}
	if (tc->cert_file != NULL) {
		errpos = "redis_tls_cert_file";
		if (SSL_CTX_use_certificate_chain_file(t->ctx, tc->cert_file) != 1)
			goto ssl_fail;
		errpos = "redis_tls_key_file";
		if (SSL_CTX_use_PrivateKey_file(t->ctx, tc->key_file ? tc->key_file : tc->cert_file,
						SSL_FILETYPE_PEM) != 1)
			goto ssl_fail;
		if (SSL_CTX_check_private_key(t->ctx) != 1)
			goto ssl_fail;
	}
	if (tc->server_name != NULL) {
		errpos = "strdup";
		t->server_name = strdup(tc->server_name);
		if (t->server_name == NULL)
			goto fail;
	}
	return t;
ssl_fail:
	ssl_errstr(why, sizeof(why));
fail:
	snprintf(err, errlen, "redis tls: %s: %s", errpos, why);
	tls_ctx_free(t);
	return NULL;
}

void tls_ctx_free(struct tls_ctx *t)
{
	if (t == NULL)
		return;
	SSL_CTX_free(t->ctx);
	free(t->server_name);
	free(t);
}

/* Name checks for ssl: the host name or IP address the certificate must show. */
static bool tls_set_peer(SSL *ssl, const char *name, bool verify)
{
	unsigned char addr[16];
	bool is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;

	/* SNI carries names only (RFC 6066), never an address. */
	if (!is_ip && SSL_set_tlsext_host_name(ssl, name) != 1)
		return false;
	if (!verify)
		return true;
	if (is_ip)
		return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
	SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return SSL_set1_host(ssl, name) == 1;
}

struct bufferevent *tls_bufferevent_new(struct event_base *base, struct tls_ctx *t,
					const char *host)
{
	SSL *ssl = SSL_new(t->ctx);
	struct bufferevent *bev;

	if (ssl == NULL)
		return NULL;
	if (!tls_set_peer(ssl, t->server_name ? t->server_name : host, t->verify)) {
		SSL_free(ssl);
		return NULL;
	}
	bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
					     BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		SSL_free(ssl);
		return NULL;
	}
	/* A peer that closes without close_notify is an ordinary EOF to us. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	return bev;
}

bool tls_error(struct bufferevent *bev, char *buf, size_t len)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	unsigned long e;
	long vr;

	if (ssl == NULL)
		return false;
	vr = SSL_get_verify_result(ssl);
	if (vr != X509_V_OK && (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER)) {
		snprintf(buf, len, "certificate verify failed: %s",
			 X509_verify_cert_error_string(vr));
		ERR_clear_error();
		while (bufferevent_get_openssl_error(bev) != 0)
			;
		return true;
	}
	e = bufferevent_get_openssl_error(bev);
	if (e == 0)
		return false;
	ERR_error_string_n(e, buf, len);
	while (bufferevent_get_openssl_error(bev) != 0)
		;
	return true;
}
