/**
 * @file
 * @brief Operation codes of dlock_client_control() answered by the core.
 *
 * Operation codes are split into ranges of 0x100, one per owner, so that a
 * code sent to a backend that does not own it is DLOCK_ENOTSUP rather than
 * another backend's operation:
 *
 *   0x0100..0x01ff  the core (this header; answered before the driver)
 *   0x5000..0x50ff  postgres://  (dlock/sys/postgres.h)
 *   0x5200..0x52ff  redis://
 *   0x5a00..0x5aff  zk://        (dlock/sys/zookeeper.h)
 *
 * A code's argument type is part of its definition and never changes; a
 * new argument means a new code.
 */
#ifndef DLOCK_SYS_CONTROL_H
#define DLOCK_SYS_CONTROL_H

#define DLOCK_CTL_CORE_FIRST 0x0100 /**< first code of the core's range */
#define DLOCK_CTL_CORE_LAST 0x01ff  /**< last code of the core's range */

/**
 * Client only.  `arg` is a size_t *: the number of threads that have an
 * error message recorded on this client (a thread's record goes when the
 * thread exits or the client closes).  For tests of the per-thread error text.
 */
#define DLOCK_CTL_ERRMSG_RECORDS 0x0101

#endif /* DLOCK_SYS_CONTROL_H */
