/**
 * @file
 * @brief Control operations of postgres:// and postgresql:// (dlock_lock_control()).
 *
 * Codes 0x5000..0x50ff (see dlock/sys/control.h); sent to another backend
 * they are DLOCK_ENOTSUP.
 */
#ifndef DLOCK_SYS_POSTGRES_H
#define DLOCK_SYS_POSTGRES_H

/**
 * Lock only.  `arg` is an int64_t *: the advisory key of the handle's name,
 * the first 8 bytes, big-endian, of the SHA-256 of prefix ":" name (what
 * pg_locks shows as classid, objid in advisory mode).  Held or not.
 */
#define DLOCK_PG_CTL_ADVISORY_KEY 0x5001

#endif /* DLOCK_SYS_POSTGRES_H */
