/**
 * @file
 * @brief Control operations of zk:// (dlock_client_control(), dlock_lock_control()).
 *
 * Codes 0x5a00..0x5aff (see dlock/sys/control.h); sent to another backend
 * they are DLOCK_ENOTSUP.
 */
#ifndef DLOCK_SYS_ZOOKEEPER_H
#define DLOCK_SYS_ZOOKEEPER_H

/**
 * Client or lock.  `arg` is a clientid_t * (<zookeeper/zookeeper.h>): a
 * copy of the id and password of the session the client uses now, the one
 * that holds the locks it acquires from here on.  DLOCK_ECONNECT when the
 * client has no session at the moment.  For tests that end the session from
 * outside (a second handle opened with the same id and closed), as a
 * session expiry would.
 */
#define DLOCK_ZK_CTL_SESSION_ID 0x5a01

#endif /* DLOCK_SYS_ZOOKEEPER_H */
