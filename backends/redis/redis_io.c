/*
 * A connection's bytes: one socket, in the clear or inside TLS, with
 * hiredis's protocol reader on top and the requests written here.
 *
 * Why not a redisContext: hiredis 0.14 (Debian bookworm's) reads and writes
 * its descriptor itself and has no TLS and no hook for other I/O, while its
 * reader (redisReaderFeed/GetReply) works over any byte stream.  So the
 * connection is this small struct, and the same code path serves a plain
 * socket and an OpenSSL session: only conn_recv() and conn_send() differ.
 *
 * Blocking: the socket is blocking with SO_RCVTIMEO/SO_SNDTIMEO set to
 * io_timeout, as hiredis's redisSetTimeout() did, so a read or write that
 * waits longer fails (EAGAIN; under TLS, SSL_ERROR_WANT_READ/WRITE).  The
 * subscriber thread polls the socket itself and then calls
 * dlock_redis_read_some(), which never blocks.
 *
 * Non-blocking (`nonblocking`, a loop client's connection, redis_nbconn.c):
 * the socket is O_NONBLOCK for good, EAGAIN (under TLS WANT_READ or
 * WANT_WRITE) means "not now", and the TLS session is in partial-write
 * mode with a moving buffer, so that dlock_redis_send_some() sends what
 * the socket takes and keeps the rest.  A TLS read that needs the socket
 * writable (or a write that needs it readable) says so in
 * read_wants_write (write_wants_read), for the loop to watch.
 *
 * Errors: a failed connection keeps err != 0 and a message in errstr (no
 * secrets: OpenSSL's error strings carry no file names or keys), and is
 * never used again (the pool closes it).  Threads: one at a time, except
 * that another thread may shutdown(2) the descriptor to end a blocking read.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redis_io.h"
#include "redis_tls.h"

#define READ_CHUNK (16 * 1024) /* one TLS record's payload at most */

static void conn_fail(struct redis_conn *conn, int type, const char *fmt, const char *detail)
{
	if (conn->err)
		return; /* the first failure is the one to report */
	conn->err = type;
	snprintf(conn->errstr, sizeof conn->errstr, fmt, detail);
}

/* The failure of a system call that set errno. */
static void conn_fail_errno(struct redis_conn *conn, int saved)
{
	if (saved == EAGAIN || saved == EWOULDBLOCK) {
		conn->timed_out = 1;
		conn_fail(conn, REDIS_ERR_IO, "%s", "no answer within io_timeout");
		return;
	}
	conn_fail(conn, REDIS_ERR_IO, "%s", strerror(saved));
}

/* The failure of an SSL_read/SSL_write that returned `rc`. */
static void conn_fail_tls(struct redis_conn *conn, int rc, int saved)
{
	int why = SSL_get_error(conn->ssl, rc);
	unsigned long e = ERR_get_error();
	char buf[160];
	ERR_clear_error();
	if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
		conn->timed_out = 1;
		conn_fail(conn, REDIS_ERR_IO, "%s", "no answer within io_timeout");
	} else if (why == SSL_ERROR_ZERO_RETURN || (why == SSL_ERROR_SYSCALL && !e && saved == 0)) {
		conn_fail(conn, REDIS_ERR_EOF, "%s", "server closed the connection");
	} else if (why == SSL_ERROR_SYSCALL && !e) {
		conn_fail_errno(conn, saved);
	} else {
		conn->refused_cert = dlock_redis_tls_refused_certificate(e);
		ERR_error_string_n(e, buf, sizeof buf);
		conn_fail(conn, REDIS_ERR_IO, conn->refused_cert ? "TLS: the server refused our certificate (%s)" : "TLS: %s",
		          buf);
	}
}

/* ------------------------------------------------------------ new, free */

struct redis_conn *dlock_redis_conn_new(int fd, SSL *ssl)
{
	struct redis_conn *conn = calloc(1, sizeof *conn);
	if (!conn || !(conn->reader = redisReaderCreate())) {
		free(conn);
		SSL_free(ssl);
		close(fd);
		return NULL;
	}
	conn->fd = fd;
	conn->ssl = ssl;
	return conn;
}

void dlock_redis_conn_free(struct redis_conn *conn)
{
	if (!conn)
		return;
	if (conn->ssl) {
		/* No close_notify: the peer learns of the close from the FIN, and a
		 * shutdown write to a dead server must not block or raise SIGPIPE. */
		SSL_free(conn->ssl);
	}
	if (conn->fd >= 0)
		close(conn->fd);
	redisReaderFree(conn->reader);
	free(conn->out);
	free(conn);
}

/* ------------------------------------------------------------ bytes */

/* Bytes written, 0 when the connection is non-blocking and the socket takes nothing now, or -1 (conn failed). */
static ssize_t conn_send(struct redis_conn *conn, const char *buf, size_t len)
{
	if (conn->ssl) {
		ERR_clear_error();
		errno = 0;
		conn->write_wants_read = 0;
		int n = SSL_write(conn->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
		if (n > 0)
			return n;
		int why = SSL_get_error(conn->ssl, n);
		if (conn->nonblocking && (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE)) {
			ERR_clear_error();
			conn->write_wants_read = why == SSL_ERROR_WANT_READ;
			return 0;
		}
		conn_fail_tls(conn, n, errno);
		return -1;
	}
	for (;;) {
		ssize_t n = send(conn->fd, buf, len, MSG_NOSIGNAL);
		if (n > 0 || (n == 0 && len == 0))
			return n;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && conn->nonblocking && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		conn_fail_errno(conn, n < 0 ? errno : EIO);
		return -1;
	}
}

/* Bytes read (> 0), 0 when `nonblocking` and nothing is there yet, or -1 (conn failed). */
static ssize_t conn_recv(struct redis_conn *conn, char *buf, size_t len, int nonblocking)
{
	if (conn->ssl) {
		ERR_clear_error();
		errno = 0;
		int n = SSL_read(conn->ssl, buf, (int)len);
		if (n > 0)
			return n;
		int why = SSL_get_error(conn->ssl, n);
		if (nonblocking && (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE)) {
			ERR_clear_error();
			conn->read_wants_write = why == SSL_ERROR_WANT_WRITE;
			return 0;
		}
		conn_fail_tls(conn, n, errno);
		return -1;
	}
	for (;;) {
		ssize_t n = recv(conn->fd, buf, len, nonblocking ? MSG_DONTWAIT : 0);
		if (n > 0)
			return n;
		if (n == 0) {
			conn_fail(conn, REDIS_ERR_EOF, "%s", "server closed the connection");
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (nonblocking && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		conn_fail_errno(conn, errno);
		return -1;
	}
}

static int feed(struct redis_conn *conn, const char *buf, size_t n)
{
	if (redisReaderFeed(conn->reader, buf, n) != REDIS_OK) {
		conn_fail(conn, REDIS_ERR_PROTOCOL, "%s", conn->reader->errstr);
		return REDIS_ERR;
	}
	return REDIS_OK;
}

/* ------------------------------------------------------------ commands */

/* Room for `more` bytes after what is queued; 0 when memory ran out (the connection failed). */
static int out_reserve(struct redis_conn *conn, size_t more)
{
	if (conn->outlen + more <= conn->outcap)
		return 1;
	size_t cap = conn->outcap ? conn->outcap : 256;
	while (cap < conn->outlen + more)
		cap *= 2;
	char *grown = realloc(conn->out, cap);
	if (!grown) {
		conn_fail(conn, REDIS_ERR_OOM, "%s", "out of memory");
		return 0;
	}
	conn->out = grown;
	conn->outcap = cap;
	return 1;
}

/*
 * The command in the protocol's array of bulk strings (`*N`, then `$LEN`
 * and the bytes of each argument), written straight into the output
 * buffer.  Not hiredis's redisFormatCommandArgv: that one allocates the
 * command and formats each length with sprintf, which was most of the
 * client's instructions per acquisition; the format is four lines of the
 * protocol's specification.
 */
int dlock_redis_append_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len)
{
	if (conn->err)
		return REDIS_ERR;
	size_t need = 1 + 20 + 2; /* *N\r\n */
	for (int i = 0; i < argc; i++)
		need += 1 + 20 + 2 + len[i] + 2; /* $LEN\r\n BYTES \r\n */
	if (!out_reserve(conn, need))
		return REDIS_ERR;
	char *p = conn->out + conn->outlen;
	*p++ = '*';
	p += dlock_decimal(p, argc); /* its NUL is overwritten next */
	*p++ = '\r';
	*p++ = '\n';
	for (int i = 0; i < argc; i++) {
		*p++ = '$';
		p += dlock_decimal(p, (int64_t)len[i]);
		*p++ = '\r';
		*p++ = '\n';
		if (len[i])
			memcpy(p, argv[i], len[i]);
		p += len[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	conn->outlen = (size_t)(p - conn->out);
	return REDIS_OK;
}

int dlock_redis_flush(struct redis_conn *conn)
{
	size_t done = 0;
	while (!conn->err && done < conn->outlen) {
		ssize_t n = conn_send(conn, conn->out + done, conn->outlen - done);
		if (n < 0)
			break;
		done += (size_t)n;
	}
	conn->outlen = 0;
	return conn->err ? REDIS_ERR : REDIS_OK;
}

int dlock_redis_buffered_reply(struct redis_conn *conn, void **reply)
{
	*reply = NULL;
	/* A non-blocking connection still gives the replies it read before it failed (a server that answers,
	 * then closes); its reader is broken only by a protocol error or memory. */
	if (conn->err && (!conn->nonblocking || conn->err == REDIS_ERR_PROTOCOL || conn->err == REDIS_ERR_OOM))
		return REDIS_ERR;
	if (redisReaderGetReply(conn->reader, reply) != REDIS_OK) {
		conn_fail(conn, REDIS_ERR_PROTOCOL, "%s", conn->reader->errstr);
		return REDIS_ERR;
	}
	const redisReply *r = *reply;
	conn->replies += r != NULL;
	if (r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, "READONLY", 8) == 0)
		/* The server became a replica under us (a failover): this connection
		 * is done, and the pool drops it; the reply is still the caller's. */
		conn_fail(conn, REDIS_ERR_OTHER, "%s", "the server is a replica now (READONLY)");
	return REDIS_OK;
}

int dlock_redis_read_some(struct redis_conn *conn)
{
	char buf[READ_CHUNK];
	if (conn->err)
		return REDIS_ERR;
	if (!conn->ssl) {
		ssize_t n = conn_recv(conn, buf, sizeof buf, 1);
		return n < 0 || (n > 0 && feed(conn, buf, (size_t)n) != REDIS_OK) ? REDIS_ERR : REDIS_OK;
	}
	/* TLS: what the socket showed may be part of a record, or a record with
	 * no data (a session ticket); read without blocking until nothing is left
	 * (SSL_read until it wants the socket again: what OpenSSL holds decrypted
	 * is read too, so nothing waits in it while the loop sleeps). */
	int flags = conn->nonblocking ? 0 : fcntl(conn->fd, F_GETFL);
	if (flags < 0 || (!conn->nonblocking && fcntl(conn->fd, F_SETFL, flags | O_NONBLOCK) != 0)) {
		conn_fail_errno(conn, errno);
		return REDIS_ERR;
	}
	conn->read_wants_write = 0;
	ssize_t n;
	while ((n = conn_recv(conn, buf, sizeof buf, 1)) > 0)
		if (feed(conn, buf, (size_t)n) != REDIS_OK)
			break;
	if (!conn->nonblocking && fcntl(conn->fd, F_SETFL, flags) != 0)
		conn_fail_errno(conn, errno);
	return conn->err ? REDIS_ERR : REDIS_OK;
}

int dlock_redis_send_some(struct redis_conn *conn, size_t max, uint64_t *sent)
{
	size_t done = 0, upto = max < conn->outlen ? max : conn->outlen;
	while (!conn->err && done < upto) {
		ssize_t n = conn_send(conn, conn->out + done, upto - done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (done > 0) { /* what is left moves to the front: a TLS write retried may take a moved buffer */
		memmove(conn->out, conn->out + done, conn->outlen - done);
		conn->outlen -= done;
		*sent += done;
	}
	return conn->err ? REDIS_ERR : REDIS_OK;
}

int dlock_redis_get_reply(struct redis_conn *conn, void **reply)
{
	char buf[READ_CHUNK];
	if (dlock_redis_buffered_reply(conn, reply) != REDIS_OK)
		return REDIS_ERR;
	if (*reply)
		return REDIS_OK;
	if (dlock_redis_flush(conn) != REDIS_OK)
		return REDIS_ERR;
	while (!*reply) {
		ssize_t n = conn_recv(conn, buf, sizeof buf, 0);
		if (n < 0 || feed(conn, buf, (size_t)n) != REDIS_OK || dlock_redis_buffered_reply(conn, reply) != REDIS_OK)
			return REDIS_ERR;
	}
	return REDIS_OK;
}

redisReply *dlock_redis_command_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len)
{
	void *reply = NULL;
	if (dlock_redis_append_argv(conn, argc, argv, len) != REDIS_OK || dlock_redis_get_reply(conn, &reply) != REDIS_OK)
		return NULL;
	return reply;
}

redisReply *dlock_redis_command(struct redis_conn *conn, const struct redis_args *a)
{
	return dlock_redis_command_argv(conn, a->argc, a->argv, a->len);
}
