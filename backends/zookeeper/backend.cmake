# zk:// — ZooKeeper through libzookeeper_mt, the multi-threaded C client
# (dlock::zookeeper, from cmake/DlockBackends.cmake).
if(DLOCK_BACKEND_ZOOKEEPER)
  set(_zk_dir ${CMAKE_CURRENT_LIST_DIR})
  set(_zk_sources
    ${_zk_dir}/zk.c
    ${_zk_dir}/zk_acquire.c
    ${_zk_dir}/zk_attempt.c
    ${_zk_dir}/zk_config.c
    ${_zk_dir}/zk_elect.c
    ${_zk_dir}/zk_error.c
    ${_zk_dir}/zk_hold.c
    ${_zk_dir}/zk_inspect.c
    ${_zk_dir}/zk_log.c
    ${_zk_dir}/zk_monitor.c
    ${_zk_dir}/zk_own.c
    ${_zk_dir}/zk_path.c
    ${_zk_dir}/zk_pipe.c
    ${_zk_dir}/zk_recipe.c
    ${_zk_dir}/zk_sem.c
    ${_zk_dir}/zk_session.c
    ${_zk_dir}/zk_slot.c)
  # The header declares the synchronous API only for the threaded library
  # (tests/test_zookeeper.c defines THREADED itself: this is directory-scoped).
  set_source_files_properties(${_zk_sources} PROPERTIES COMPILE_DEFINITIONS THREADED)
  list(APPEND DLOCK_DRIVERS zk)
  list(APPEND DLOCK_BACKEND_SOURCES ${_zk_sources})
  list(APPEND DLOCK_BACKEND_TESTS test_zookeeper test_zk_inspect test_zk_elect)
  list(APPEND DLOCK_BACKEND_UNIT_TESTS ${_zk_dir}/test_zk_seq.c)
endif()
