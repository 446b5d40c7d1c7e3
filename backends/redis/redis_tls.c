/*
 * rediss:// — TLS settings of a client and the handshake on a socket.
 *
 *   tls_ca_file=PATH, tls_ca_dir=PATH   whom to trust (default: the system's
 *                                       store, so SSL_CERT_FILE / SSL_CERT_DIR work)
 *   tls_cert=PATH, tls_key=PATH         a client certificate (PEM, chain allowed)
 *                                       and its unencrypted key; both or neither
 *   tls_server_name=NAME                the name to verify and send (SNI);
 *                                       default: the host of the URI or the one
 *                                       Sentinel names
 *   tls_insecure_skip_verify=1          verify nothing (logged as a warning)
 *
 * The server's certificate and its name (or IP address) are verified by
 * default; a failure is DLOCK_EAUTH with the reason, never a fallback to
 * plaintext.  Paths and keys never reach a message (the URI masks
 * tls_key's value; the messages name the parameter, not the file).
 *
 * The SSL_CTX is set up once at open and only read afterwards: every
 * thread makes its connections' SSL objects from it.  The handshake is one
 * SSL_connect() on a blocking socket bounded by open_timeout, or, on a
 * loop client's non-blocking socket (redis_nbconn.c), steps that each
 * say which readiness of the socket the next one needs.  Writes go through a
 * socket BIO of our own that sends with MSG_NOSIGNAL: a server that closed
 * the connection must not kill the application with SIGPIPE.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "redis_tls.h"
#include "redis_transport.h"

struct redis_tls {
	SSL_CTX *ctx;
	BIO_METHOD *bio;         /* socket BIO whose writes never raise SIGPIPE */
	const char *server_name; /* tls_server_name, or NULL (the core's URI owns it) */
	int verify;              /* 0 with tls_insecure_skip_verify=1 */
};

/* ------------------------------------------------------------ the BIO */

static int nosig_write(BIO *b, const char *buf, int len)
{
	int fd = -1;
	BIO_get_fd(b, &fd);
	errno = 0;
	ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
	BIO_clear_retry_flags(b);
	if (n <= 0 && BIO_sock_should_retry((int)n))
		BIO_set_retry_write(b);
	return (int)n;
}

static BIO_METHOD *nosig_method(void)
{
	const BIO_METHOD *sock = BIO_s_socket();
	BIO_METHOD *m = BIO_meth_new(BIO_TYPE_SOCKET, "dlock socket");
	if (!m)
		return NULL;
	if (!BIO_meth_set_write(m, nosig_write) || !BIO_meth_set_read(m, BIO_meth_get_read(sock)) ||
	    !BIO_meth_set_puts(m, BIO_meth_get_puts(sock)) || !BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) ||
	    !BIO_meth_set_create(m, BIO_meth_get_create(sock)) ||
	    !BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock))) {
		BIO_meth_free(m);
		return NULL;
	}
	return m;
}

/* ------------------------------------------------------------ settings */

/* OpenSSL's reason for the last failure, without file names (the reason strings carry none). */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_error(); /* the first: the cause, not what wrapped it ("PEM lib") */
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	if (e && ERR_SYSTEM_ERROR(e)) /* a file that cannot be opened: the errno, not "system lib" */
		r = strerror(ERR_GET_REASON(e));
	snprintf(buf, len, "%s", r ? r : "unknown reason");
	ERR_clear_error();
	return buf;
}

/* The server asked for a client certificate and none is set: note it, send none. */
static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
	(void)x509, (void)pkey;
	int *asked = SSL_get_app_data(ssl);
	if (asked)
		*asked = 1;
	return 0;
}

/* An encrypted key would make OpenSSL ask on the terminal: refuse instead. */
static int no_passphrase(char *buf, int size, int rwflag, void *arg)
{
	(void)buf, (void)size, (void)rwflag, (void)arg;
	return 0;
}

void dlock_redis_tls_free(struct redis_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	BIO_meth_free(t->bio);
	free(t);
}

static dlock_status load_files(struct redis_tls *t, const dlock_uri *uri, dlock_error *err)
{
	const char *cafile = dlock_uri_get(uri, "tls_ca_file"), *cadir = dlock_uri_get(uri, "tls_ca_dir");
	const char *cert = dlock_uri_get(uri, "tls_cert"), *key = dlock_uri_get(uri, "tls_key");
	char why[160];
	if ((cafile && !*cafile) || (cadir && !*cadir) || (cert && !*cert) || (key && !*key))
		return dlock_error_set(err, DLOCK_EURI, "rediss: a tls_ parameter has an empty value: %s", uri->masked);
	if ((cafile || cadir) && !SSL_CTX_load_verify_locations(t->ctx, cafile, cadir))
		return dlock_error_set(err, DLOCK_EURI, "rediss: %s cannot be loaded as PEM certificates (%s)",
		                       cafile ? "tls_ca_file" : "tls_ca_dir", ssl_reason(why, sizeof why));
	if (!cafile && !cadir && !SSL_CTX_set_default_verify_paths(t->ctx))
		return dlock_error_set(err, DLOCK_EIO, "rediss: the system's trusted certificates cannot be loaded (%s)",
		                       ssl_reason(why, sizeof why));
	if (!cert != !key)
		return dlock_error_set(err, DLOCK_EURI, "rediss: tls_cert and tls_key go together: %s", uri->masked);
	if (cert && !SSL_CTX_use_certificate_chain_file(t->ctx, cert))
		return dlock_error_set(err, DLOCK_EURI, "rediss: tls_cert cannot be loaded as a PEM certificate (%s)",
		                       ssl_reason(why, sizeof why));
	if (key && !SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM)) {
		ssl_reason(why, sizeof why);
		if (strstr(why, "mismatch"))
			return dlock_error_set(err, DLOCK_EURI, "rediss: tls_key is not the key of tls_cert (%s)", why);
		return dlock_error_set(err, DLOCK_EURI, "rediss: tls_key cannot be loaded as an unencrypted PEM key (%s)",
		                       why);
	}
	if (key && !SSL_CTX_check_private_key(t->ctx))
		return dlock_error_set(err, DLOCK_EURI, "rediss: tls_key is not the key of tls_cert");
	return DLOCK_OK;
}

dlock_status dlock_redis_tls_new(const dlock_uri *uri, dlock_host *host, struct redis_tls **out, dlock_error *err)
{
	int skip = 0;
	if (dlock_uri_get_bool(uri, "tls_insecure_skip_verify", &skip, err) != DLOCK_OK)
		return DLOCK_EURI;
	const char *name = dlock_uri_get(uri, "tls_server_name");
	if (name && (!*name || strlen(name) > 253))
		return dlock_error_set(err, DLOCK_EURI, "rediss: tls_server_name must be a host name: %s", uri->masked);
	struct redis_tls *t = calloc(1, sizeof *t);
	if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method())) || !(t->bio = nosig_method())) {
		dlock_redis_tls_free(t);
		return dlock_error_set(err, DLOCK_ENOMEM, "rediss: out of memory");
	}
	t->server_name = name;
	t->verify = !skip;
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);
	SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	SSL_CTX_set_client_cert_cb(t->ctx, no_client_cert); /* called only when no tls_cert is set */
	dlock_status st = load_files(t, uri, err);
	if (st != DLOCK_OK) {
		dlock_redis_tls_free(t);
		return st;
	}
	if (skip)
		dlock_host_log(host, DLOCK_LOG_WARN,
		               "rediss: tls_insecure_skip_verify=1: the server's certificate and name are NOT verified; "
		               "anyone on the path can pose as the server and read the password");
	*out = t;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ handshake */

static int is_ip_literal(const char *name)
{
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* The name to verify and send: tls_server_name, else the host we connect to. */
static dlock_status expect_name(const struct redis_tls *t, SSL *ssl, const char *host, const char *label,
                                dlock_error *err)
{
	const char *name = t->server_name ? t->server_name : host;
	if (!name || !*name)
		return DLOCK_OK; /* a unix socket: nothing to name */
	if (!is_ip_literal(name) && !SSL_set_tlsext_host_name(ssl, name))
		return dlock_error_set(err, DLOCK_EURI, "redis %s: TLS: %s cannot be sent as the server name", label, name);
	if (!t->verify)
		return DLOCK_OK;
	int ok = is_ip_literal(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
	                             : SSL_set1_host(ssl, name);
	if (!ok)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: TLS: cannot set the name to verify", label);
	return DLOCK_OK;
}

static dlock_status handshake_failed(SSL *ssl, int rc, int saved, const char *label, dlock_error *err)
{
	long verify = SSL_get_verify_result(ssl);
	char why[160];
	if (verify != X509_V_OK) {
		ERR_clear_error();
		int name = verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH;
		return dlock_error_set(err, DLOCK_EAUTH, "redis %s: TLS: the server's certificate was not accepted: %s%s",
		                       label, X509_verify_cert_error_string(verify),
		                       name ? " (tls_server_name sets the name to verify)"
		                            : " (tls_ca_file or tls_ca_dir sets whom to trust)");
	}
	int kind = SSL_get_error(ssl, rc);
	if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE)
		return dlock_error_set(err, DLOCK_ECONNECT,
		                       "redis %s: TLS: no handshake within open_timeout (is the port speaking TLS?)", label);
	if (kind == SSL_ERROR_SYSCALL && !ERR_peek_error())
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: TLS handshake failed: %s (is the port speaking TLS?)",
		                       label, saved ? strerror(saved) : "the server closed the connection");
	int refused = dlock_redis_tls_refused_certificate(ERR_peek_error());
	ssl_reason(why, sizeof why);
	if (refused)
		return dlock_error_set(err, DLOCK_EAUTH, "redis %s: TLS: the server refused our certificate (%s; "
		                       "tls_cert and tls_key give one)", label, why);
	return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: TLS handshake failed: %s%s", label, why,
	                       strstr(why, "wrong version") ? " (is the port speaking TLS?)" : "");
}

dlock_status dlock_redis_tls_session(const struct redis_tls *t, int fd, const char *host, const char *label,
                                     SSL **out, dlock_error *err)
{
	ERR_clear_error();
	SSL *ssl = SSL_new(t->ctx);
	BIO *bio = ssl ? BIO_new(t->bio) : NULL;
	if (!bio) {
		SSL_free(ssl);
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", label);
	}
	BIO_set_fd(bio, fd, BIO_NOCLOSE);
	SSL_set_bio(ssl, bio, bio);
	dlock_status st = expect_name(t, ssl, host, label, err);
	if (st != DLOCK_OK) {
		SSL_free(ssl);
		return st;
	}
	*out = ssl;
	return DLOCK_OK;
}

int dlock_redis_tls_connect_step(SSL *ssl, int *cert_missing, const char *label, unsigned *want, dlock_status *st,
                                 dlock_error *err)
{
	ERR_clear_error();
	errno = 0;
	SSL_set_app_data(ssl, cert_missing);
	int rc = SSL_connect(ssl);
	int saved = errno;
	SSL_set_app_data(ssl, NULL);
	if (rc == 1)
		return 1;
	int kind = SSL_get_error(ssl, rc);
	if (want && (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE)) {
		ERR_clear_error();
		*want = kind == SSL_ERROR_WANT_READ ? DLOCK_IO_READ : DLOCK_IO_WRITE;
		return 0;
	}
	*st = handshake_failed(ssl, rc, saved, label, err);
	return -1;
}

dlock_status dlock_redis_tls_handshake(const struct redis_tls *t, int fd, const char *host, const char *label,
                                       int64_t deadline_ns, SSL **out, int *cert_missing, dlock_error *err)
{
	*cert_missing = 0;
	SSL *ssl = NULL;
	dlock_status st = dlock_redis_tls_session(t, fd, host, label, &ssl, err);
	if (st != DLOCK_OK)
		return st;
	int64_t left_ms = (deadline_ns - dlock_monotonic_ns()) / REDIS_NS_PER_MS;
	dlock_redis_socket_timeouts(fd, left_ms < 1 ? 1 : left_ms); /* a failure leaves the socket unbounded: rare */
	if (dlock_redis_tls_connect_step(ssl, cert_missing, label, NULL, &st, err) != 1) {
		SSL_free(ssl);
		return st;
	}
	*out = ssl;
	return DLOCK_OK;
}

int dlock_redis_tls_refused_certificate(unsigned long e)
{
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	return r && strstr(r, "alert") && strstr(r, "certificate");
}
