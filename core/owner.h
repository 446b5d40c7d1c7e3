/* A client's identity and owner record (owner.c); the format is described there. */
#ifndef DLOCK_CORE_OWNER_H
#define DLOCK_CORE_OWNER_H

#include "dlock/sys/driver.h"

struct dlock_owner {
	char identity[DLOCK_IDENTITY_MAX + 1];
	char host[65];
	long pid;
	char record[DLOCK_OWNER_MAX + 1];
	size_t record_len;
};

/** Fill `o` for this process, with `identity` (checked by the caller) or NULL for "HOST:PID". */
void dlock_owner_init(struct dlock_owner *o, const char *identity);

/**
 * Read an owner record (`len` bytes): its identity into identity[idcap],
 * host into host[hostcap] (cut to fit) and pid into *pid (each left alone
 * when absent).  1 when it parsed and has an identity, else 0.
 */
int dlock_owner_parse(const char *rec, size_t len, char *identity, size_t idcap, char *host, size_t hostcap,
                      int64_t *pid);

#endif
