/*
 * Process side of the dlock command: signals, the command's process and
 * its supervision, and the exit statuses dlock gives.  dlock.c decides
 * what to lock; dlock_run.c runs COMMAND.
 */
#ifndef DLOCK_TOOLS_RUN_H
#define DLOCK_TOOLS_RUN_H

#include <dlock/dlock.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

/* Exit statuses of the dlock command (see --help). */
#define CLI_EXIT_CONFLICT 75 /* EX_TEMPFAIL, default of --conflict-exit-code */
#define CLI_EXIT_LOST 76     /* EX_PROTOCOL: the lock was lost under COMMAND */
#define CLI_EXIT_NOEXEC 126  /* COMMAND found but not executable (as a shell) */
#define CLI_EXIT_NOTFOUND 127

/**
 * Exit status for a library failure (the table of dlock --help); `invalid`
 * is the one for DLOCK_EINVAL, which means a bad URI in dlock_client_open()
 * and bad options elsewhere.
 */
int cli_status_exit(dlock_status st, int invalid);

/*
 * Signals.  dlock blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD in
 * every thread from the start of main(), so the library's threads inherit
 * the mask and never see them, and reads them from a signalfd instead.  A
 * signal that was ignored when dlock started (nohup) stays ignored, for
 * dlock and for COMMAND.
 */
struct cli_signals {
	int fd;             /* signalfd: nonblocking, close-on-exec */
	sigset_t set;       /* the signals read through fd */
	sigset_t orig_mask; /* mask dlock started with, restored for COMMAND */
};

/** Block the signals and open the signalfd.  0, or -1 with errno. */
int cli_signals_open(struct cli_signals *sig);
void cli_signals_close(struct cli_signals *sig);
/** First forwardable signal waiting in the signalfd, or 0; never blocks. */
int cli_signals_pending(const struct cli_signals *sig);
/**
 * Wait until `deadline` (cli_now_ms() time) or a forwardable signal,
 * whichever comes first: returns the signal, or 0 at the deadline.
 */
int cli_wait_until(const struct cli_signals *sig, int64_t deadline);

/** Monotonic clock in milliseconds. */
int64_t cli_now_ms(void);

/*
 * Watcher thread while dlock opens the client and waits for the lock:
 * blocking calls that a signal must be able to interrupt.  Before a lock
 * handle is registered a signal ends dlock at once (nothing is held yet);
 * after, it cancels the acquire.
 */
struct cli_watch {
	int sig_fd;
	int done[2];               /* pipe: main thread -> watcher "stop" */
	_Atomic(dlock_lock *) lock;
	int signo;                 /* first signal seen; read after the join */
	pthread_t thread;
};

int cli_watch_start(struct cli_watch *w, const struct cli_signals *sig);
void cli_watch_lock(struct cli_watch *w, dlock_lock *lock);
/** Stop and join the watcher; returns the first signal it saw, or 0. */
int cli_watch_stop(struct cli_watch *w);

/*
 * Lost-lock notice from the library's background thread to the main loop:
 * the callback only copies the detail and writes one byte to a pipe.
 */
struct cli_lost {
	int pipe[2];
	atomic_int lost;           /* set (release) after reason and detail */
	dlock_lost_reason reason;
	char detail[256];
};

int cli_lost_init(struct cli_lost *l);
void cli_lost_destroy(struct cli_lost *l);
/** The dlock_lost_fn to pass with a struct cli_lost as its userdata. */
void cli_lost_callback(dlock_lock *lock, dlock_lost_reason reason, const char *detail,
                       void *userdata);
/** 1 once the callback has run (the reason and detail are then readable). */
int cli_lost_seen(struct cli_lost *l);
const char *cli_lost_reason_name(dlock_lost_reason reason);

/* The command's process. */
struct cli_child {
	pid_t pid;
	int tty_fd;      /* controlling terminal handed to COMMAND, or -1 */
	int status;      /* wait status, once reaped */
	int64_t grace_ms; /* SIGTERM -> SIGKILL delay after the lock is lost */
};

/**
 * Start argv[0] (searched in PATH) with environment envp in its own
 * process group.  Returns 0 with c->pid set once COMMAND has been exec'd;
 * otherwise prints why and returns the exit status to use (126, 127 or
 * EX_OSERR), with no process left running.
 */
int cli_spawn(struct cli_child *c, char *const argv[], char *const envp[],
              const struct cli_signals *sig);

/**
 * Wait for the command to end, forwarding signals to its process group.
 * When the lock is lost, calls on_lost(ctx) once and stops the group
 * (SIGTERM, then SIGKILL after c->grace_ms).  Returns 0 with c->status
 * set, or EX_OSERR after printing why (the group has then been killed).
 */
int cli_supervise(struct cli_child *c, const struct cli_signals *sig, struct cli_lost *lost,
                  void (*on_lost)(void *ctx), void *ctx);

/** Exit status a shell would give for a wait status (code or 128+signal). */
int cli_wait_status_exit(int status);

#endif
