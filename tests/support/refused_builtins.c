/*
 * The table of built-in drivers for dlock_refused_cli, a build of the
 * dlock command for test_cli.sh: it takes the place of the generated
 * builtin_drivers.c (linked from the static library only when nothing
 * defines the table first) and adds a driver built for a later ABI
 * version, which registration must refuse and report.
 */
#include "dlock/sys/driver.h"

extern const dlock_driver dlock_mem_driver;
extern const dlock_driver dlock_file_driver;

/* Never opened: registration refuses it on its version alone. */
static const dlock_driver future_driver = {
	.abi_version = 99, /* well past DLOCK_DRIVER_ABI_VERSION */
	.scheme = "future",
};

const dlock_driver *const dlock_builtin_drivers[] = {
	&dlock_mem_driver,
	&dlock_file_driver,
	&future_driver,
	NULL,
};
