/*
 * The fault proxy of tests/support/faultproxy.c, against an echo server in
 * this process: every fault does what the header says, to the byte, and
 * nothing else.
 */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "faultproxy.h"
#include "testsupport.h"

#define AWAIT_MS 5000
#define SLACK_MS 1000
#define ECHO_MAX 32

/* ------------------------------------------------------------ echo server */

struct echo {
	int lfd, port;
	pthread_t thread;
	atomic_int stop;
	atomic_ullong bytes_in;
	atomic_int eofs, gone; /* connections that ended with an EOF; that ended at all */
};

static void *echo_main(void *arg)
{
	struct echo *e = arg;
	struct pollfd p[ECHO_MAX + 1];
	int n = 1;
	p[0] = (struct pollfd){ .fd = e->lfd, .events = POLLIN };
	while (!atomic_load(&e->stop)) {
		if (poll(p, (nfds_t)n, 20) <= 0) /* the timeout only looks at `stop` */
			continue;
		for (int i = n - 1; i >= 1; i--) {
			if (!p[i].revents)
				continue;
			char buf[8192];
			ssize_t r = read(p[i].fd, buf, sizeof buf);
			if (r > 0) {
				atomic_fetch_add(&e->bytes_in, (unsigned long long)r);
				if (send(p[i].fd, buf, (size_t)r, MSG_NOSIGNAL) == r)
					continue;
			}
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r == 0)
				atomic_fetch_add(&e->eofs, 1);
			atomic_fetch_add(&e->gone, 1);
			close(p[i].fd);
			p[i] = p[--n];
		}
		if ((p[0].revents & POLLIN) && n <= ECHO_MAX) {
			int fd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				p[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
		}
	}
	for (int i = 1; i < n; i++)
		close(p[i].fd);
	return NULL;
}

static struct echo *echo_start(void)
{
	struct echo *e = calloc(1, sizeof *e);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	CU_ASSERT_PTR_NOT_NULL_FATAL(e);
	e->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CU_ASSERT_FATAL(e->lfd >= 0 && bind(e->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(e->lfd, 64) == 0);
	getsockname(e->lfd, (struct sockaddr *)&a, &len);
	e->port = ntohs(a.sin_port);
	CU_ASSERT_FATAL(pthread_create(&e->thread, NULL, echo_main, e) == 0);
	return e;
}

static void echo_stop(struct echo *e)
{
	atomic_store(&e->stop, 1);
	pthread_join(e->thread, NULL);
	close(e->lfd);
	free(e);
}

/* ------------------------------------------------------------ client side */

static int dial(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
		                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		int err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
	CU_ASSERT_EQUAL((size_t)send(fd, buf, len, MSG_NOSIGNAL), len);
}

/*
 * Read up to `len` bytes within `ms`: returns the count read; *err gets 0,
 * the errno of a failed read, or -1 for an EOF.
 */
static size_t recv_within(int fd, void *buf, size_t len, int64_t ms, int *err)
{
	size_t got = 0;
	int64_t end = dlock_test_now_ms() + ms;
	*err = 0;
	while (got < len) {
		int64_t left = end - dlock_test_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		ssize_t r = recv(fd, (char *)buf + got, len - got, 0);
		if (r <= 0) {
			*err = r == 0 ? -1 : errno;
			break;
		}
		got += (size_t)r;
	}
	return got;
}

static faultproxy *proxy_to(int port)
{
	faultproxy *px = faultproxy_start("127.0.0.1", port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(px);
	return px;
}

struct held_cond {
	faultproxy *px;
	int dir;
	uint64_t want;
};

static int held_is(void *arg)
{
	struct held_cond *h = arg;
	faultproxy_stats s;
	faultproxy_get_stats(h->px, &s);
	return s.held[h->dir] == h->want;
}

static int open_is(void *arg)
{
	struct held_cond *h = arg; /* `want` open connections */
	faultproxy_stats s;
	faultproxy_get_stats(h->px, &s);
	return s.open == h->want;
}

/* ------------------------------------------------------------ tests */

static void test_pass(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int fd = dial(faultproxy_port(px));
	CU_ASSERT_FATAL(fd >= 0);
	size_t n = 200000;
	char *out = malloc(n), *in = malloc(n);
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(i * 7 + i / 251);
	send_all(fd, out, n);
	int err;
	CU_ASSERT_EQUAL(recv_within(fd, in, n, AWAIT_MS, &err), n);
	CU_ASSERT(memcmp(out, in, n) == 0);
	faultproxy_stats s;
	faultproxy_get_stats(px, &s);
	CU_ASSERT_EQUAL(s.accepted, 1);
	CU_ASSERT_EQUAL(s.open, 1);
	CU_ASSERT_EQUAL(s.bytes[0], n);
	CU_ASSERT_EQUAL(s.bytes[1], n);
	/* A half-close travels through: the server sees EOF, closes, and so do we. */
	shutdown(fd, SHUT_WR);
	CU_ASSERT_EQUAL(recv_within(fd, in, 1, AWAIT_MS, &err), 0);
	CU_ASSERT_EQUAL(err, -1);
	struct held_cond none = { px, 0, 0 };
	CU_ASSERT(dlock_test_await(open_is, &none, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&e->eofs), 1);
	close(fd);
	free(out);
	free(in);
	faultproxy_stop(px);
	echo_stop(e);
}

static void test_latency(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int fd = dial(faultproxy_port(px));
	char buf[8];
	int err;
	faultproxy_latency(px, FP_UP, 150);
	faultproxy_latency(px, FP_DOWN, 100);
	int64_t t0 = dlock_test_now_ms();
	send_all(fd, "latency!", 8);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 8, AWAIT_MS, &err), 8);
	int64_t rtt = dlock_test_now_ms() - t0;
	printf("\n    round trip with 150 + 100 ms: %lld ms", (long long)rtt);
	CU_ASSERT(rtt >= 250 && rtt < 250 + SLACK_MS);
	faultproxy_pass(px);
	t0 = dlock_test_now_ms();
	send_all(fd, "fast....", 8);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 8, AWAIT_MS, &err), 8);
	CU_ASSERT(dlock_test_now_ms() - t0 < 100);
	close(fd);
	faultproxy_stop(px);
	echo_stop(e);
}

static void test_blackhole(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int fd = dial(faultproxy_port(px));
	char buf[8];
	int err;
	/* Replies: the server answers, the proxy holds the answer, the socket stays open. */
	faultproxy_blackhole(px, FP_DOWN);
	send_all(fd, "ping", 4);
	struct held_cond down = { px, 1, 4 };
	CU_ASSERT(dlock_test_await(held_is, &down, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&e->bytes_in), 4);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 4, 200, &err), 0); /* nothing, and no error either */
	CU_ASSERT_EQUAL(err, 0);
	faultproxy_pass(px); /* the partition heals: TCP delivers what it held */
	CU_ASSERT_EQUAL(recv_within(fd, buf, 4, AWAIT_MS, &err), 4);
	CU_ASSERT(memcmp(buf, "ping", 4) == 0);
	/* Requests: they never reach the server; new connections are blackholed too. */
	faultproxy_blackhole(px, FP_BOTH);
	int fd2 = dial(faultproxy_port(px));
	CU_ASSERT_FATAL(fd2 >= 0);
	send_all(fd, "abc", 3);
	send_all(fd2, "de", 2);
	struct held_cond up = { px, 0, 5 };
	CU_ASSERT(dlock_test_await(held_is, &up, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&e->bytes_in), 4);
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 3, AWAIT_MS, &err), 3);
	CU_ASSERT_EQUAL(recv_within(fd2, buf, 2, AWAIT_MS, &err), 2);
	close(fd);
	close(fd2);
	faultproxy_stop(px);
	echo_stop(e);
}

static int server_lost_two(void *arg)
{
	return atomic_load(&((struct echo *)arg)->gone) == 2;
}

static void test_reset(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int a = dial(faultproxy_port(px)), b = dial(faultproxy_port(px));
	char buf[4];
	int err;
	send_all(a, "a", 1);
	send_all(b, "b", 1);
	CU_ASSERT_EQUAL(recv_within(a, buf, 1, AWAIT_MS, &err), 1);
	CU_ASSERT_EQUAL(recv_within(b, buf, 1, AWAIT_MS, &err), 1);
	faultproxy_blackhole(px, FP_DOWN);
	send_all(a, "x", 1); /* held, then dropped by the reset */
	faultproxy_reset(px);
	CU_ASSERT_EQUAL(recv_within(a, buf, 1, AWAIT_MS, &err), 0);
	CU_ASSERT_EQUAL(err, ECONNRESET);
	CU_ASSERT_EQUAL(recv_within(b, buf, 1, AWAIT_MS, &err), 0);
	CU_ASSERT_EQUAL(err, ECONNRESET);
	CU_ASSERT(dlock_test_await(server_lost_two, e, AWAIT_MS)); /* the server got an RST as well, */
	CU_ASSERT_EQUAL(atomic_load(&e->eofs), 0);                  /* not a FIN */
	faultproxy_stats s;
	faultproxy_get_stats(px, &s);
	CU_ASSERT_EQUAL(s.reset, 2);
	CU_ASSERT_EQUAL(s.open, 0);
	CU_ASSERT_EQUAL(s.held[1], 0);
	close(a);
	close(b);
	faultproxy_pass(px);
	a = dial(faultproxy_port(px)); /* and new connections work */
	send_all(a, "y", 1);
	CU_ASSERT_EQUAL(recv_within(a, buf, 1, AWAIT_MS, &err), 1);
	close(a);
	faultproxy_stop(px);
	echo_stop(e);
}

static void test_cut_after(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int fd = dial(faultproxy_port(px));
	char out[100], in[100];
	int err;
	memset(out, 'c', sizeof out);
	faultproxy_cut_after(px, FP_DOWN, 10, 1);
	send_all(fd, out, sizeof out);
	CU_ASSERT_EQUAL(recv_within(fd, in, sizeof in, AWAIT_MS, &err), 10);
	CU_ASSERT_EQUAL(err, ECONNRESET);
	close(fd);
	/* Once: the next connection is whole. */
	fd = dial(faultproxy_port(px));
	send_all(fd, out, sizeof out);
	CU_ASSERT_EQUAL(recv_within(fd, in, sizeof in, AWAIT_MS, &err), sizeof in);
	close(fd);
	/* Up, on every connection until pass: the server gets 5 bytes of each. */
	faultproxy_cut_after(px, FP_UP, 5, 0);
	faultproxy_stats s;
	faultproxy_get_stats(px, &s);
	uint64_t base = s.bytes[0];
	for (int i = 0; i < 2; i++) {
		fd = dial(faultproxy_port(px));
		send_all(fd, out, sizeof out);
		recv_within(fd, in, sizeof in, AWAIT_MS, &err); /* the echo of the 5 may or may not beat the RST */
		CU_ASSERT_EQUAL(err, ECONNRESET);
		close(fd);
	}
	faultproxy_get_stats(px, &s);
	CU_ASSERT_EQUAL(s.bytes[0] - base, 10); /* the server may drop what it had not read at the RST */
	CU_ASSERT_EQUAL(s.reset, 3);
	faultproxy_stop(px);
	echo_stop(e);
}

static void test_refuse(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int kept = dial(faultproxy_port(px));
	char buf[4];
	int err;
	send_all(kept, "k", 1); /* accepted by the proxy, not just queued by the kernel */
	CU_ASSERT_EQUAL(recv_within(kept, buf, 1, AWAIT_MS, &err), 1);
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 1), 0);
	errno = 0;
	CU_ASSERT_EQUAL(dial(faultproxy_port(px)), -1);
	CU_ASSERT_EQUAL(errno, ECONNREFUSED);
	send_all(kept, "k", 1); /* open connections are not touched */
	CU_ASSERT_EQUAL(recv_within(kept, buf, 1, AWAIT_MS, &err), 1);
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 0), 0); /* listening again, on the same port */
	int fd = dial(faultproxy_port(px));
	CU_ASSERT_FATAL(fd >= 0);
	send_all(fd, "n", 1);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 1, AWAIT_MS, &err), 1);
	close(fd);
	close(kept);
	faultproxy_stop(px);
	echo_stop(e);
}

/*
 * A target where nothing listens: the client's connection is reset at once.
 * The port stays bound, never listening, for the whole case: a port merely
 * freed may be taken again (by a listener, or as the local port of the
 * proxy's own connect to it, which then connects to itself).
 */
static void test_target_down(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int held = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CU_ASSERT_FATAL(held >= 0 && bind(held, (struct sockaddr *)&a, sizeof a) == 0 &&
	                getsockname(held, (struct sockaddr *)&a, &len) == 0);
	int dead = ntohs(a.sin_port);
	faultproxy *px = proxy_to(dead);
	int fd = dial(faultproxy_port(px));
	char buf[4];
	int err;
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 1, AWAIT_MS, &err), 0);
	CU_ASSERT(err == ECONNRESET || err == -1);
	faultproxy_stats s;
	faultproxy_get_stats(px, &s);
	CU_ASSERT_EQUAL(s.failed, 1);
	close(fd);
	faultproxy_stop(px);
	close(held);
}

static void test_cloexec(void)
{
	char before[1024] = { 0 };
	for (int fd = 0; fd < 1024; fd++)
		before[fd] = fcntl(fd, F_GETFD) >= 0;
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	int fd = dial(faultproxy_port(px));
	char buf[2];
	int err;
	send_all(fd, "z", 1);
	CU_ASSERT_EQUAL(recv_within(fd, buf, 1, AWAIT_MS, &err), 1); /* both proxy sockets exist now */
	int fresh = 0;
	for (int i = 0; i < 1024; i++) {
		int flags = fcntl(i, F_GETFD);
		if (flags < 0 || before[i])
			continue;
		fresh++;
		CU_ASSERT(flags & FD_CLOEXEC);
	}
	CU_ASSERT(fresh >= 6); /* listener, eventfd, two sockets; the echo server's two */
	close(fd);
	faultproxy_stop(px);
	echo_stop(e);
}

/* Control calls from another thread while data flows: nothing is lost or reordered. */
struct toggler {
	faultproxy *px;
	atomic_int stop;
};

static void *toggle_main(void *arg)
{
	struct toggler *t = arg;
	for (int i = 0; !atomic_load(&t->stop); i++) {
		if (i % 3 == 0)
			faultproxy_latency(t->px, FP_BOTH, i % 2);
		else if (i % 3 == 1)
			faultproxy_blackhole(t->px, i % 2 ? FP_UP : FP_DOWN);
		else
			faultproxy_pass(t->px);
		faultproxy_stats s;
		faultproxy_get_stats(t->px, &s);
	}
	faultproxy_pass(t->px);
	return NULL;
}

static void test_control_threads(void)
{
	struct echo *e = echo_start();
	faultproxy *px = proxy_to(e->port);
	struct toggler t = { .px = px };
	pthread_t th;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, toggle_main, &t) == 0);
	int fd = dial(faultproxy_port(px));
	int ok = 1, err;
	for (int i = 0; i < 300 && ok; i++) {
		char out[64], in[64];
		for (size_t k = 0; k < sizeof out; k++)
			out[k] = (char)(i + k);
		send_all(fd, out, sizeof out);
		ok = recv_within(fd, in, sizeof in, AWAIT_MS, &err) == sizeof in && memcmp(in, out, sizeof in) == 0;
	}
	CU_ASSERT(ok);
	atomic_store(&t.stop, 1);
	pthread_join(th, NULL);
	close(fd);
	faultproxy_stop(px);
	echo_stop(e);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("faultproxy", NULL, NULL);
	CU_add_test(s, "pass: bytes intact, counted, half-close passed on", test_pass);
	CU_add_test(s, "latency per direction", test_latency);
	CU_add_test(s, "blackhole holds bytes, sockets stay open, pass delivers", test_blackhole);
	CU_add_test(s, "reset: RST to both sides", test_reset);
	CU_add_test(s, "cut after N bytes, once or until pass", test_cut_after);
	CU_add_test(s, "refuse new connections, keep the port", test_refuse);
	CU_add_test(s, "target down: the client is reset", test_target_down);
	CU_add_test(s, "every descriptor is close-on-exec", test_cloexec);
	CU_add_test(s, "control from another thread while data flows", test_control_threads);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
