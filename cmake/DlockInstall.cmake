# What `cmake --install` puts under the prefix, and the files that let other
# builds find it:
#
#   lib/libdlock.so.X.Y.Z (SONAME libdlock.so.X), libdlock.so, libdlock.a
#   include/dlock/dlock.h, include/dlock/sys/driver.h
#   bin/dlock, bin/dlock-bench (when built), their man pages and dlock(3)
#   lib/pkgconfig/dlock.pc                      pkg-config --cflags --libs dlock
#   lib/cmake/dlock/dlockConfig.cmake ...       find_package(dlock) -> dlock::dlock
#
# Included at the end of the top-level CMakeLists.txt, once every target and
# DLOCK_BACKEND_LIBS are known.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DLOCK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dlock)

# ------------------------------------------------------------ version
# dlock_version() returns DLOCK_VERSION_STRING, so the header, the SONAME,
# dlock.pc and the CMake package only agree if project() and the header do.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/dlock/dlock.h _dlock_version_lines
     REGEX "^#define DLOCK_VERSION_(MAJOR|MINOR|PATCH|STRING) ")
set(_dlock_header_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "DLOCK_VERSION_${part} ([0-9]+)" _m "${_dlock_version_lines}")
  list(APPEND _dlock_header_version "${CMAKE_MATCH_1}")
endforeach()
string(REPLACE ";" "." _dlock_header_version "${_dlock_header_version}")
string(REGEX MATCH "DLOCK_VERSION_STRING \"([^\"]*)\"" _m "${_dlock_version_lines}")
if(NOT _dlock_header_version STREQUAL PROJECT_VERSION OR NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "version mismatch: project(dlock VERSION ${PROJECT_VERSION}) but "
          "include/dlock/dlock.h says ${_dlock_header_version} / \"${CMAKE_MATCH_1}\"; change both")
endif()
# Re-run this check when the header changes.
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${PROJECT_SOURCE_DIR}/include/dlock/dlock.h)

# ------------------------------------------------------ static library
# dlock_static carries the core's private include directory for the tests,
# so the installed archive is its own target: the same objects, named
# libdlock.a, exported as dlock::dlock_static.
add_library(dlock_archive STATIC $<TARGET_OBJECTS:dlock_objects>)
set_target_properties(dlock_archive PROPERTIES OUTPUT_NAME dlock EXPORT_NAME dlock_static)
target_include_directories(dlock_archive INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)

# An archive resolves nothing itself: whoever links it needs the client
# libraries of the backends compiled in.  Each is named twice, for pkg-config
# (dlock.pc) and for CMake (the static targets file), by name rather than by
# a path of the build machine, so that the installed tree can move.
#
# `pkg-config --static --libs dlock` must give flags that link, with the
# client libraries the system ships.  libpq's own .pc lists in Libs.private
# what a static libpq.a needs (-lpgcommon -lpgport -lgssapi_krb5 -lldap),
# and Debian's libpq-dev ships neither those archives nor the -dev links of
# the shared ones: with libpq in Requires.private, every --static link
# failed ("cannot find -lpgport").  libdlock.a needs
# libpq itself only, linked shared, so dlock.pc names it by its -l flag.
# hiredis and libcrypto stay modules: their static flags link everywhere.
set(_dlock_pc_shared_modules libpq)
set(DLOCK_PC_REQUIRES_PRIVATE libcrypto)
set(DLOCK_PC_LIBS_PRIVATE "")
set(DLOCK_STATIC_MODULES libcrypto)
set(_dlock_static_install_libs Threads::Threads PkgConfig::dlock_libcrypto)
# DLOCK_BACKEND_LIBS holds the client library targets of DlockBackends.cmake
# (dlock::hiredis ...): what each stands for is named here.
set(_dlock_client_libs "")
foreach(_target IN LISTS DLOCK_BACKEND_LIBS)
  get_target_property(_libs ${_target} INTERFACE_LINK_LIBRARIES)
  list(APPEND _dlock_client_libs ${_libs})
endforeach()
foreach(lib IN LISTS _dlock_client_libs)
  set(_module "")
  if(lib MATCHES "^PkgConfig::(.+)$")
    set(_prefix "${CMAKE_MATCH_1}")
    set(_module "${${_prefix}_MODULE_NAME}")
  endif()
  if(_module AND _module IN_LIST _dlock_pc_shared_modules)
    # libpq: named by its -l flag in dlock.pc, not required as a module
    # (see above); CMake still finds it through its .pc file.
    foreach(_dir IN LISTS ${_prefix}_LIBRARY_DIRS)
      if(NOT _dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        string(APPEND DLOCK_PC_LIBS_PRIVATE " -L${_dir}")
      endif()
    endforeach()
    foreach(_name IN LISTS ${_prefix}_LIBRARIES)
      string(APPEND DLOCK_PC_LIBS_PRIVATE " -l${_name}")
    endforeach()
    list(APPEND DLOCK_STATIC_MODULES ${_module})
    list(APPEND _dlock_static_install_libs PkgConfig::dlock_${_module})
  elseif(_module)
    # hiredis: it ships a .pc file, so depend on it by name.
    list(APPEND DLOCK_PC_REQUIRES_PRIVATE ${_module})
    list(APPEND DLOCK_STATIC_MODULES ${_module})
    list(APPEND _dlock_static_install_libs PkgConfig::dlock_${_module})
  elseif(EXISTS "${lib}")
    # libzookeeper_mt ships no .pc file: a plain -l flag (and -L when the
    # library is outside the linker's default directories).
    get_filename_component(_dir "${lib}" DIRECTORY)
    get_filename_component(_name "${lib}" NAME_WE)
    string(REGEX REPLACE "^lib" "" _name "${_name}")
    if(NOT _dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      string(APPEND DLOCK_PC_LIBS_PRIVATE " -L${_dir}")
      list(APPEND _dlock_static_install_libs "-L${_dir}")
    endif()
    string(APPEND DLOCK_PC_LIBS_PRIVATE " -l${_name}")
    list(APPEND _dlock_static_install_libs ${_name})
  elseif(lib MATCHES "^-l(.+)$" OR lib MATCHES "^([A-Za-z0-9_.+-]+)$")
    string(APPEND DLOCK_PC_LIBS_PRIVATE " -l${CMAKE_MATCH_1}")
    list(APPEND _dlock_static_install_libs ${CMAKE_MATCH_1})
  else()
    message(WARNING "install: dlock.pc and dlock::dlock_static do not name the backend "
            "library '${lib}': static links will miss it (see cmake/DlockInstall.cmake)")
  endif()
endforeach()
string(APPEND DLOCK_PC_LIBS_PRIVATE " -pthread")
string(STRIP "${DLOCK_PC_LIBS_PRIVATE}" DLOCK_PC_LIBS_PRIVATE)
string(REPLACE ";" " " DLOCK_PC_REQUIRES_PRIVATE "${DLOCK_PC_REQUIRES_PRIVATE}")
target_link_libraries(dlock_archive INTERFACE
  "$<BUILD_INTERFACE:Threads::Threads;PkgConfig::LIBCRYPTO;${DLOCK_BACKEND_LIBS}>"
  "$<INSTALL_INTERFACE:${_dlock_static_install_libs}>")

# ------------------------------------------------------------ programs
# Installed programs find libdlock next to them, wherever the prefix is.
file(RELATIVE_PATH _dlock_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set(DLOCK_PROGRAMS dlock-cli)
if(TARGET dlock-bench)
  list(APPEND DLOCK_PROGRAMS dlock-bench)
endif()
set_target_properties(${DLOCK_PROGRAMS} PROPERTIES INSTALL_RPATH "$ORIGIN/${_dlock_bin_to_lib}")

# ------------------------------------------------------------ install
install(TARGETS dlock EXPORT dlockTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS dlock_archive EXPORT dlockStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${DLOCK_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/man/dlock.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/man/dlock.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
if(TARGET dlock-bench)
  install(FILES ${PROJECT_SOURCE_DIR}/man/dlock-bench.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()

# dlock.pc finds its prefix from its own place (${pcfiledir}), because
# `cmake --install --prefix DIR` may choose another prefix than configure did.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(DLOCK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(DLOCK_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _rel /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" _rel "${_rel}")
  set(DLOCK_PC_PREFIX "\${pcfiledir}/${_rel}")
  set(DLOCK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(DLOCK_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(DLOCK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/dlock.pc.in ${PROJECT_BINARY_DIR}/dlock.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dlock.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(EXPORT dlockTargets NAMESPACE dlock:: DESTINATION ${DLOCK_CMAKE_DIR})
install(EXPORT dlockStaticTargets NAMESPACE dlock:: DESTINATION ${DLOCK_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dlockConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dlockConfig.cmake INSTALL_DESTINATION ${DLOCK_CMAKE_DIR})
# 0.x already has a SONAME of libdlock.so.0: a release is compatible with
# the earlier ones of the same major version.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dlockConfig.cmake ${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  DESTINATION ${DLOCK_CMAKE_DIR})

# ------------------------------------------------------------ docs
# `cmake --build BUILD --target docs`: the API reference in BUILD/docs/html.
# ci/install-check.sh runs the same Doxyfile and fails on any warning.
find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E env DLOCK_DOCS_OUT=${PROJECT_BINARY_DIR}/docs
            ${DOXYGEN_EXECUTABLE} docs/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Doxygen: API reference in ${PROJECT_BINARY_DIR}/docs/html"
    VERBATIM)
endif()
