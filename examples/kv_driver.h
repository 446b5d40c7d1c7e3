/*
 * kv:// — the example network driver (kv_driver.c).  Register it once,
 * before opening kv:// URIs:
 *
 *   dlock_register_driver(&example_kv_driver);
 */
#ifndef EXAMPLE_KV_DRIVER_H
#define EXAMPLE_KV_DRIVER_H

#include "dlock/sys/driver.h"

extern const dlock_driver example_kv_driver;

#endif
