/*
 * A TCP fault proxy for tests: it listens on a free loopback port, forwards
 * every connection to a target host:port, and on command breaks the path in
 * the ways a network breaks: latency, a blackhole (bytes stop flowing but
 * both sockets stay open, so nobody sees an error), a reset of every
 * connection, a cut after N bytes, and refused connections.
 *
 * A test points a client at faultproxy_port() instead of the server.  One
 * thread per proxy runs a poll loop over non-blocking sockets; every
 * descriptor is close-on-exec.  The control functions may be called from
 * any thread: each one returns once the proxy thread has applied it, so a
 * test can rely on the fault being in place when the call returns.
 *
 * The proxy acknowledges TCP on both sides itself, so it cannot test TCP
 * keepalives; what a blackhole tests is the library's own heartbeats and
 * timeouts, and the server's.
 *
 * Directions: FP_UP is client -> server (requests), FP_DOWN is server ->
 * client (replies); FP_BOTH is both.  Faults set with a direction apply to
 * the connections open now and to the ones accepted later, until
 * faultproxy_pass() clears them.
 */
#ifndef DLOCK_FAULTPROXY_H
#define DLOCK_FAULTPROXY_H

#include <stdint.h>

typedef struct faultproxy faultproxy;

enum { FP_UP = 1, FP_DOWN = 2, FP_BOTH = 3 };

typedef struct faultproxy_stats {
	uint64_t accepted;     /* connections accepted */
	uint64_t open;         /* connections open now */
	uint64_t reset;        /* connections reset by faultproxy_reset() or a cut */
	uint64_t failed;       /* connections to the target that could not be made */
	uint64_t bytes[2];     /* forwarded: [0] up, [1] down */
	uint64_t held[2];      /* read but not forwarded yet (latency, blackhole) */
} faultproxy_stats;

/**
 * Start a proxy to `host`:`port` (a numeric IPv4 address or "localhost").
 * Returns NULL with errno set when it cannot listen or start its thread.
 */
faultproxy *faultproxy_start(const char *host, int port);

/** Stop the thread and close every connection.  NULL is a no-op. */
void faultproxy_stop(faultproxy *px);

/** The loopback port the proxy listens on. */
int faultproxy_port(const faultproxy *px);

/**
 * Clear every fault: forward at full speed again, accept new connections.
 * Bytes held by a blackhole are delivered then, as TCP delivers what it
 * retransmits after a partition heals.
 */
void faultproxy_pass(faultproxy *px);

/** Delay every chunk read from now on in `dirs` by `ms` (0: no delay). */
void faultproxy_latency(faultproxy *px, int dirs, int64_t ms);

/**
 * Stop forwarding in `dirs`.  Bytes are still read (up to a bound, then the
 * sender's socket buffers fill) and held; the sockets stay open.
 */
void faultproxy_blackhole(faultproxy *px, int dirs);

/**
 * Reset every connection open now: both sockets are closed with SO_LINGER 0,
 * so the client and the server get an RST.  Held bytes are dropped.
 */
void faultproxy_reset(faultproxy *px);

/**
 * Forward at most `nbytes` more bytes in `dirs` on each connection (counted
 * from now, or from its accept), then reset the connection when one more
 * byte would pass.  `nbytes` 0: reset at the next byte.  With `once` set,
 * only the first connection cut is cut, and the fault clears itself.
 */
void faultproxy_cut_after(faultproxy *px, int dirs, uint64_t nbytes, int once);

/**
 * Refuse new connections (on: the kernel answers a connect with RST, as
 * for a port where nothing listens) or accept them again (off).
 * Connections already open are not touched.  Returns 0, or -1 with errno.
 */
int faultproxy_refuse(faultproxy *px, int on);

/** Copy the counters. */
void faultproxy_get_stats(faultproxy *px, faultproxy_stats *out);

#endif
