#pragma once
/* The data directory: sandboxd.db (0600) and tenants/<name>/workspace.
 * Directories are 0711 so that bubblewrap, running as a tenant's uid, can
 * reach (but not list) the tenant's workspace to bind it; the database and
 * its WAL files are readable by the server's user only. */
#include "common/config.h"

/* Create what is missing and fix modes. 0 or -errno (message printed). */
int srv_prepare_data_dir(const struct sbx_config *cfg);
