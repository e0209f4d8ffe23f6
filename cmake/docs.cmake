# The documentation site: docs/ built by mkdocs (Debian package mkdocs;
# scripts/deps installs it) into build/site, installed to
# ${CMAKE_INSTALL_DATADIR}/sandboxd/docs, where `GET /docs/` serves it
# (configuration key docs-dir, default /usr/share/sandboxd/docs: the
# package's prefix). Target docs-site, part of ALL when mkdocs is found.
# Real files, no symlinks: routes/docs.c follows none.
include(GNUInstallDirs)
find_program(SBX_MKDOCS mkdocs)
if(NOT SBX_MKDOCS)
  message(STATUS "mkdocs (Debian package mkdocs) not found: the documentation site is not built "
                 "(no target docs-site, nothing installed for /docs/); scripts/deps installs it")
  return()
endif()
file(GLOB_RECURSE SBX_DOCS_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
set(SBX_SITE ${CMAKE_BINARY_DIR}/site)
add_custom_command(
  OUTPUT ${SBX_SITE}/index.html
  COMMAND ${SBX_MKDOCS} build --quiet --strict --clean -f ${CMAKE_SOURCE_DIR}/mkdocs.yml -d ${SBX_SITE}
  DEPENDS ${SBX_DOCS_SRC} ${CMAKE_SOURCE_DIR}/mkdocs.yml ${CMAKE_SOURCE_DIR}/openapi/openapi.yaml
  COMMENT "Documentation site (mkdocs) into ${SBX_SITE}")
add_custom_target(docs-site ALL DEPENDS ${SBX_SITE}/index.html)
install(DIRECTORY ${SBX_SITE}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/sandboxd/docs)
