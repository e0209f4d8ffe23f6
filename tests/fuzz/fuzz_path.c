/* libFuzzer: wire path normalisation and session segments. Invariants: a
 * normalised path never starts with '/', never has an empty, "." or ".."
 * component, and stays within the buffer; a segment is at most 47 bytes of
 * [A-Za-z0-9._-]. Build: scripts/fuzz. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/workspace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[SBX_PATH_MAX];
	int rc = sbx_path_normalize((const char *)data, size, "sessions/default-29c5vkri4q", out, sizeof out);
	if (rc == 0) {
		size_t n = strlen(out);
		if (n && (out[0] == '/' || out[n - 1] == '/'))
			abort();
		for (const char *p = out; *p;) {
			const char *e = strchr(p, '/');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
				abort();
			p += len + (e ? 1 : 0);
		}
		char wire[SBX_PATH_MAX + 16];
		sbx_path_wire(out, wire, sizeof wire);
		if (strncmp(wire, "/workspace", 10) != 0)
			abort();
	}
	char seg[SBX_SEGMENT_MAX];
	if (size > 0 && size <= 512) {
		sbx_session_segment((const char *)data, size, (unsigned)(size % 3), seg);
		size_t n = strlen(seg);
		if (n == 0 || n > 47 + 4)
			abort();
		for (size_t i = 0; i < n; i++) {
			char c = seg[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      c == '.' || c == '_' || c == '-'))
				abort();
		}
	}
	return 0;
}
