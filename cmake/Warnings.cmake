# Project-wide compile flags. Third-party code (generated or vendored) opts out with
# airlock_relax_warnings(<target>).
set(AIRLOCK_WARNING_FLAGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wunused -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough
    # Designated initializers leave the other fields at their defaults on purpose.
    -Wno-missing-field-initializers)
if(AIRLOCK_WERROR)
  list(APPEND AIRLOCK_WARNING_FLAGS -Werror)
endif()

if(AIRLOCK_SANITIZE)
  set(AIRLOCK_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer)
  add_compile_options(${AIRLOCK_SANITIZER_FLAGS})
  add_link_options(${AIRLOCK_SANITIZER_FLAGS})
endif()

# libFuzzer builds (clang only; scripts/fuzz): every target gets coverage instrumentation and
# ASan/UBSan, and airlock_fuzzer() (cmake/Testing.cmake) links libFuzzer's main.
if(AIRLOCK_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "AIRLOCK_FUZZ needs clang: configure with CC=clang CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# Debug information: line tables only by default (-g1: file, line and function names, enough for
# backtraces and sanitizer reports) since full -g costs a third of the compile time of the
# Boost.Asio/Beast sources; -DAIRLOCK_FULL_DEBUG_INFO=ON for variables and types in a debugger.
option(AIRLOCK_FULL_DEBUG_INFO "Full debug information (-g) instead of line tables (-g1)" OFF)
if(NOT AIRLOCK_FULL_DEBUG_INFO AND CMAKE_BUILD_TYPE MATCHES "^(Debug|RelWithDebInfo)$")
  add_compile_options(-g1)
endif()

# Paths in diagnostics and ccache keys relative to the tree so build directories share a cache.
add_compile_options(-ffile-prefix-map=${CMAKE_SOURCE_DIR}/=)

function(airlock_warnings target)
  target_compile_options(${target} PRIVATE ${AIRLOCK_WARNING_FLAGS})
endfunction()

# airlock_library(NAME SOURCES ... DEPS ...): one static library per component, with the
# project's include root (src/) and warnings.
function(airlock_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  airlock_warnings(${name})
endfunction()
