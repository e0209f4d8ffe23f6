/* The warm sandboxes' launcher (sandbox/warm/launcher.c, built static by
 * CMake as sbx-launch) in the binary's read-only data: the pool hands it
 * to each sandbox from a sealed memfd (sandbox/warm.c), so that nothing is
 * installed beside the server and any root image can run it. */
#ifndef SBX_LAUNCHER_PATH
/* cppcheck-suppress preprocessorErrorDirective ; CMake defines it for this file */
#error "SBX_LAUNCHER_PATH: the built launcher (CMakeLists.txt)"
#endif

__asm__(".pushsection .rodata.sbx_warm_launcher,\"a\"\n"
	".balign 16\n"
	".globl sbx_warm_launcher\n"
	"sbx_warm_launcher:\n"
	".incbin \"" SBX_LAUNCHER_PATH "\"\n"
	"sbx_warm_launcher_end:\n"
	".balign 8\n"
	".globl sbx_warm_launcher_len\n"
	"sbx_warm_launcher_len:\n"
	".quad sbx_warm_launcher_end - sbx_warm_launcher\n"
	".popsection\n");
