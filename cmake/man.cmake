# Man pages: sandboxd(8), sbx(1) and sandboxd.conf(5), from the Markdown
# of docs/man/ with go-md2man (scripts/deps installs it), into
# build/man/, installed to ${CMAKE_INSTALL_MANDIR}. sandboxd.conf(5)'s keys
# are docs/reference/configuration.md, the output of `sandboxd config
# reference` (test docs_reference_current keeps the two equal), so the
# page says what the binary does. Target man, part of ALL when go-md2man
# is found; test docs_man_render renders each page with groff -ww (and
# mandoc -Tlint where it is installed) and fails on any warning.
include(GNUInstallDirs)
find_program(GO_MD2MAN go-md2man)
find_program(SBX_AWK NAMES awk mawk gawk)
if(NOT GO_MD2MAN OR NOT SBX_AWK)
  message(STATUS "go-md2man (Debian package go-md2man) or awk not found: the man pages are not built "
                 "(no target man, nothing installed to ${CMAKE_INSTALL_MANDIR}); scripts/deps installs it")
  return()
endif()

set(SBX_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(SBX_MAN_PAGES sandboxd.8 sbx.1 sandboxd.conf.5)
set(SBX_MAN_OUT "")
foreach(page IN LISTS SBX_MAN_PAGES)
  set(src ${CMAKE_SOURCE_DIR}/docs/man/${page}.md)
  set(deps ${src} ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake)
  set(keys_args "")
  if(page STREQUAL "sandboxd.conf.5")
    set(keys ${CMAKE_SOURCE_DIR}/docs/reference/configuration.md)
    set(keys_args -DKEYS=${keys} -DAWK=${SBX_AWK} -DKEYS_AWK=${CMAKE_SOURCE_DIR}/cmake/man_keys.awk)
    list(APPEND deps ${keys} ${CMAKE_SOURCE_DIR}/cmake/man_keys.awk)
  endif()
  add_custom_command(
    OUTPUT ${SBX_MAN_DIR}/${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${SBX_MAN_DIR}
    COMMAND ${CMAKE_COMMAND} -DGO_MD2MAN=${GO_MD2MAN} -DIN=${src} -DOUT=${SBX_MAN_DIR}/${page}
            -DVERSION=${PROJECT_VERSION} ${keys_args} -P ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
    DEPENDS ${deps}
    COMMENT "Man page ${page}")
  string(REGEX MATCH "[0-9]$" section ${page})
  install(FILES ${SBX_MAN_DIR}/${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  list(APPEND SBX_MAN_OUT ${SBX_MAN_DIR}/${page})
endforeach()
add_custom_target(man ALL DEPENDS ${SBX_MAN_OUT})

if(SANDBOXD_TESTS)
  add_test(NAME docs_man_render
    COMMAND ${CMAKE_SOURCE_DIR}/tests/docs/man_render.sh ${CMAKE_SOURCE_DIR} $<TARGET_FILE:sandboxd>
            $<TARGET_FILE:sbx> ${SBX_MAN_OUT})
  set_tests_properties(docs_man_render PROPERTIES LABELS docs TIMEOUT 60
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1")
endif()
