/*
 * Redis backend: rediss (redis_tls.c), a client's TLS settings from the URI
 * and the handshake on a socket.  Above the transports (whose socket
 * timeouts it uses), below the connections.  Never included outside
 * backends/redis/.
 *
 * Threads: the settings are made once at open and only read afterwards;
 * any thread makes a connection's SSL from them, and steps its handshake
 * (a loop's thread, for a non-blocking socket).  Errors: as each function
 * says; a message names a parameter, never a path or a key.
 */
#ifndef DLOCK_REDIS_TLS_H
#define DLOCK_REDIS_TLS_H

#include <openssl/ssl.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

struct redis_tls;

/** The URI's TLS settings: DLOCK_EURI for a bad value or a file that cannot be loaded (named by
 *  its parameter, never by its path). */
dlock_status dlock_redis_tls_new(const dlock_uri *uri, dlock_host *host, struct redis_tls **out, dlock_error *err);
void dlock_redis_tls_free(struct redis_tls *t);
/**
 * TLS on the connected socket `fd` (not taken), by `deadline_ns`, verifying
 * the certificate for tls_server_name or `host` (NULL: no name); *cert_missing
 * says whether the server asked for a client certificate we do not have
 * (TLS 1.3 servers refuse that only after the handshake).  DLOCK_EAUTH
 * when the certificate or name is not accepted or ours is refused,
 * DLOCK_ECONNECT when the handshake fails otherwise.
 */
dlock_status dlock_redis_tls_handshake(const struct redis_tls *t, int fd, const char *host, const char *label,
                                       int64_t deadline_ns, SSL **out, int *cert_missing, dlock_error *err);
/** A TLS session on the connected socket `fd` (not taken), its handshake not begun, verifying as
 *  dlock_redis_tls_handshake() does.  DLOCK_OK, DLOCK_ENOMEM, DLOCK_EURI (a name that cannot be sent). */
dlock_status dlock_redis_tls_session(const struct redis_tls *t, int fd, const char *host, const char *label,
                                     SSL **out, dlock_error *err);
/**
 * One step of `ssl`'s handshake: 1 done; 0 (only with `want` not NULL: a
 * non-blocking socket) to be called again once the socket is ready for
 * *want, DLOCK_IO_READ or DLOCK_IO_WRITE; -1 failed, with *st
 * (DLOCK_EAUTH, DLOCK_ECONNECT as dlock_redis_tls_handshake() says) and
 * the message.  `cert_missing` as there, kept by the caller across steps.
 */
int dlock_redis_tls_connect_step(SSL *ssl, int *cert_missing, const char *label, unsigned *want, dlock_status *st,
                                 dlock_error *err);
/** 1 when OpenSSL error `e` is the server's alert refusing our certificate (or its absence). */
int dlock_redis_tls_refused_certificate(unsigned long e);

#endif
