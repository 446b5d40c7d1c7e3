/*
 * Redis backend: a connection's bytes (redis_io.c), plain or TLS, through
 * hiredis's reader and formatter, and the arguments of one command.  Above
 * the TLS layer, below the connections (redis_conn.h).  Never included
 * outside backends/redis/.  A connection is blocking (its socket's reads
 * and writes bounded by io_timeout), or non-blocking for a loop client's
 * loop (redis_nbconn.c), which reads and writes only what the socket takes
 * now (dlock_redis_send_some(), dlock_redis_read_some()).
 *
 * Threads: one thread uses a connection at a time (another may shut its
 * socket down to end a blocking read).  Errors: as struct redis_conn says.
 */
#ifndef DLOCK_REDIS_IO_H
#define DLOCK_REDIS_IO_H

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

#define REDIS_ARGS_MAX 18
/* Bytes an argument list keeps for the key names it builds (redis_key.h: a lock's, REDIS_LOCK_NAMES_MAX at most). */
#define REDIS_ARGS_BYTES 3400

/*
 * One connection: a blocking socket, in the clear or inside TLS, with
 * hiredis's reader and formatter (hiredis 0.14's own context cannot speak
 * TLS).  The calls mirror hiredis's: REDIS_OK or REDIS_ERR, and after a
 * failure `err` stays set and the connection is never used again.
 */
struct redis_conn {
	int fd;
	SSL *ssl;             /* NULL: plaintext */
	redisReader *reader;
	char *out;            /* formatted commands not sent yet */
	size_t outlen, outcap;
	int err;              /* 0, or REDIS_ERR_IO, _EOF, _PROTOCOL, _OOM */
	int timed_out;        /* the failure was a read or write past io_timeout */
	int refused_cert;     /* the failure was the server's alert refusing our certificate */
	int cert_missing;     /* the server asked for a client certificate and we have none */
	unsigned long replies; /* replies read so far */
	unsigned generation;  /* the pool's generation when it was made (Sentinel: which master) */
	unsigned char nonblocking;   /* the socket is non-blocking (a loop's): no read or write ever waits */
	unsigned char read_wants_write; /* non-blocking TLS: the last read needs the socket writable to go on */
	unsigned char write_wants_read; /* non-blocking TLS: the last write needs the socket readable to go on */
	char errstr[160];
};

/** A connection over `fd` and `ssl` (both taken, even on failure: NULL = out of memory). */
struct redis_conn *dlock_redis_conn_new(int fd, SSL *ssl);
void dlock_redis_conn_free(struct redis_conn *conn);
/** Queue a command (sent by the next flush or get_reply). */
int dlock_redis_append_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len);
/** Send every queued command. */
int dlock_redis_flush(struct redis_conn *conn);
/** Send what is queued, then block (up to io_timeout per read) for the next reply. */
int dlock_redis_get_reply(struct redis_conn *conn, void **reply);
/** Read what the socket has without blocking (after poll() said readable); under TLS until nothing is left,
 *  what OpenSSL holds decrypted included. */
int dlock_redis_read_some(struct redis_conn *conn);
/** Non-blocking connections: send what the socket takes now of the first `max` bytes queued (those sent leave
 *  the queue; conn->outlen says what is left), adding the bytes sent to *sent. */
int dlock_redis_send_some(struct redis_conn *conn, size_t max, uint64_t *sent);
/** The next complete reply already read, or *reply = NULL (a non-blocking connection: also after it failed). */
int dlock_redis_buffered_reply(struct redis_conn *conn, void **reply);
/** Append and read one reply: NULL when the connection failed. */
redisReply *dlock_redis_command_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len);

/* ------------------------------------------------------------ arguments */

/* Arguments of one command (binary-safe), and the bytes of those it built itself (built by redis_conn.c). */
struct redis_args {
	int argc;
	const char *argv[REDIS_ARGS_MAX];
	size_t len[REDIS_ARGS_MAX];
	size_t used;                  /* bytes of `bytes` in use */
	char bytes[REDIS_ARGS_BYTES]; /* key names built when the command is sent (dlock_redis_arg_key) */
};

/** dlock_redis_command_argv() with `a`. */
redisReply *dlock_redis_command(struct redis_conn *conn, const struct redis_args *a);

#endif
