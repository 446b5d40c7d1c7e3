/*
 * The client library's log, routed to the dlock client's log callback.
 *
 * libzookeeper_mt writes to stderr unless a handle has a log callback
 * (zookeeper_init2), and that callback receives only the formatted line:
 * no handle, no context.  So the client a line belongs to is found through
 * the thread that logs it: a thread-local pointer, set by each thread that
 * works for one client (a dlock call inside the driver, the client's
 * monitor thread, and the completion thread of each of its handles, which
 * runs our watchers and completions).  Lines from a thread that no client
 * has claimed (the library's I/O thread: connection attempts and errors)
 * are dropped; the driver logs connection state changes itself.
 *
 * Levels map one to one (ZOO_ERROR -> DLOCK_LOG_ERROR ...), and the dlock
 * client's log_level (warning by default) filters them.  The library's own
 * level, zoo_set_debug_level(), is process-wide: dlock leaves it alone (at
 * the library's default, INFO), and an application that lowers it affects
 * every ZooKeeper handle of the process.
 *
 * A line never carries the digest password: the library does not log it,
 * and any occurrence is replaced by "***" before it is passed on.
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

/* Per thread, not shared: see above.  Set only for the duration of work for one client. */
static _Thread_local struct zk_client *log_client;

struct zk_client *dlock_zk_log_enter(struct zk_client *c)
{
	struct zk_client *prev = log_client;
	log_client = c;
	return prev;
}

void dlock_zk_log_leave(struct zk_client *prev)
{
	log_client = prev;
}

/* "DATE TIME,MS:PID(0xTID):ZOO_LEVEL@function@line: text" -> level and text. */
static const char *parse_line(const char *line, dlock_log_level *level)
{
	static const struct {
		const char *tag;
		dlock_log_level level;
	} levels[] = {
		{ "ZOO_ERROR@", DLOCK_LOG_ERROR },
		{ "ZOO_WARN@", DLOCK_LOG_WARN },
		{ "ZOO_INFO@", DLOCK_LOG_INFO },
		{ "ZOO_DEBUG@", DLOCK_LOG_DEBUG },
	};
	*level = DLOCK_LOG_WARN;
	for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
		const char *tag = strstr(line, levels[i].tag);
		if (tag) {
			*level = levels[i].level;
			const char *text = strstr(tag, ": ");
			return text ? text + 2 : tag;
		}
	}
	return line;
}

/* Copy `text` into `out` without trailing newlines and with `secret` masked. */
static void scrub(const char *text, const char *secret, char *out, size_t outlen)
{
	size_t o = 0, slen = secret ? strlen(secret) : 0;
	while (*text && o + 4 < outlen) {
		if (slen && strncmp(text, secret, slen) == 0) {
			memcpy(out + o, "***", 3);
			o += 3;
			text += slen;
		} else {
			out[o++] = *text++;
		}
	}
	while (o > 0 && (out[o - 1] == '\n' || out[o - 1] == '\r' || out[o - 1] == ' '))
		o--;
	out[o] = '\0';
}

void dlock_zk_log_line(const char *message)
{
	struct zk_client *c = log_client;
	if (!c || !message)
		return;
	dlock_log_level level;
	const char *text = parse_line(message, &level);
	char buf[1024];
	scrub(text, c->cfg.password, buf, sizeof buf);
	dlock_host_log(c->host, level, "zookeeper: %s", buf);
}
