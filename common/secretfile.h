#pragma once
/* Secret files named by the operator's settings (a remote token, an SSH
 * private key). Threads: any. */
#include <stddef.h>

/* The file's content, at most max bytes (*len: how many were read; max
 * means the file may be longer), NUL-terminated (caller frees). The file
 * is opened without following a link or blocking on a FIFO, and read only
 * when it is a regular file of the server's user readable by it alone
 * (mode 0600 or 0400): a setting must not make the server read, and send
 * elsewhere, any file root can read. NULL when refused, with why naming
 * what (the setting) and path. */
char *sbx_secret_file_read(const char *path, const char *what, size_t max, size_t *len, char *why,
			   size_t whysz);
