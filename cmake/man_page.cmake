# One man page from its Markdown (docs/man/NAME.SECTION.md) with
# go-md2man; run by the target man (cmake/man.cmake) as
#   cmake -DGO_MD2MAN=... -DIN=... -DOUT=... -DVERSION=... [-DKEYS=... -DAWK=... -DKEYS_AWK=...] -P man_page.cmake
# @VERSION@ becomes the project's version; with KEYS, the line
# <!-- KEYS --> becomes the configuration reference's rows (KEYS,
# docs/reference/configuration.md) as a definition list (KEYS_AWK).
file(READ "${IN}" text)
string(REPLACE "@VERSION@" "${VERSION}" text "${text}")
if(KEYS)
  execute_process(COMMAND "${AWK}" -f "${KEYS_AWK}" "${KEYS}"
    OUTPUT_VARIABLE keys RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man: cannot read the keys of ${KEYS}")
  endif()
  string(FIND "${text}" "<!-- KEYS -->" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "man: ${IN} has no <!-- KEYS --> line")
  endif()
  string(REPLACE "<!-- KEYS -->" "${keys}" text "${text}")
endif()
file(WRITE "${OUT}.md" "${text}")
execute_process(COMMAND "${GO_MD2MAN}" -in "${OUT}.md" -out "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man: go-md2man failed on ${OUT}.md")
endif()
