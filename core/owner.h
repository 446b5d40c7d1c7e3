/* A client's identity and owner record (owner.c); the format is described there. */
#ifndef DLOCK_CORE_OWNER_H
#define DLOCK_CORE_OWNER_H

#include "dlock/sys/driver.h"

/**
 * DLOCK_OK when `identity` may name a client: 1 to DLOCK_IDENTITY_MAX
 * bytes, no control byte (0x00-0x1f, 0x7f); else DLOCK_EINVAL with the
 * reason in `err` (may be NULL).  Pure.
 */
dlock_status dlock_identity_check(const char *identity, dlock_error *err);

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
