# Which backends this build has: decided here, once, and read everywhere
# else (the library, tests/, tests/fuzz/, tools/bench/, the install rules).
#
# mem:// and file:// need nothing and are always built.  A network backend
# is built when its switch is ON (the default) and its client library is
# found; -DDLOCK_WITH_<NAME>=OFF leaves it out even when the library is there.
#
# The answer, for the rest of the build:
#
#   DLOCK_BACKENDS           the backends built: mem file [redis] [zookeeper] [postgres]
#   DLOCK_BACKEND_<NAME>     ON or OFF, for NAME in REDIS ZOOKEEPER POSTGRES
#   dlock::hiredis           its client library (include directories and link
#   dlock::zookeeper           flags), an interface target defined only when
#   dlock::pq                  the backend is built
#   DLOCK_BACKEND_LIBS       those targets, in backend order
#
# Each built backend's backends/<name>/backend.cmake then adds its driver
# symbol stems to DLOCK_DRIVERS (dlock_<stem>_driver), its sources to
# DLOCK_BACKEND_SOURCES and its server tests to DLOCK_BACKEND_TESTS.
#
# The ZooKeeper header declares the synchronous API only under THREADED;
# dlock::zookeeper does not define it, because tests/test_zookeeper.c does:
# each source that needs it sets it itself.
option(DLOCK_WITH_REDIS "Build redis:// when hiredis is found" ON)
option(DLOCK_WITH_ZOOKEEPER "Build zk:// when libzookeeper_mt is found" ON)
option(DLOCK_WITH_POSTGRES "Build postgres:// when libpq is found" ON)

set(DLOCK_BACKENDS mem file)
set(DLOCK_BACKEND_LIBS "")

# dlock_backend_client(NAME TARGET FOUND LIBS...): record the answer for
# backend NAME, whose client library is TARGET, made of LIBS when FOUND.
macro(dlock_backend_client name target found)
  string(TOUPPER ${name} _dlock_upper)
  if(${found})
    set(DLOCK_BACKEND_${_dlock_upper} ON)
    add_library(${target} INTERFACE IMPORTED)
    target_link_libraries(${target} INTERFACE ${ARGN})
    list(APPEND DLOCK_BACKENDS ${name})
    list(APPEND DLOCK_BACKEND_LIBS ${target})
  else()
    set(DLOCK_BACKEND_${_dlock_upper} OFF)
  endif()
endmacro()

# redis://, rediss:// and redis+unix://: hiredis (its protocol reader and
# command formatter) and OpenSSL's libssl (TLS for rediss://: hiredis 0.14
# has none; libcrypto is already the core's).
set(_dlock_found FALSE)
if(DLOCK_WITH_REDIS)
  pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
  pkg_check_modules(LIBSSL IMPORTED_TARGET libssl)
  if(HIREDIS_FOUND AND LIBSSL_FOUND)
    set(_dlock_found TRUE)
  else()
    message(STATUS "hiredis or libssl not found: redis:// left out")
  endif()
else()
  message(STATUS "DLOCK_WITH_REDIS=OFF: redis:// left out")
endif()
dlock_backend_client(redis dlock::hiredis _dlock_found PkgConfig::HIREDIS PkgConfig::LIBSSL)

# zk://: libzookeeper_mt, the multi-threaded C client (Debian:
# libzookeeper-mt-dev).  It ships no pkg-config file and no CMake package,
# so look for the header and the library directly.
set(_dlock_found FALSE)
if(DLOCK_WITH_ZOOKEEPER)
  find_path(ZOOKEEPER_INCLUDE_DIR zookeeper/zookeeper.h)
  find_library(ZOOKEEPER_MT_LIBRARY zookeeper_mt)
  if(ZOOKEEPER_INCLUDE_DIR AND ZOOKEEPER_MT_LIBRARY)
    set(_dlock_found TRUE)
  else()
    message(STATUS "libzookeeper_mt not found: zk:// left out")
  endif()
else()
  message(STATUS "DLOCK_WITH_ZOOKEEPER=OFF: zk:// left out")
endif()
dlock_backend_client(zookeeper dlock::zookeeper _dlock_found ${ZOOKEEPER_MT_LIBRARY})
if(DLOCK_BACKEND_ZOOKEEPER)
  set_target_properties(dlock::zookeeper PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${ZOOKEEPER_INCLUDE_DIR})
endif()

# postgres:// and postgresql://: libpq.
set(_dlock_found FALSE)
if(DLOCK_WITH_POSTGRES)
  pkg_check_modules(LIBPQ IMPORTED_TARGET libpq)
  if(LIBPQ_FOUND)
    set(_dlock_found TRUE)
  else()
    message(STATUS "libpq not found: postgres:// left out")
  endif()
else()
  message(STATUS "DLOCK_WITH_POSTGRES=OFF: postgres:// left out")
endif()
dlock_backend_client(postgres dlock::pq _dlock_found PkgConfig::LIBPQ)
unset(_dlock_found)

# Each built backend's sources, driver stems and tests.
set(DLOCK_DRIVERS mem file)
set(DLOCK_BACKEND_SOURCES backends/mem.c backends/file.c)
set(DLOCK_BACKEND_TESTS "")
foreach(_dlock_backend IN LISTS DLOCK_BACKENDS)
  if(NOT _dlock_backend MATCHES "^(mem|file)$")
    include(${PROJECT_SOURCE_DIR}/backends/${_dlock_backend}/backend.cmake)
  endif()
endforeach()
unset(_dlock_backend)
