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

# {fmt} and spdlog come from Debian only as shared objects, which would bring libstdc++ and
# libgcc_s with them: dynamic linking alone cost `airlock run` a millisecond per start. fmt's
# compiled part is built here from the packaged headers (third_party/fmt) and spdlog is used
# header-only (one translation unit includes it), so `airlock` links no shared object but libc.
# Link the project's targets with airlock::fmt and spdlog::spdlog_header_only, not fmt::fmt.
add_library(airlock_fmt STATIC ${PROJECT_SOURCE_DIR}/third_party/fmt/fmt_compiled.cc)
target_include_directories(airlock_fmt SYSTEM PUBLIC
                           $<TARGET_PROPERTY:fmt::fmt,INTERFACE_INCLUDE_DIRECTORIES>)
add_library(airlock::fmt ALIAS airlock_fmt)
set_target_properties(spdlog::spdlog_header_only PROPERTIES
                      INTERFACE_LINK_LIBRARIES "Threads::Threads;airlock_fmt")

# Executables that run once per sandbox (the CLI, the node daemon) link libstdc++ and libgcc
# statically (Debian ships those archives). Not under the sanitizers, whose runtime must
# interpose operator new/delete.
function(airlock_static_runtime target)
  if(NOT AIRLOCK_SANITIZE AND NOT AIRLOCK_FUZZ)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()

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
# SHA-256 and HMAC for the airlock binary: Nettle has no global tables to relocate at start-up,
# where statically linked OpenSSL brought 340 KB of them (about 80 page faults per process).
pkg_check_modules(NETTLE REQUIRED IMPORTED_TARGET nettle)
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
# The fork-server's Python zygote embeds the interpreter (python3-dev).
pkg_check_modules(PYTHON_EMBED REQUIRED IMPORTED_TARGET python3-embed)
