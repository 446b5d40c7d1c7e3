/*
 * Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c).  A harness checks
 * properties with FUZZ_CHECK, which prints the broken property and aborts:
 * libFuzzer then saves the input as a crash artifact.  Stopping on the first
 * broken property is the point, so the macro is an abort, not a return.
 */
#ifndef DLOCK_FUZZ_H
#define DLOCK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                           \
		}                                                                          \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated copy of the input (malloc'd; aborts when out of memory). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	if (size)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* 1 when `needle` (n bytes, n > 0) occurs in `hay`. */
static inline int fuzz_contains(const char *hay, const char *needle, size_t n)
{
	size_t h = strlen(hay);
	for (size_t i = 0; n <= h && i <= h - n; i++)
		if (memcmp(hay + i, needle, n) == 0)
			return 1;
	return 0;
}

#endif
