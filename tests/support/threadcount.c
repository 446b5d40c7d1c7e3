/* The threads of a test program (threadcount.h). */
#include "threadcount.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

static atomic_long started;

int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	atomic_fetch_add(&started, 1);
	return __real_pthread_create(t, attr, fn, arg);
}

long dlock_test_threads_started(void)
{
	return atomic_load(&started);
}

int dlock_test_threads_now(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}
