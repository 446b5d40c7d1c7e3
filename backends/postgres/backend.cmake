# PostgreSQL backend (postgres://, postgresql://): built when libpq is found
# (dlock::pq, from cmake/DlockBackends.cmake).
if(DLOCK_BACKEND_POSTGRES)
  list(APPEND DLOCK_DRIVERS postgres postgresql)
  list(APPEND DLOCK_BACKEND_SOURCES
    backends/postgres/pg.c
    backends/postgres/pg_error.c
    backends/postgres/pg_conn.c
    backends/postgres/pg_exec.c
    backends/postgres/pg_pool.c
    backends/postgres/pg_setup.c
    backends/postgres/pg_advisory.c
    backends/postgres/pg_row.c
    backends/postgres/pg_sem.c
    backends/postgres/pg_row_sem.c
    backends/postgres/pg_hash.c
    backends/postgres/pg_owner.c
    backends/postgres/pg_names.c
    backends/postgres/pg_inspect.c
    backends/postgres/pg_gc.c
    backends/postgres/pg_elect.c
    backends/postgres/pg_watch.c
    backends/postgres/pg_nbconn.c
    backends/postgres/pg_loop.c)
  list(APPEND DLOCK_BACKEND_TESTS test_postgres test_pg_privileges test_pg_standby test_pg_inspect test_pg_elect test_pg_gc)
  list(APPEND DLOCK_BACKEND_UNIT_TESTS ${CMAKE_CURRENT_LIST_DIR}/test_pg_key.c)
endif()
