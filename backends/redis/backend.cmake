# redis://, rediss://, redis+unix://, redis+sentinel:// and redis+cluster://
# (single instance, RedLock, Sentinel, Cluster), with hiredis and OpenSSL
# (dlock::hiredis, from cmake/DlockBackends.cmake).
if(DLOCK_BACKEND_REDIS)
  list(APPEND DLOCK_DRIVERS redis redis_unix rediss redis_sentinel rediss_sentinel redis_cluster rediss_cluster)
  list(APPEND DLOCK_BACKEND_SOURCES
    backends/redis/redis.c
    backends/redis/redis_lock.c
    backends/redis/redis_loop.c
    backends/redis/redis_fair.c
    backends/redis/redis_renew.c
    backends/redis/redis_sem.c
    backends/redis/redis_inspect.c
    backends/redis/redis_elect.c
    backends/redis/redis_key.c
    backends/redis/redis_conn.c
    backends/redis/redis_io.c
    backends/redis/redis_nbconn.c
    backends/redis/redis_tls.c
    backends/redis/redis_sentinel.c
    backends/redis/redis_cluster.c
    backends/redis/redis_route.c
    backends/redis/redis_transport.c
    backends/redis/redis_scripts.c
    backends/redis/redis_sub.c
    backends/redis/redlock.c)
  list(APPEND DLOCK_BACKEND_TESTS test_redis test_redis_rw test_redis_sem test_redis_inspect test_redis_elect test_redis_fair test_redis_replicas test_redis_tls
    test_redis_sentinel test_redis_cluster)
  list(APPEND DLOCK_BACKEND_UNIT_TESTS ${CMAKE_CURRENT_LIST_DIR}/test_redis_slot.c)
endif()
