#include "common/secretfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/xmalloc.h"

char *sbx_secret_file_read(const char *path, const char *what, size_t max, size_t *len, char *why,
			   size_t whysz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(why, whysz, "cannot open %s %s: %s", what, path, sbx_strerror(-errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
		snprintf(why, whysz,
			 "%s %s must be a regular file owned by the server's user and readable by it "
			 "alone (mode 0600 or 0400)",
			 what, path);
		close(fd);
		return NULL;
	}
	char *buf = xmalloc(max + 1);
	size_t n = 0;
	ssize_t got;
	while (n < max && (got = read(fd, buf + n, max - n)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
}
