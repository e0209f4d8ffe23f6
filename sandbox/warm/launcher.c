/* sbx-launch: the first program of a warm sandbox (sandbox/warm.h).
 *
 * bwrap starts it as the sandbox's command, with every namespace, mount,
 * the seccomp filter, the uid and the limits already in place, and its
 * control socket as fd argv[1]. It says it is ready (one byte), then
 * blocks until the server hands it exactly one command: a header with
 * the command's stdin, stdout and stderr (SCM_RIGHTS), then the program,
 * the cwd, argv and the environment, NUL-separated. It puts those fds at
 * 0, 1 and 2, closes every other fd (the socket and this program's own
 * image included), changes to the cwd and execs: from then on the
 * sandbox is the command's alone, as if bwrap had started it.
 *
 * Statically linked, so that it runs on any root image; no allocation
 * beyond the one buffer; every failure ends it (the server then sees the
 * sandbox exit, as it would a command that failed to start). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/warm/proto.h"

static void say(const char *what, int err)
{
	char line[512];
	int n = snprintf(line, sizeof line, "sandbox: %s: %s\n", what, strerror(err));
	if (n > 0)
		(void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int read_all(int fd, char *p, size_t len)
{
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The n NUL-terminated strings from *p (below end) into v, NULL after. */
static int split(char **p, const char *end, char **v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		char *z = memchr(*p, '\0', (size_t)(end - *p));
		if (!z)
			return -1;
		v[i] = *p;
		*p = z + 1;
	}
	v[n] = NULL;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 111;
	char *num_end;
	long fd = strtol(argv[1], &num_end, 10);
	if (*num_end || num_end == argv[1] || fd < 3 || fd > 1024)
		return 111;
	int ctl = (int)fd;
	if (write(ctl, SBX_WARM_READY, 1) != 1)
		return 111;

	struct sbx_warm_hdr h = {0};
	int fds[3];
	char cbuf[CMSG_SPACE(sizeof fds)];
	struct iovec iov = {.iov_base = &h, .iov_len = sizeof h};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t got;
	do
		got = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof h)
		return 0; /* the server let go of it: end quietly */
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (h.magic != SBX_WARM_MAGIC || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof fds) || h.len > SBX_WARM_PAYLOAD_MAX || h.argc == 0 ||
	    h.argc > SBX_WARM_STRINGS_MAX || h.envc > SBX_WARM_STRINGS_MAX)
		return 111;
	memcpy(fds, CMSG_DATA(c), sizeof fds);
	for (int i = 0; i < 3; i++) {
		if (dup2(fds[i], i) < 0)
			return 111;
	}

	char *buf = malloc((size_t)h.len + 1);
	char **v = calloc((size_t)h.argc + h.envc + 2, sizeof *v);
	if (!buf || !v) {
		say("warm sandbox", ENOMEM);
		return 127;
	}
	if (read_all(ctl, buf, h.len) < 0)
		return 111;
	buf[h.len] = '\0';
	char *p = buf, *end = buf + h.len, *path, *cwd;
	char **av = v, **ev = v + h.argc + 1;
	path = p;
	p += strlen(p) + 1;
	cwd = p < end ? p : NULL;
	if (!cwd)
		return 111;
	p += strlen(p) + 1;
	if (p > end || split(&p, end, av, h.argc) < 0 || split(&p, end, ev, h.envc) < 0)
		return 111;

	if (chdir(cwd) < 0) {
		say(cwd, errno);
		return 127;
	}
	/* Nothing of the pool reaches the command: only 0, 1 and 2 stay. */
	if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0) {
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
	}
	execve(path, av, ev);
	say(path, errno);
	return 127;
}
