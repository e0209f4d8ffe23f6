#pragma once
/* What the server and a warm sandbox's launcher (sandbox/warm/launcher.c)
 * say to each other over its control socket (SOCK_STREAM):
 *
 *   launcher -> server   SBX_WARM_READY, once, when the sandbox is made
 *   server -> launcher   a struct sbx_warm_hdr with the command's three
 *                        std fds (SCM_RIGHTS), then hdr.len bytes: the
 *                        program, the cwd, hdr.argc argv strings and
 *                        hdr.envc environment strings, each NUL-ended
 *
 * Then the launcher execs (the socket closes with it) and nothing more
 * is said. */
#include <stdint.h>

#define SBX_WARM_READY "R"
#define SBX_WARM_MAGIC 0x73627877u /* "sbxw" */
#define SBX_WARM_PAYLOAD_MAX (16u << 20)
#define SBX_WARM_STRINGS_MAX 65536u

struct sbx_warm_hdr {
	uint32_t magic;
	uint32_t len;
	uint32_t argc;
	uint32_t envc;
};
