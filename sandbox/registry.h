#pragma once
/* The one registry of backends: every name a tenant policy's `backend`
 * or the server's `backends` may say, and what each is. Code asks the
 * registry what a backend can do (sbx_backend_kind_named) instead of
 * comparing names. Data only: the implementations are elsewhere (bwrap
 * and local: a struct sbx_backend of this server, sandbox/backend.h;
 * remote and ssh: a tenant's provider, routes/provider.h). */
#include <stdbool.h>
#include <stddef.h>

enum sbx_backend_id { SBX_BK_BWRAP, SBX_BK_LOCAL, SBX_BK_REMOTE, SBX_BK_SSH };

struct sbx_backend_kind {
	enum sbx_backend_id id;
	const char *name;
	bool on_host;  /* started by this server (sbx_backend_new); else one per tenant, elsewhere */
	bool isolated; /* false: commands run on the host as they are (needs allow-unsafe-local) */
	bool images;   /* root images: policy image/images, an exec's image */
};

/* The kind named by name[0..len), or NULL. */
const struct sbx_backend_kind *sbx_backend_kind_find(const char *name, size_t len);
/* The same for a NUL-terminated name (NULL: NULL). */
const struct sbx_backend_kind *sbx_backend_kind_named(const char *name);
/* The names, for a message: `"bwrap", "local", "remote" or "ssh"` (quoted)
 * or `bwrap, local, remote or ssh`; only those on the host with on_host. */
void sbx_backend_kind_list(char *buf, size_t size, bool quoted, bool on_host);
