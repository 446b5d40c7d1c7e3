/*
 * custom_backend: register a backend of your own (kv_driver.c) and use it
 * through the ordinary API.
 *
 *   custom_backend kv://127.0.0.1:6379 NAME
 *
 * Takes NAME for one second and prints its fencing token.  Exit status 0
 * when the lock was taken and released, 1 otherwise.
 */
#include <stdio.h>
#include <unistd.h>

#include "dlock/dlock.h"

#include "kv_driver.h"

int main(int argc, char **argv)
{
	char err[256];
	dlock_client *client;
	dlock_lock *lock;
	uint64_t token = 0;
	if (argc != 3) {
		fprintf(stderr, "usage: %s kv://HOST[:PORT] NAME\n", argv[0]);
		return 2;
	}
	dlock_status st = dlock_register_driver(&example_kv_driver);
	if (st != DLOCK_OK) {
		fprintf(stderr, "custom_backend: cannot register kv://: %s\n", dlock_strerror(st));
		return 1;
	}
	if (dlock_client_open(&client, argv[1], NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "custom_backend: %s\n", err);
		return 1;
	}
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = 5000;
	st = dlock_lock_new(client, argv[2], &lock);
	if (st == DLOCK_OK)
		st = dlock_acquire(lock, &opts);
	if (st == DLOCK_OK) {
		dlock_lock_fencing_token(lock, &token);
		printf("held %s with token %llu\n", argv[2], (unsigned long long)token);
		sleep(1);
		st = dlock_release(lock);
	}
	if (st != DLOCK_OK)
		fprintf(stderr, "custom_backend: %s\n", dlock_client_errmsg(client));
	if (lock)
		dlock_lock_free(lock);
	dlock_client_close(client);
	return st == DLOCK_OK ? 0 : 1;
}
