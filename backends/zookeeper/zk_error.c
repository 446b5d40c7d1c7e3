/* ZooKeeper result codes: what they say about a request and the session. */
#include "zookeeper_internal.h"

int dlock_zk_rc_connection(int rc)
{
	/* ZSESSIONMOVED: the request reached a server the session had left; it was not applied. */
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONMOVED;
}

int dlock_zk_rc_session_gone(int rc)
{
	return rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING || rc == ZAUTHFAILED;
}

int dlock_zk_rc_answered(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZNOAUTH || rc == ZBADVERSION || rc == ZNODEEXISTS ||
	       rc == ZNOTEMPTY || rc == ZNOCHILDRENFOREPHEMERALS || rc == ZINVALIDACL;
}

static dlock_status status_of(int rc)
{
	if (dlock_zk_rc_connection(rc) || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING)
		return DLOCK_ECONNECT;
	switch (rc) {
	case ZNOAUTH: return DLOCK_EPERM;
	case ZAUTHFAILED: return DLOCK_EAUTH;
	case ZNONODE: return DLOCK_ENOTFOUND;
	case ZSYSTEMERROR: return DLOCK_EIO;
	default: return DLOCK_ESERVER;
	}
}

dlock_status dlock_zk_fail(dlock_error *err, int rc, const char *what)
{
	return dlock_error_set(err, status_of(rc), "zk://: %s: %s (%d)", what, zerror(rc), rc);
}
