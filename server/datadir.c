#include "server/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"

static int ensure_dir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST) {
		int err = errno; /* fprintf may change errno */
		fprintf(stderr, "sandboxd: cannot create %s: %s\n", path, strerror(err));
		return -err;
	}
	struct stat st;
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "sandboxd: %s is not a directory\n", path);
		return -ENOTDIR;
	}
	/* Only ever narrow "others" to search; never open a directory wider. */
	if ((st.st_mode & 0777) != mode && st.st_uid == geteuid() && chmod(path, mode) < 0) {
		int err = errno;
		fprintf(stderr, "sandboxd: cannot chmod %s: %s\n", path, strerror(err));
		return -err;
	}
	return 0;
}

int srv_prepare_data_dir(const struct sbx_config *cfg)
{
	int rc = ensure_dir(cfg->data_dir, 0711);
	if (rc < 0)
		return rc;
	char *tenants = xasprintf("%s/tenants", cfg->data_dir);
	rc = ensure_dir(tenants, 0711);
	free(tenants);
	if (rc < 0)
		return rc;
	/* Create the database file 0600 before SQLite does (it would use the
	 * umask); its -wal and -shm files copy this mode. */
	int fd = open(cfg->db_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		int err = errno;
		fprintf(stderr, "sandboxd: cannot open %s: %s\n", cfg->db_path, strerror(err));
		return -err;
	}
	fchmod(fd, 0600);
	close(fd);
	return 0;
}
