/*
 * Conformance: semaphores (dlock_semaphore_new()).
 */
#include "conformance.h"

const conf_test conf_sem_tests[] = {
	{ NULL, NULL },
};
