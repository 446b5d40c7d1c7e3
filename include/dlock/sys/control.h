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

#include <stdint.h>

#define DLOCK_CTL_CORE_FIRST 0x0100 /**< first code of the core's range */
#define DLOCK_CTL_CORE_LAST 0x01ff  /**< last code of the core's range */

/**
 * Client only.  `arg` is a size_t *: the number of threads that have an
 * error message recorded on this client (a thread's record goes when the
 * thread exits or the client closes).  For tests of the per-thread error text.
 */
#define DLOCK_CTL_ERRMSG_RECORDS 0x0101

/**
 * Sent by the core to the control() of a driver of ABI version 2 to 6
 * (never answered by the core itself when an application sends it), for a
 * dlock_client_feature() code the core cannot answer from the frozen
 * dlock_capabilities or the driver's methods: features added after a
 * driver was written reach it here.  `arg` is a struct
 * dlock_feature_query *; the driver sets `value` and returns DLOCK_OK, or
 * DLOCK_ENOTSUP for a code it does not know.  From ABI version 7 the
 * driver's feature() answers instead (dlock/sys/driver.h).
 */
#define DLOCK_CTL_FEATURE 0x0102

/** The argument of DLOCK_CTL_FEATURE. */
struct dlock_feature_query {
	int feature;   /**< a dlock_feature code */
	int64_t value; /**< the answer */
};

#endif /* DLOCK_SYS_CONTROL_H */
