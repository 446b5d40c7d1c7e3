/*
 * A held handle as the core keeps it between acquisition and release: its
 * place among the name's holders, its lease's validity, the loss declared
 * on it, and the server releases the core makes for it (a loss cleaned up,
 * a linger ended).  The handle API (lock.c, election.c), the background
 * threads (background.c), the minimum hold (linger.c) and a driver's report
 * of a loss (host.c) change a hold through these calls, and each change
 * puts the handle where its fields say in the timetables (sched.c).
 *
 * Threads: c->mu held throughout, dropped only inside
 * dlock_lock_server_release_locked() around the driver call (the handle is
 * marked busy meanwhile).  Errors: none returned; a failed release for the
 * core is logged, and a loss is told to its owner by the watch thread.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000LL

/* ------------------------------------------------------------ holders */

void dlock_holder_add_locked(struct dlock_lock *l)
{
	struct dlock_entry *e = l->entry;
	l->next_holder = e->holders;
	e->holders = l;
	e->shared = l->mode == DLOCK_MODE_SHARED;
	l->holding = 1;
}

void dlock_holder_remove_locked(struct dlock_lock *l)
{
	struct dlock_entry *e = l->entry;
	if (l->holding) {
		struct dlock_lock **pp = &e->holders;
		while (*pp != l)
			pp = &(*pp)->next_holder;
		*pp = l->next_holder;
		l->next_holder = NULL;
		l->holding = 0;
	}
	if (e->queue_head) { /* only queued contenders wait on it (lock.c, wait_turn_locked()) */
		pthread_cond_broadcast(&e->cond);
		dlock_seam_kick_locked(l->client); /* and, on a loop client, those of the loop's engine */
	}
}

/* ------------------------------------------------------------ lease */

/* Validity is counted from when the request was sent, minus an allowance
 * for clock drift between client and server (1% + 2 ms, as RedLock does)
 * and for the client to act on the loss before the server can hand the
 * lock on (5%, at most 50 ms: a scheduling delay on a loaded host). */
void dlock_lock_lease_renewed(struct dlock_lock *l, int64_t sent_ns, int64_t lease_ns)
{
	int64_t act = lease_ns / 20 < 50 * NS_PER_MS ? lease_ns / 20 : 50 * NS_PER_MS;
	l->lease_ns = lease_ns;
	l->lease_end = sent_ns + lease_ns;
	l->valid_until = sent_ns + lease_ns - lease_ns / 100 - 2 * NS_PER_MS - act;
	l->next_renew = sent_ns + lease_ns / 3;
	dlock_sched_update(l);
}

dlock_lost_reason dlock_lock_gone_reason(const struct dlock_lock *l, int64_t sent_ns)
{
	return l->tracked && sent_ns >= l->lease_end ? DLOCK_LOST_EXPIRED : DLOCK_LOST_TAKEN;
}

/* ------------------------------------------------------------ loss */

/* Keep `detail` (NULL or "": none) as the loss's text, cut at DLOCK_LOST_DETAIL_MAX bytes.  Out of
 * memory, the loss keeps no text (callers then say "lock was lost"). */
static void set_lost_detail(struct dlock_lock *l, const char *detail)
{
	free(l->lost_detail);
	l->lost_detail = detail && detail[0] ? strndup(detail, DLOCK_LOST_DETAIL_MAX) : NULL;
}

const char *dlock_lock_lost_text(const struct dlock_lock *l)
{
	return l->lost_detail ? l->lost_detail : "";
}

void dlock_lock_declare_lost(struct dlock_lock *l, dlock_lost_reason reason, const char *detail)
{
	if (!l->held && l->contending && !l->lost_early) {
		/* The driver saw the loss before acquire() returned: keep it for
		 * when the acquisition is recorded. */
		l->lost_early = 1;
		l->lost_reason = reason;
		set_lost_detail(l, detail);
		return;
	}
	if (!l->held || l->lost)
		return;
	/* A lease cut to end at the maximum hold that runs out (however it is noticed) is the maximum. */
	if (reason == DLOCK_LOST_EXPIRED && dlock_hold_due_reason(l, dlock_monotonic_ns()) == DLOCK_LOST_MAX_HOLD) {
		reason = DLOCK_LOST_MAX_HOLD;
		detail = "held for its maximum hold: released";
	}
	if (l->lingering) {
		/* Its owner released it: nobody is told, what is left is only cleaned up. */
		l->lost = 1;
		l->lost_reason = reason;
		l->lost_delivered = 1;
		dlock_sched_update(l);
		dlock_sched_wake(l->client);
		return;
	}
	l->lost = 1;
	l->lost_pending = 1;
	l->lost_reason = reason;
	if (detail != l->lost_detail) /* a loss kept from acquire() is already there */
		set_lost_detail(l, detail);
	l->client->stats.lost++;
	char name[96];
	dlock_entry_printable(l->entry, name, sizeof name);
	dlock_client_logf(l->client, l->on_lost ? DLOCK_LOG_INFO : DLOCK_LOG_WARN, "lock '%s' lost: %s", name,
	                  dlock_lock_lost_text(l)); /* with a callback, the application is told there */
	l->client->losses_pending = 1;
	dlock_sched_update(l);
	dlock_sched_wake(l->client);
}

void dlock_lock_loss_cleaned(struct dlock_lock *l)
{
	l->loss_cleaned = 1;
	dlock_holder_remove_locked(l);
	dlock_sched_update(l);
	if (l->lingering) /* released by its owner already: nothing waits for a release */
		dlock_lock_drop_hold_locked(l);
}

/* ------------------------------------------------------------ release */

void dlock_lock_release_answered_locked(struct dlock_lock *l, dlock_log_level level, const char *what,
                                        dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	c->stats.server_releases++;
	if (st != DLOCK_OK && st != DLOCK_ENOTHELD)
		dlock_client_logf(c, level, "%s (%s): %s", what, dlock_status_name(st), msg);
}

void dlock_lock_server_release_locked(struct dlock_lock *l, dlock_log_level level, const char *what)
{
	struct dlock_client *c = l->client;
	dlock_error err = { "" };
	int was_busy = l->busy;
	l->busy = 1;
	dlock_sched_update(l);
	pthread_mutex_unlock(&c->mu);
	dlock_status st = c->driver->release(c->backend, l->lk, &err);
	pthread_mutex_lock(&c->mu);
	dlock_lock_release_answered_locked(l, level, what, st, err.msg);
	l->busy = was_busy;
	dlock_sched_update(l);
}

void dlock_lock_drop_hold_locked(struct dlock_lock *l)
{
	dlock_hold_clear(l);
	l->held = 0;
	l->depth = 0;
	l->lost_pending = 0;
	l->generation++;
	dlock_holder_remove_locked(l);
	dlock_sched_update(l);
}
