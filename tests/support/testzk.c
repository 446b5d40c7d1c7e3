/* Helpers for the ZooKeeper test programs (testzk.h). */
#define THREADED /* the client library's synchronous API */

#include "testzk.h"

#include <stdio.h>
#include <string.h>

#include "dlock/sys/zookeeper.h"
#include "testsupport.h"

#define CONNECT_MS 20000

int dlock_testzk_hosts(char hosts[2][DLOCK_TESTZK_HOSTS_MAX])
{
	const char *one = dlock_test_env("DLOCK_TEST_ZK_URI");
	const char *ens = dlock_test_env("DLOCK_TEST_ZK_ENSEMBLE_URI");
	if (!one || !ens || strncmp(one, "zk://", 5) != 0 || strncmp(ens, "zk://", 5) != 0)
		return 0;
	snprintf(hosts[0], DLOCK_TESTZK_HOSTS_MAX, "%s", one + 5);
	snprintf(hosts[1], DLOCK_TESTZK_HOSTS_MAX, "%s", ens + 5);
	return 1;
}

static void raw_log(const char *msg)
{
	(void)msg;
}

static void raw_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	(void)zh, (void)type, (void)state, (void)path, (void)ctx;
}

static int raw_connected(void *arg)
{
	return zoo_state(arg) == ZOO_CONNECTED_STATE;
}

zhandle_t *dlock_testzk_raw(const char *hosts, const clientid_t *id)
{
	zhandle_t *zh = zookeeper_init2(hosts, raw_watcher, 10000, id, NULL, 0, raw_log);
	CU_ASSERT_PTR_NOT_NULL_FATAL(zh);
	if (!dlock_test_await(raw_connected, zh, CONNECT_MS))
		printf("\n    a handle of our own on %s: not connected after %d ms", hosts, CONNECT_MS);
	return zh;
}

void dlock_testzk_close_session(const char *hosts, const clientid_t *id)
{
	zookeeper_close(dlock_testzk_raw(hosts, id));
}

clientid_t dlock_testzk_session(dlock_client *c)
{
	clientid_t id = { 0 };
	CU_ASSERT_EQUAL(dlock_client_control(c, DLOCK_ZK_CTL_SESSION_ID, &id), DLOCK_OK);
	return id;
}
