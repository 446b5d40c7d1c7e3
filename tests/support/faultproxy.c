/*
 * The TCP fault proxy (see faultproxy.h).
 *
 * One thread polls the listening socket, a wake-up eventfd and both sockets
 * of every connection.  Each direction of a connection (a "flow") keeps the
 * chunks read from its source until they are due (latency) and not
 * blackholed, then writes them to its destination.  An EOF is passed on as
 * a half-close once the flow has drained, so a client that closes its side
 * looks the same to the server as without the proxy.
 *
 * Locking: `mu` guards everything but the poll() itself.  Control functions
 * change the settings under `mu`, then wait until the thread has gone once
 * through its apply step (cmd_gen/done_gen), so a fault is in place when
 * they return.  Only the thread closes connection sockets: closing a
 * descriptor another thread is polling could let a new socket reuse its
 * number under poll's feet.
 */
#include "faultproxy.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_MAX 16384
/* Bytes a flow holds before it stops reading (then the sender's buffers fill). */
#define HOLD_MAX (1u << 20)

struct chunk {
	struct chunk *next;
	int64_t due_ns;
	size_t len, off;
	char data[];
};

/* One direction of a connection: flow[0] client -> server, flow[1] server -> client. */
struct flow {
	struct chunk *head, *tail;
	size_t queued;
	int eof;         /* the source sent its FIN */
	int shut;        /* and it was passed on to the destination */
	int cut;         /* a cut is armed: at most `budget` more bytes */
	uint64_t budget;
};

struct conn {
	struct conn *next;
	int fd[2];       /* [0] the client's side, [1] the server's */
	int connecting;  /* the connect to the server is in progress */
	int dead;        /* closed; freed at the end of the loop iteration */
	struct flow flow[2];
	int pi[2];       /* index of fd[k] in the poll array, -1 if not polled */
	short ev[2];     /* events asked for */
};

struct faultproxy {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	pthread_t thread;
	int lfd, wakefd, port;
	struct sockaddr_in target;

	/* Settings, read by the thread. */
	int64_t latency_ns[2];
	int blackhole[2];
	int cut_on[2];
	uint64_t cut_bytes[2];
	int cut_once;
	int refusing;

	/* Commands. */
	uint64_t cmd_gen, done_gen;
	int reset_pending;
	int stop;

	struct conn *conns;
	faultproxy_stats st; /* accepted, reset, failed, bytes; open and held are counted on demand */
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------ connections */

static void flow_clear(struct flow *f)
{
	while (f->head) {
		struct chunk *ch = f->head;
		f->head = ch->next;
		free(ch);
	}
	f->tail = NULL;
	f->queued = 0;
}

static void conn_close(struct conn *c, int rst)
{
	for (int k = 0; k < 2; k++) {
		if (c->fd[k] < 0)
			continue;
		if (rst) { /* SO_LINGER 0: close() sends an RST instead of a FIN */
			struct linger lg = { 1, 0 };
			setsockopt(c->fd[k], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		}
		close(c->fd[k]);
		c->fd[k] = -1;
	}
	flow_clear(&c->flow[0]);
	flow_clear(&c->flow[1]);
	c->dead = 1;
}

static void conn_reset(faultproxy *px, struct conn *c)
{
	conn_close(c, 1);
	px->st.reset++;
}

static void arm_cut(faultproxy *px, struct conn *c)
{
	for (int d = 0; d < 2; d++) {
		c->flow[d].cut = px->cut_on[d];
		c->flow[d].budget = px->cut_bytes[d];
	}
}

static void set_nodelay(int fd)
{
	int one = 1; /* forward each chunk at once: latency is ours to add */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void accept_all(faultproxy *px)
{
	for (;;) {
		int cfd = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (cfd < 0)
			return; /* EAGAIN, or the listener was just paused */
		struct conn *c = calloc(1, sizeof *c);
		int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (!c || sfd < 0) {
			free(c);
			if (sfd >= 0)
				close(sfd);
			close(cfd);
			px->st.failed++;
			continue;
		}
		px->st.accepted++;
		c->fd[0] = cfd;
		c->fd[1] = sfd;
		c->pi[0] = c->pi[1] = -1;
		set_nodelay(cfd);
		set_nodelay(sfd);
		arm_cut(px, c);
		c->next = px->conns;
		px->conns = c;
		if (connect(sfd, (struct sockaddr *)&px->target, sizeof px->target) == 0)
			continue;
		if (errno == EINPROGRESS) {
			c->connecting = 1;
		} else {
			px->st.failed++;
			conn_close(c, 1); /* the client sees its connection reset */
		}
	}
}

/* ------------------------------------------------------------ forwarding */

static void read_flow(faultproxy *px, struct conn *c, int d)
{
	struct flow *f = &c->flow[d];
	char buf[CHUNK_MAX];
	ssize_t n = read(c->fd[d], buf, sizeof buf);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) { /* the peer reset: so does the proxy, to the other side */
		conn_close(c, 1);
		return;
	}
	if (n == 0) {
		f->eof = 1;
		return;
	}
	struct chunk *ch = malloc(sizeof *ch + (size_t)n);
	if (!ch) {
		conn_close(c, 1);
		return;
	}
	ch->next = NULL;
	ch->due_ns = now_ns() + px->latency_ns[d];
	ch->len = (size_t)n;
	ch->off = 0;
	memcpy(ch->data, buf, (size_t)n);
	if (f->tail)
		f->tail->next = ch;
	else
		f->head = ch;
	f->tail = ch;
	f->queued += (size_t)n;
}

/* A cut fired: reset this connection; a one-shot cut is then disarmed everywhere. */
static void fire_cut(faultproxy *px, struct conn *c)
{
	conn_reset(px, c);
	if (!px->cut_once)
		return;
	px->cut_on[0] = px->cut_on[1] = 0;
	px->cut_once = 0;
	for (struct conn *o = px->conns; o; o = o->next)
		o->flow[0].cut = o->flow[1].cut = 0;
}

static void write_flow(faultproxy *px, struct conn *c, int d)
{
	struct flow *f = &c->flow[d];
	int64_t now = now_ns();
	while (f->head && f->head->due_ns <= now && !px->blackhole[d]) {
		struct chunk *ch = f->head;
		size_t len = ch->len - ch->off;
		if (f->cut && f->budget == 0) {
			fire_cut(px, c);
			return;
		}
		if (f->cut && len > f->budget)
			len = (size_t)f->budget;
		ssize_t n = send(c->fd[1 - d], ch->data + ch->off, len, MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0) {
			conn_close(c, 1);
			return;
		}
		ch->off += (size_t)n;
		f->queued -= (size_t)n;
		px->st.bytes[d] += (uint64_t)n;
		if (f->cut)
			f->budget -= (uint64_t)n;
		if (ch->off == ch->len) {
			f->head = ch->next;
			if (!f->head)
				f->tail = NULL;
			free(ch);
		}
	}
}

static void connected(faultproxy *px, struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof err;
	if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
		px->st.failed++;
		conn_close(c, 1);
		return;
	}
	c->connecting = 0;
}

static void handle(faultproxy *px, struct conn *c, const struct pollfd *pfd)
{
	short rev[2] = { 0, 0 };
	for (int k = 0; k < 2; k++)
		if (c->pi[k] >= 0)
			rev[k] = pfd[c->pi[k]].revents;
	if (c->connecting && rev[1])
		connected(px, c);
	for (int d = 0; d < 2 && !c->dead; d++) {
		if ((c->ev[d] & POLLIN) && (rev[d] & (POLLIN | POLLHUP | POLLERR)))
			read_flow(px, c, d);
		if (!c->dead && !c->connecting)
			write_flow(px, c, d);
	}
	for (int d = 0; d < 2 && !c->dead; d++) {
		struct flow *f = &c->flow[d];
		if (f->eof && !f->head && !f->shut && !c->connecting) {
			shutdown(c->fd[1 - d], SHUT_WR); /* pass the FIN on */
			f->shut = 1;
		}
	}
	if (!c->dead && c->flow[0].shut && c->flow[1].shut)
		conn_close(c, 0);
}

/* ------------------------------------------------------------ the loop */

/* Poll events of `c`; the earliest time a held chunk falls due goes into *due. */
static void conn_events(faultproxy *px, struct conn *c, int64_t now, int64_t *due)
{
	c->ev[0] = c->ev[1] = 0;
	if (c->connecting)
		c->ev[1] |= POLLOUT;
	for (int d = 0; d < 2; d++) {
		struct flow *f = &c->flow[d];
		if (!f->eof && f->queued < HOLD_MAX && !(c->connecting && d == 1))
			c->ev[d] |= POLLIN;
		if (!f->head || px->blackhole[d] || c->connecting)
			continue;
		if (f->head->due_ns <= now)
			c->ev[1 - d] |= POLLOUT;
		else if (f->head->due_ns < *due)
			*due = f->head->due_ns;
	}
}

static void apply_locked(faultproxy *px)
{
	if (px->reset_pending) {
		for (struct conn *c = px->conns; c; c = c->next)
			if (!c->dead)
				conn_reset(px, c);
		px->reset_pending = 0;
	}
	px->done_gen = px->cmd_gen;
	pthread_cond_broadcast(&px->cond);
}

static void reap_locked(faultproxy *px)
{
	struct conn **pp = &px->conns;
	while (*pp) {
		struct conn *c = *pp;
		if (c->dead) {
			*pp = c->next;
			free(c);
		} else {
			pp = &c->next;
		}
	}
}

static void *loop(void *arg)
{
	faultproxy *px = arg;
	struct pollfd *pfd = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&px->mu);
	while (!px->stop) {
		apply_locked(px);
		size_t n = 2;
		for (struct conn *c = px->conns; c; c = c->next)
			n += 2;
		if (n > cap) {
			struct pollfd *p = realloc(pfd, n * sizeof *p);
			if (!p)
				break;
			pfd = p;
			cap = n;
		}
		int64_t now = now_ns(), due = INT64_MAX;
		pfd[0] = (struct pollfd){ .fd = px->wakefd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = px->refusing ? -1 : px->lfd, .events = POLLIN };
		n = 2;
		for (struct conn *c = px->conns; c; c = c->next) {
			conn_events(px, c, now, &due);
			for (int k = 0; k < 2; k++) {
				/* Nothing asked for: leave it out, or a hung-up socket would wake poll forever. */
				c->pi[k] = c->ev[k] ? (int)n : -1;
				if (c->ev[k])
					pfd[n++] = (struct pollfd){ .fd = c->fd[k], .events = c->ev[k] };
			}
		}
		int timeout = due == INT64_MAX ? -1 : (int)((due - now + 999999) / 1000000);
		pthread_mutex_unlock(&px->mu);
		poll(pfd, n, timeout);
		pthread_mutex_lock(&px->mu);
		if (pfd[0].revents) {
			uint64_t v;
			if (read(px->wakefd, &v, sizeof v) < 0 && errno != EAGAIN)
				break;
		}
		/* Every connection of this round; those accepted below wait for the next. */
		for (struct conn *c = px->conns; c; c = c->next)
			if (!c->dead)
				handle(px, c, pfd);
		if (pfd[1].revents && !px->refusing)
			accept_all(px);
		reap_locked(px);
	}
	for (struct conn *c = px->conns; c; c = c->next)
		if (!c->dead)
			conn_close(c, 0);
	reap_locked(px);
	px->done_gen = px->cmd_gen;
	pthread_cond_broadcast(&px->cond);
	pthread_mutex_unlock(&px->mu);
	free(pfd);
	return NULL;
}

/* ------------------------------------------------------------ control */

/* Wake the thread and wait until it has applied everything set so far.  mu held. */
static void command_locked(faultproxy *px)
{
	uint64_t gen = ++px->cmd_gen, one = 1;
	if (write(px->wakefd, &one, sizeof one) < 0 && errno != EAGAIN)
		return;
	while (px->done_gen < gen && !px->stop)
		pthread_cond_wait(&px->cond, &px->mu);
}

static int resolve(const char *host, int port, struct sockaddr_in *out)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
		errno = EINVAL;
		return -1;
	}
	memcpy(out, res->ai_addr, sizeof *out);
	out->sin_port = htons((uint16_t)port);
	freeaddrinfo(res);
	return 0;
}

/* A socket bound to 127.0.0.1:port (0: any free port), listening. */
static int listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
		                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/*
 * Listen on a free loopback port, bound by number: only a port bound
 * explicitly stays bound through faultproxy_refuse() (the kernel releases
 * an automatically chosen one when the socket stops listening).  So pick a
 * port with bind(0), then bind it by number (another process may take it
 * in between: try again).
 */
static int listen_loopback(int *port)
{
	for (int tries = 0; tries < 20; tries++) {
		struct sockaddr_in a;
		socklen_t len = sizeof a;
		int probe = listen_on(0);
		if (probe < 0)
			return -1;
		int rc = getsockname(probe, (struct sockaddr *)&a, &len);
		close(probe);
		if (rc != 0)
			return -1;
		int fd = listen_on(ntohs(a.sin_port));
		if (fd >= 0) {
			*port = ntohs(a.sin_port);
			return fd;
		}
		if (errno != EADDRINUSE)
			return -1;
	}
	return -1;
}

faultproxy *faultproxy_start(const char *host, int port)
{
	faultproxy *px = calloc(1, sizeof *px);
	if (!px)
		return NULL;
	px->lfd = px->wakefd = -1;
	if (resolve(host, port, &px->target) != 0)
		goto fail;
	px->lfd = listen_loopback(&px->port);
	px->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (px->lfd < 0 || px->wakefd < 0)
		goto fail;
	pthread_mutex_init(&px->mu, NULL);
	pthread_cond_init(&px->cond, NULL);
	int rc = pthread_create(&px->thread, NULL, loop, px);
	if (rc == 0)
		return px;
	pthread_cond_destroy(&px->cond);
	pthread_mutex_destroy(&px->mu);
	errno = rc;
fail:;
	int e = errno;
	if (px->lfd >= 0)
		close(px->lfd);
	if (px->wakefd >= 0)
		close(px->wakefd);
	free(px);
	errno = e;
	return NULL;
}

void faultproxy_stop(faultproxy *px)
{
	if (!px)
		return;
	uint64_t one = 1;
	pthread_mutex_lock(&px->mu);
	px->stop = 1;
	if (write(px->wakefd, &one, sizeof one) < 0) {
		/* EAGAIN only: the counter is full, so the thread wakes anyway */
	}
	pthread_mutex_unlock(&px->mu);
	pthread_join(px->thread, NULL);
	close(px->lfd);
	close(px->wakefd);
	pthread_cond_destroy(&px->cond);
	pthread_mutex_destroy(&px->mu);
	free(px);
}

int faultproxy_port(const faultproxy *px)
{
	return px->port;
}

void faultproxy_pass(faultproxy *px)
{
	pthread_mutex_lock(&px->mu);
	for (int d = 0; d < 2; d++) {
		px->latency_ns[d] = 0;
		px->blackhole[d] = 0;
		px->cut_on[d] = 0;
	}
	px->cut_once = 0;
	for (struct conn *c = px->conns; c; c = c->next)
		c->flow[0].cut = c->flow[1].cut = 0;
	pthread_mutex_unlock(&px->mu);
	faultproxy_refuse(px, 0); /* also waits for the thread */
}

void faultproxy_latency(faultproxy *px, int dirs, int64_t ms)
{
	pthread_mutex_lock(&px->mu);
	for (int d = 0; d < 2; d++)
		if (dirs & (1 << d))
			px->latency_ns[d] = ms * 1000000;
	command_locked(px);
	pthread_mutex_unlock(&px->mu);
}

void faultproxy_blackhole(faultproxy *px, int dirs)
{
	pthread_mutex_lock(&px->mu);
	for (int d = 0; d < 2; d++)
		if (dirs & (1 << d))
			px->blackhole[d] = 1;
	command_locked(px);
	pthread_mutex_unlock(&px->mu);
}

void faultproxy_reset(faultproxy *px)
{
	pthread_mutex_lock(&px->mu);
	px->reset_pending = 1;
	command_locked(px);
	pthread_mutex_unlock(&px->mu);
}

void faultproxy_cut_after(faultproxy *px, int dirs, uint64_t nbytes, int once)
{
	pthread_mutex_lock(&px->mu);
	for (int d = 0; d < 2; d++) {
		if (!(dirs & (1 << d)))
			continue;
		px->cut_on[d] = 1;
		px->cut_bytes[d] = nbytes;
	}
	px->cut_once = once;
	for (struct conn *c = px->conns; c; c = c->next)
		if (!c->dead)
			arm_cut(px, c);
	command_locked(px);
	pthread_mutex_unlock(&px->mu);
}

/*
 * Refusing keeps the port: on Linux, shutdown(SHUT_RD) takes a listening
 * socket out of the LISTEN state (connects get an RST, queued ones are
 * reset) while a port bound by number stays bound, and listen() puts it
 * back.
 */
int faultproxy_refuse(faultproxy *px, int on)
{
	int rc = 0, e = 0;
	pthread_mutex_lock(&px->mu);
	if (on && !px->refusing)
		rc = shutdown(px->lfd, SHUT_RD);
	else if (!on && px->refusing)
		rc = listen(px->lfd, 128);
	e = errno;
	if (rc == 0)
		px->refusing = on;
	command_locked(px);
	pthread_mutex_unlock(&px->mu);
	errno = e;
	return rc;
}

void faultproxy_get_stats(faultproxy *px, faultproxy_stats *out)
{
	pthread_mutex_lock(&px->mu);
	*out = px->st;
	out->open = out->held[0] = out->held[1] = 0;
	for (struct conn *c = px->conns; c; c = c->next) {
		if (c->dead)
			continue;
		out->open++;
		out->held[0] += c->flow[0].queued;
		out->held[1] += c->flow[1].queued;
	}
	pthread_mutex_unlock(&px->mu);
}
