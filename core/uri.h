/* URI parsing for the core: text -> dlock_uri (see include/dlock/sys/driver.h). */
#ifndef DLOCK_CORE_URI_H
#define DLOCK_CORE_URI_H

#include "dlock/sys/driver.h"

/*
 * dlock_uri_parse() and dlock_uri_free() are declared in driver.h (public:
 * backends' tests and fuzz harnesses parse URIs too).  What the parser takes:
 *
 * Grammar: scheme "://" [userinfo "@"] hostlist [path] ["?" query]
 *   scheme    [a-zA-Z][a-zA-Z0-9+.-]*, lower-cased ("redis+unix" allowed)
 *   userinfo  user [":" password]   (percent-decoded; ":password" alone gives user "")
 *   hostlist  host [":" port] *("," host [":" port]); host may be "[v6addr]";
 *             may be empty (file:///dir); port 1..65535
 *   path      "/" ... (percent-decoded, may contain any byte but NUL)
 *   query     key[=value] *("&" key[=value]) (percent-decoded, '+' is a literal '+')
 *
 * Common parameters (ttl, wait, renew, fencing, prefix, open_timeout,
 * io_timeout, identity, min_hold, max_hold) are removed from params and resolved into the struct with their
 * defaults (prefix_given records whether prefix was written);
 * durations are number+unit, a bare number is milliseconds; renew takes
 * 1/0/true/false/on/off/yes/no.  A repeated parameter, a bad value, a
 * percent-encoded NUL or any other syntax error is DLOCK_EURI with a message
 * naming the problem (password masked).  The NULL pointer or "" is
 * DLOCK_EINVAL.  Unknown backend parameters are left in params for the
 * caller to check.
 */

/**
 * Copy `text` into `out` (size `outlen`, always NUL-terminated, truncated)
 * with the password of its userinfo replaced by "***".  Works on malformed
 * input too, for error messages.
 */
void dlock_uri_mask(const char *text, char *out, size_t outlen);

#endif
