/*
 * The server meter: what the lock servers spent in a measured window.
 *
 * CPU time comes from /proc/PID/stat of the processes the target's
 * --server-pids command prints (Redis: the redis-server; PostgreSQL: the
 * postmaster; ZooKeeper: the JVM), each one's utime + stime (all its
 * threads), plus its children: those alive, read one by one (a PostgreSQL
 * backend per connection), and those that exited, which the kernel has
 * added to the parent's cutime + cstime once the parent reaped them.  A
 * child that exits inside the window is counted once either way: alive at
 * the start, in cutime at the end.  The command runs at each window's start;
 * at its end each process must still be the one it named (same start
 * time), or a restart happened in between and the window's CPU is unknown.
 *
 * Commands come from the raw client's counter of the server (Redis: INFO
 * commandstats), over a connection of the meter's own.
 */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* A child reaped while the children are read is counted twice or not at all: read again, a few times. */
#define CONSISTENT_TRIES 5

struct pstat {
	pid_t ppid;
	long long own;             /* utime + stime: the process and all its threads */
	long long reaped;          /* cutime + cstime: its children that exited and were reaped */
	unsigned long long started; /* start time, in ticks after boot */
};

/* One process's /proc/PID/stat; 0, or -1 when it is gone. */
static int read_stat(pid_t pid, struct pstat *st)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name in parentheses may hold spaces and parentheses: fields resume after the last ')'. */
	const char *p = strrchr(buf, ')');
	int ppid;
	unsigned long long utime, stime, started;
	long long cutime, cstime;
	if (!p || sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld %*d %*d %*d %*d %llu",
	                 &ppid, &utime, &stime, &cutime, &cstime, &started) != 6)
		return -1;
	*st = (struct pstat){ .ppid = ppid, .own = (long long)(utime + stime), .reaped = cutime + cstime,
		              .started = started };
	return 0;
}

static int listed(const struct bench_meter *m, pid_t pid)
{
	for (int i = 0; i < m->npids; i++)
		if (m->pids[i] == pid)
			return 1;
	return 0;
}

/* The reaped children's ticks of every listed process; -1 when one is gone. */
static long long reaped_ticks(const struct bench_meter *m)
{
	long long sum = 0;
	for (int i = 0; i < m->npids; i++) {
		struct pstat st;
		if (read_stat(m->pids[i], &st) != 0)
			return -1;
		sum += st.reaped;
	}
	return sum;
}

/* The live children of the listed processes (not themselves listed): their ticks. */
static long long children_ticks(const struct bench_meter *m)
{
	DIR *d = opendir("/proc");
	long long sum = 0;
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		struct pstat st;
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid_t pid = (pid_t)atoi(e->d_name);
		if (read_stat(pid, &st) == 0 && listed(m, st.ppid) && !listed(m, pid))
			sum += st.own + st.reaped;
	}
	closedir(d);
	return sum;
}

/* Every tick the listed processes and their children have used; -1 when a listed process is gone. */
static int64_t server_ticks(const struct bench_meter *m)
{
	long long total = -1;
	for (int k = 0; k < CONSISTENT_TRIES; k++) {
		long long own = 0, before = 0, after;
		for (int i = 0; i < m->npids; i++) {
			struct pstat st;
			if (read_stat(m->pids[i], &st) != 0)
				return -1;
			own += st.own;
			before += st.reaped;
		}
		total = own + before + children_ticks(m);
		after = reaped_ticks(m);
		if (after < 0)
			return -1;
		if (after == before)
			break; /* no child was reaped while the children were read */
	}
	return total;
}

/* Run --server-pids and keep what it printed; 0, or -1 with the note written. */
static int find_pids(struct bench_meter *m)
{
	FILE *p = popen(m->pids_cmd, "re");
	m->npids = 0;
	if (!p) {
		snprintf(m->note, sizeof m->note, "server CPU unknown: --server-pids could not run");
		return -1;
	}
	long v;
	int extra = 0;
	while (fscanf(p, "%ld", &v) == 1) {
		if (v <= 0)
			continue;
		if (m->npids == BENCH_MAX_SERVER_PIDS)
			extra = 1;
		else
			m->pids[m->npids++] = (pid_t)v;
	}
	int rc = pclose(p);
	if (rc != 0 || m->npids == 0 || extra) {
		snprintf(m->note, sizeof m->note, "server CPU unknown: --server-pids %s",
		         rc != 0 ? "failed" : extra ? "printed more than 64 PIDs" : "printed no PID");
		return -1;
	}
	for (int i = 0; i < m->npids; i++) {
		struct pstat st;
		if (read_stat(m->pids[i], &st) != 0) {
			snprintf(m->note, sizeof m->note, "server CPU unknown: --server-pids printed %d, not running",
			         (int)m->pids[i]);
			return -1;
		}
		m->started[i] = st.started;
	}
	return 0;
}

void bench_meter_init(struct bench_meter *m, const struct bench_target *t, const struct bench_raw *raw)
{
	*m = (struct bench_meter){ .pids_cmd = t->server_pids, .uri = t->uri, .raw = raw && raw->commands ? raw : NULL,
		                   .cpu_us = -1, .cmds = -1 };
}

void bench_meter_begin(struct bench_meter *m)
{
	char err[200];
	m->cpu_us = m->cmds = -1;
	m->counting_cpu = m->counting_cmds = 0;
	m->note[0] = '\0';
	if (!m->pids_cmd) {
		snprintf(m->note, sizeof m->note, "server CPU unknown: no --server-pids for this --uri");
	} else if (find_pids(m) == 0) {
		m->ticks0 = server_ticks(m);
		m->counting_cpu = m->ticks0 >= 0;
		if (!m->counting_cpu)
			snprintf(m->note, sizeof m->note, "server CPU unknown: a server process ended");
	}
	if (m->raw && !m->conn)
		m->conn = m->raw->connect(m->uri, 0, err, sizeof err); /* the message would name the host: not kept */
	m->counting_cmds = m->raw && m->conn && m->raw->commands(m->conn, &m->calls0) == 0;
}

/* Is every process --server-pids printed still the same one (not restarted, its PID not reused)? */
static int same_processes(const struct bench_meter *m)
{
	for (int i = 0; i < m->npids; i++) {
		struct pstat st;
		if (read_stat(m->pids[i], &st) != 0 || st.started != m->started[i])
			return 0;
	}
	return 1;
}

void bench_meter_end(struct bench_meter *m)
{
	uint64_t calls;
	if (m->counting_cpu) {
		int64_t ticks = same_processes(m) ? server_ticks(m) : -1;
		if (ticks >= m->ticks0)
			m->cpu_us = (double)(ticks - m->ticks0) * 1e6 / (double)sysconf(_SC_CLK_TCK);
		else
			snprintf(m->note, sizeof m->note, "server CPU unknown: a server process restarted during the window");
	}
	if (m->counting_cmds && m->raw->commands(m->conn, &calls) == 0 && calls >= m->calls0)
		m->cmds = (double)(calls - m->calls0);
	m->counting_cpu = m->counting_cmds = 0;
}

void bench_meter_close(struct bench_meter *m)
{
	if (m->conn)
		m->raw->close(m->conn);
	m->conn = NULL;
}
