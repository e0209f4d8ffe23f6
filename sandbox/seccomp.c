#include "sandbox/seccomp.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xmalloc.h"

#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif

/* Denied outright with EPERM. */
static const int denied[] = {
    SCMP_SYS(ptrace),
    SCMP_SYS(mount),
    SCMP_SYS(umount2),
    SCMP_SYS(pivot_root),
    SCMP_SYS(setns),
    SCMP_SYS(unshare),
    SCMP_SYS(bpf),
    SCMP_SYS(perf_event_open),
    SCMP_SYS(userfaultfd),
    SCMP_SYS(keyctl),
    SCMP_SYS(add_key),
    SCMP_SYS(request_key),
    SCMP_SYS(io_uring_setup),
    SCMP_SYS(io_uring_enter),
    SCMP_SYS(io_uring_register),
    SCMP_SYS(kexec_load),
    SCMP_SYS(kexec_file_load),
    SCMP_SYS(init_module),
    SCMP_SYS(finit_module),
    SCMP_SYS(delete_module),
    SCMP_SYS(open_by_handle_at),
    SCMP_SYS(name_to_handle_at),
    SCMP_SYS(acct),
    SCMP_SYS(swapon),
    SCMP_SYS(swapoff),
    SCMP_SYS(reboot),
    SCMP_SYS(syslog),
    SCMP_SYS(fsopen),
    SCMP_SYS(fsmount),
    SCMP_SYS(move_mount),
    SCMP_SYS(open_tree),
};

static int add_rules(scmp_filter_ctx ctx)
{
	size_t i;
	int rc;

	for (i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), denied[i], 0);
		if (rc < 0)
			return rc;
	}
	/* New user namespaces through clone(2); clone3 cannot be inspected
	 * (flags live in memory), so it answers ENOSYS and libc falls back. */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
			      SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
	if (rc < 0)
		return rc;
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc < 0)
		return rc;
	/* The request is an int: compare only the low 32 bits, or a set high
	 * bit slips past (CVE-2019-10063). */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCSTI));
	if (rc < 0)
		return rc;
	return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
				SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCLINUX));
}

int sbx_seccomp_build(void **bpf, size_t *len)
{
	scmp_filter_ctx ctx = NULL;
	void *buf = NULL;
	struct stat st;
	int fd = -1;
	int rc;

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
#if defined(__x86_64__)
	/* The same rules for 32-bit entry points; other arches are killed
	 * (the default bad-arch action). */
	rc = seccomp_arch_add(ctx, SCMP_ARCH_X86);
	if (rc < 0 && rc != -EEXIST)
		goto out;
#endif
	rc = add_rules(ctx);
	if (rc < 0)
		goto out;
	fd = memfd_create("sbx-seccomp-build", MFD_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0)
		goto out;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (st.st_size <= 0 || st.st_size > 1024 * 1024) {
		rc = -EIO;
		goto out;
	}
	buf = xmalloc((size_t)st.st_size);
	if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		rc = -EIO;
		goto out;
	}
	*bpf = buf;
	*len = (size_t)st.st_size;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}
