# cmake -DSUMS=<SHA256SUMS file> -DDIR=<directory> -P check_sha256.cmake
# Checks every "<sha256>  <relative path>" line of SUMS against the files under DIR; fails with
# one message naming the file and both digests.
file(STRINGS ${SUMS} lines REGEX "^[0-9a-f]+  .+$")
if(NOT lines)
  message(FATAL_ERROR "${SUMS}: no sums")
endif()
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^([0-9a-f]+)  (.+)$" "\\1" expected "${line}")
  string(REGEX REPLACE "^([0-9a-f]+)  (.+)$" "\\2" path "${line}")
  if(NOT EXISTS ${DIR}/${path})
    message(FATAL_ERROR "${DIR}/${path} is missing (run scripts/install-deps)")
  endif()
  file(SHA256 ${DIR}/${path} actual)
  if(NOT actual STREQUAL expected)
    message(FATAL_ERROR "${DIR}/${path}: sha256 ${actual}, pinned ${expected} in ${SUMS} "
                        "(run scripts/install-deps)")
  endif()
endforeach()
