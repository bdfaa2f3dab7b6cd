# Every dependency comes from a Debian 12 package (scripts/install-deps installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(Boost 1.74 REQUIRED)

# Process start-up matters (`airlock run` is compared with bwrap): loading some forty shared
# objects costs milliseconds per run. Where Debian ships static archives (abseil, yaml-cpp,
# libseccomp, re2, zstd, SQLite, OpenSSL), link those instead.
option(AIRLOCK_STATIC_DEPS "Link third-party libraries statically where archives exist" ON)
if(AIRLOCK_STATIC_DEPS)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  set(_airlock_suffixes ${CMAKE_FIND_LIBRARY_SUFFIXES})
  set(CMAKE_FIND_LIBRARY_SUFFIXES .a ${CMAKE_FIND_LIBRARY_SUFFIXES})
endif()
find_package(OpenSSL REQUIRED)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
if(AIRLOCK_STATIC_DEPS)
  set(CMAKE_FIND_LIBRARY_SUFFIXES ${_airlock_suffixes})
  # Imported CMake packages: point each target at its archive (dependencies between the targets
  # stay as they are, so the link order is right).
  get_property(_airlock_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
  foreach(_t IN LISTS _airlock_imported)
    if(NOT (_t MATCHES "^absl::" OR _t STREQUAL "yaml-cpp"))
      continue()
    endif()
    foreach(_p IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE
               IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
      get_target_property(_loc ${_t} ${_p})
      if(_loc AND _loc MATCHES "\\.so")
        string(REGEX REPLACE "\\.so.*$" ".a" _archive "${_loc}")
        if(EXISTS "${_archive}")
          set_target_properties(${_t} PROPERTIES ${_p} "${_archive}")
        endif()
      endif()
    endforeach()
  endforeach()
endif()

# libarchive for image layers (src/image): linked dynamically, its static archive would pull in
# every compression library it supports.
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)
