#pragma once
/* Internal to sandbox/egress/: one parsed rule of rules.h, as rules.c
 * keeps it, open to white-box checks of what the parser accepted
 * (tests/fuzz/fuzz_netallow.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/egress/rules.h"

enum sbx_egress_kind {
	SBX_EGRESS_NAME, /* name: that name */
	SBX_EGRESS_WILD, /* name: the names below it (the rule's text less "*.") */
	SBX_EGRESS_ANY,	 /* any name */
	SBX_EGRESS_ADDR, /* family, addr (network order), prefix */
};

struct sbx_egress_rule {
	bool deny;
	enum sbx_egress_kind kind;
	int family;
	uint8_t addr[16];
	unsigned prefix;
	char name[SBX_EGRESS_NAME_MAX + 1]; /* lowercase */
	size_t namelen;
	uint16_t lo, hi; /* 1..65535 when the rule names none */
	bool has_port;
	const char *text; /* the rule as written (in the spec, not terminated) */
	int textlen;
};

/* i < sbx_egress_rules_count(r); owned by r. */
const struct sbx_egress_rule *sbx_egress_rules_at(const struct sbx_egress_rules *r, size_t i);
