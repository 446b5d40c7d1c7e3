/*
 * Process side of the dlock command: the signalfd, the watcher thread that
 * makes blocking library calls interruptible, starting COMMAND in its own
 * process group and supervising it until it ends; and how dlock exits
 * after a library failure or COMMAND's end.
 *
 * dlock is multi-threaded (the library renews leases on a background
 * thread), so signals are never caught with handlers: they stay blocked in
 * every thread and are read from a signalfd by whichever loop is waiting.
 */
#include "dlock_run.h"

#include "dlock_out.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* Signals passed on to COMMAND's process group. */
static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/*
 * A cancel sent just before dlock_acquire() starts waiting has no effect,
 * so after a signal the watcher repeats it at this period until the
 * acquire returns.
 */
#define CANCEL_REPEAT_MS 50

int64_t cli_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------- signals */

int cli_signals_open(struct cli_signals *sig)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	int err;

	sigemptyset(&sig->set);
	for (size_t i = 0; i < sizeof forwarded_signals / sizeof forwarded_signals[0]; i++) {
		struct sigaction old;

		/* Ignored by whoever started us (nohup): leave it ignored. */
		if (sigaction(forwarded_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaddset(&sig->set, forwarded_signals[i]);
	}
	/* An inherited SIG_IGN for SIGCHLD would make the kernel reap COMMAND
	 * and lose its exit status. */
	sigaction(SIGCHLD, &dfl, NULL);
	sigaddset(&sig->set, SIGCHLD);
	err = pthread_sigmask(SIG_BLOCK, &sig->set, &sig->orig_mask);
	if (err != 0) {
		errno = err;
		return -1;
	}
	sig->fd = signalfd(-1, &sig->set, SFD_NONBLOCK | SFD_CLOEXEC);
	return sig->fd < 0 ? -1 : 0;
}

void cli_signals_close(struct cli_signals *sig)
{
	if (sig->fd >= 0)
		close(sig->fd);
	sig->fd = -1;
}

/* Next signal read from the signalfd, 0 when none is waiting. */
static int next_signal(int fd)
{
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof si) != (ssize_t)sizeof si)
		return 0;
	return (int)si.ssi_signo;
}

/* First signal other than SIGCHLD waiting in fd (SIGCHLDs are dropped). */
static int next_forwardable(int fd)
{
	int s;

	while ((s = next_signal(fd)) != 0)
		if (s != SIGCHLD)
			return s;
	return 0;
}

int cli_signals_pending(const struct cli_signals *sig)
{
	return next_forwardable(sig->fd);
}

static int poll_timeout(int64_t deadline);

int cli_wait_until(const struct cli_signals *sig, int64_t deadline)
{
	struct pollfd p = {.fd = sig->fd, .events = POLLIN};
	int s;

	for (;;) {
		if ((s = next_forwardable(sig->fd)) != 0)
			return s;
		if (cli_now_ms() >= deadline)
			return 0;
		if (poll(&p, 1, poll_timeout(deadline)) < 0 && errno != EINTR) {
			/* Cannot watch for signals: keep the bound all the same. */
			int64_t left = deadline - cli_now_ms();
			struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000L};

			while (left > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
			return 0;
		}
	}
}

/* ------------------------------------------------------------- watcher */

static void *watch_main(void *arg)
{
	struct cli_watch *w = arg;
	struct pollfd p[2] = {{.fd = w->done[0], .events = POLLIN}, {.fd = w->sig_fd, .events = POLLIN}};

	for (;;) {
		dlock_lock *lock;

		if (poll(p, 2, w->signo ? CANCEL_REPEAT_MS : -1) < 0 && errno != EINTR)
			return NULL;
		if (p[0].revents != 0)
			return NULL;
		if (w->signo == 0)
			w->signo = next_forwardable(w->sig_fd);
		if (w->signo == 0)
			continue;
		lock = atomic_load(&w->lock);
		if (lock == NULL)
			_exit(128 + w->signo); /* still opening: nothing is held */
		dlock_cancel(lock);
	}
}

int cli_watch_start(struct cli_watch *w, const struct cli_signals *sig)
{
	int err;

	w->sig_fd = sig->fd;
	w->signo = 0;
	atomic_init(&w->lock, NULL);
	if (pipe2(w->done, O_CLOEXEC) != 0)
		return -1;
	err = pthread_create(&w->thread, NULL, watch_main, w);
	if (err != 0) {
		close(w->done[0]);
		close(w->done[1]);
		errno = err;
		return -1;
	}
	return 0;
}

void cli_watch_lock(struct cli_watch *w, dlock_lock *lock)
{
	atomic_store(&w->lock, lock);
}

int cli_watch_stop(struct cli_watch *w)
{
	/* Closing the write end wakes the watcher with POLLHUP. */
	close(w->done[1]);
	pthread_join(w->thread, NULL);
	close(w->done[0]);
	return w->signo;
}

/* ----------------------------------------------------------- lost lock */

int cli_lost_init(struct cli_lost *l)
{
	atomic_init(&l->lost, 0);
	l->reason = DLOCK_LOST_EXPIRED;
	l->detail[0] = '\0';
	/* Nonblocking: the callback must never block the library's thread. */
	return pipe2(l->pipe, O_CLOEXEC | O_NONBLOCK);
}

void cli_lost_destroy(struct cli_lost *l)
{
	close(l->pipe[0]);
	close(l->pipe[1]);
}

void cli_lost_callback(dlock_lock *lock, dlock_lost_reason reason, const char *detail,
                       void *userdata)
{
	struct cli_lost *l = userdata;
	size_t n = detail ? strnlen(detail, sizeof l->detail - 1) : 0;
	ssize_t w;

	(void)lock;
	/* dlock acquires once, so this runs at most once: no lock needed. */
	l->reason = reason;
	if (n > 0)
		memcpy(l->detail, detail, n);
	l->detail[n] = '\0';
	atomic_store_explicit(&l->lost, 1, memory_order_release);
	w = write(l->pipe[1], "L", 1);
	(void)w; /* the flag is what counts; the byte only wakes poll() */
}

int cli_lost_seen(struct cli_lost *l)
{
	return atomic_load_explicit(&l->lost, memory_order_acquire);
}

const char *cli_lost_reason_name(dlock_lost_reason reason)
{
	switch (reason) {
	case DLOCK_LOST_EXPIRED:
		return "lease expired";
	case DLOCK_LOST_TAKEN:
		return "taken by another owner";
	case DLOCK_LOST_SESSION:
		return "session ended";
	case DLOCK_LOST_CLOSED:
		return "client closed";
	case DLOCK_LOST_MAX_HOLD:
		return "held for its maximum";
	}
	return "unknown reason";
}

/* ------------------------------------------------------------ terminal */

/*
 * COMMAND runs in its own process group.  When dlock is the foreground
 * job of a terminal, the terminal must follow COMMAND, or an interactive
 * COMMAND would be stopped by SIGTTIN on its first read.  Returns the
 * terminal to hand over, or -1.
 */
static int foreground_tty(void)
{
	int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (fd >= 0 && tcgetpgrp(fd) != getpgrp()) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* tcsetpgrp() from a background group raises SIGTTOU unless it is blocked. */
static void tty_give(int fd, pid_t pgrp)
{
	sigset_t ttou, old;

	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	pthread_sigmask(SIG_BLOCK, &ttou, &old);
	(void)tcsetpgrp(fd, pgrp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Take the terminal back if it still follows COMMAND (not after "bg"). */
static void tty_reclaim(const struct cli_child *c)
{
	if (c->tty_fd >= 0 && tcgetpgrp(c->tty_fd) == c->pid)
		tty_give(c->tty_fd, getpgrp());
}

static void tty_close(struct cli_child *c)
{
	if (c->tty_fd >= 0)
		close(c->tty_fd);
	c->tty_fd = -1;
}

/* -------------------------------------------------------------- spawn */

enum { STAGE_PDEATHSIG = 1, STAGE_EXEC = 2 };

/*
 * What the child needs between fork() and exec(), prepared by the parent:
 * the library's threads may hold locks that fork() copied, so the child
 * makes async-signal-safe calls only.
 */
struct exec_plan {
	char *const *argv;
	char *const *envp;
	const sigset_t *mask;
	pid_t parent;
	int tty_fd;
	int report_fd; /* close-on-exec pipe: stays silent when exec succeeds */
};

static void child_exec(const struct exec_plan *p) __attribute__((noreturn));
static void child_exec(const struct exec_plan *p)
{
	int report[2] = {STAGE_PDEATHSIG, 0};
	ssize_t w;

	setpgid(0, 0);
	/* If dlock dies, even by SIGKILL, COMMAND must not run on without the
	 * lock.  The death signal follows the thread that forked: the main
	 * thread, which lives as long as dlock. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		report[1] = errno;
		goto fail;
	}
	if (getppid() != p->parent)
		_exit(EX_OSERR); /* dlock died before the prctl() took effect */
	if (p->tty_fd >= 0)
		(void)tcsetpgrp(p->tty_fd, getpid()); /* SIGTTOU is blocked here */
	sigprocmask(SIG_SETMASK, p->mask, NULL);
	/* glibc's execvpe() allocates nothing: posix_spawnp() uses it the same way. */
	execvpe(p->argv[0], p->argv, p->envp);
	report[0] = STAGE_EXEC;
	report[1] = errno;
fail:
	w = write(p->report_fd, report, sizeof report);
	(void)w;
	_exit(CLI_EXIT_NOTFOUND);
}

static void reap_blocking(struct cli_child *c)
{
	while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
		;
}

/* Read the child's report: 0 once COMMAND runs, else the exit status. */
static int exec_result(struct cli_child *c, int fd, const char *cmd)
{
	int report[2];
	ssize_t n;

	do
		n = read(fd, report, sizeof report);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return 0; /* EOF: exec closed the pipe */
	reap_blocking(c);
	tty_reclaim(c);
	tty_close(c);
	if (n != (ssize_t)sizeof report) {
		cli_say("cannot start %s", cmd);
		return EX_OSERR;
	}
	if (report[0] == STAGE_PDEATHSIG) {
		cli_say("cannot tie %s to dlock's life: prctl: %s", cmd, strerror(report[1]));
		return EX_OSERR;
	}
	cli_say("cannot run %s: %s", cmd, strerror(report[1]));
	/* As a shell: 127 when there is nothing to run, 126 when it cannot be. */
	return report[1] == ENOENT || report[1] == ENOTDIR ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
}

int cli_spawn(struct cli_child *c, char *const argv[], char *const envp[],
              const struct cli_signals *sig)
{
	int pipefd[2], fork_errno;
	sigset_t ttou, old;
	struct exec_plan plan = {argv, envp, &sig->orig_mask, getpid(), -1, -1};

	if (pipe2(pipefd, O_CLOEXEC) != 0) {
		cli_say("cannot create a pipe: %s", strerror(errno));
		return EX_OSERR;
	}
	c->tty_fd = plan.tty_fd = foreground_tty();
	plan.report_fd = pipefd[1];
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	pthread_sigmask(SIG_BLOCK, &ttou, &old);
	c->pid = fork();
	if (c->pid == 0)
		child_exec(&plan);
	fork_errno = errno;
	if (c->pid > 0) {
		/* Both sides set the group and the terminal, as shells do, so that
		 * neither depends on which process runs first. */
		setpgid(c->pid, c->pid);
		if (c->tty_fd >= 0)
			(void)tcsetpgrp(c->tty_fd, c->pid);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(pipefd[1]);
	if (c->pid < 0) {
		close(pipefd[0]);
		tty_close(c);
		cli_say("cannot fork: %s", strerror(fork_errno));
		return EX_OSERR;
	}
	return exec_result(c, pipefd[0], argv[0]);
}

/* ---------------------------------------------------------- supervise */

/* COMMAND's process group, or COMMAND alone if it left the group. */
static void signal_command(const struct cli_child *c, int signo)
{
	if (kill(-c->pid, signo) != 0)
		(void)kill(c->pid, signo);
}

/*
 * COMMAND was stopped from the terminal (Ctrl-Z): stop dlock too, so that
 * the shell sees a stopped job, and resume COMMAND when dlock is resumed.
 */
static void follow_stop(const struct cli_child *c)
{
	tty_reclaim(c);
	kill(getpid(), SIGSTOP); /* returns once "fg" or "bg" continues dlock */
	if (tcgetpgrp(c->tty_fd) == getpgrp())
		tty_give(c->tty_fd, c->pid); /* "fg": the terminal follows COMMAND again */
	signal_command(c, SIGCONT);
}

/* 1 when COMMAND has ended (c->status set), 0 while it runs, -1 on error. */
static int reap(struct cli_child *c)
{
	int status;
	pid_t r = waitpid(c->pid, &status, WNOHANG | (c->tty_fd >= 0 ? WUNTRACED : 0));

	if (r < 0)
		return errno == EINTR ? 0 : -1;
	if (r == 0)
		return 0;
	if (WIFSTOPPED(status)) {
		follow_stop(c);
		return 0;
	}
	c->status = status;
	return 1;
}

static int poll_timeout(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - cli_now_ms();
	return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static void drain(int fd)
{
	char buf[64];

	while (read(fd, buf, sizeof buf) > 0)
		;
}

/* Start stopping COMMAND; returns when SIGKILL is due. */
static int64_t stop_command(const struct cli_child *c)
{
	int64_t now = cli_now_ms();

	signal_command(c, SIGTERM);
	signal_command(c, SIGCONT); /* a stopped COMMAND must be able to act on it */
	return c->grace_ms > INT64_MAX - now ? INT64_MAX : now + c->grace_ms;
}

static int supervise_failed(struct cli_child *c, const char *what)
{
	cli_say("%s: %s; killing the command", what, strerror(errno));
	signal_command(c, SIGKILL);
	reap_blocking(c);
	tty_reclaim(c);
	tty_close(c);
	return EX_OSERR;
}

int cli_supervise(struct cli_child *c, const struct cli_signals *sig, struct cli_lost *lost,
                  void (*on_lost)(void *ctx), void *ctx)
{
	int64_t kill_at = -1; /* when SIGKILL is due, -1 when not stopping */
	int stopping = 0, s, done;

	for (;;) {
		struct pollfd p[2] = {{.fd = sig->fd, .events = POLLIN},
		                      {.fd = lost->pipe[0], .events = POLLIN}};

		if (poll(p, 2, poll_timeout(kill_at)) < 0 && errno != EINTR)
			return supervise_failed(c, "poll");
		drain(lost->pipe[0]);
		if (!stopping && cli_lost_seen(lost)) {
			stopping = 1;
			on_lost(ctx);
			kill_at = stop_command(c);
		}
		while ((s = next_forwardable(sig->fd)) != 0)
			signal_command(c, s);
		/* Try on every wakeup, not only on SIGCHLD: signals coalesce. */
		done = reap(c);
		if (done < 0)
			return supervise_failed(c, "waitpid");
		if (done)
			break;
		if (kill_at >= 0 && cli_now_ms() >= kill_at) {
			signal_command(c, SIGKILL);
			kill_at = -1;
		}
	}
	tty_reclaim(c);
	tty_close(c);
	return 0;
}

/* -------------------------------------------------------- exit status */

int cli_status_exit(dlock_status st, int invalid)
{
	switch (st) {
	case DLOCK_EINVAL:
		return invalid;
	case DLOCK_EURI:
	case DLOCK_ENOBACKEND:
	case DLOCK_ENOTFOUND:
	case DLOCK_EVERSION:
	case DLOCK_ENOTSUP:
		return EX_CONFIG;
	case DLOCK_EKIND:
		return EX_USAGE;
	case DLOCK_ECONNECT:
	case DLOCK_EAUTH:
	case DLOCK_ESERVER:
	case DLOCK_EUNCERTAIN:
	case DLOCK_ELIMIT:
		return EX_UNAVAILABLE;
	case DLOCK_EPERM:
		return EX_NOPERM;
	default:
		return EX_OSERR;
	}
}

int cli_wait_status_exit(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return EX_OSERR;
}
