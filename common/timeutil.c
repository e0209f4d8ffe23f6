#include "common/timeutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t mono_ms(void)
{
	return mono_ns() / 1000000;
}

void rfc3339_ms(int64_t ms, char *out, size_t outsz)
{
	time_t s = (time_t)(ms / 1000);
	int frac = (int)(ms % 1000);
	if (frac < 0) {
		frac += 1000;
		s -= 1;
	}
	struct tm tm;
	gmtime_r(&s, &tm);
	snprintf(out, outsz, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

static int digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return -EINVAL;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return 0;
}

int rfc3339_parse(const char *s, int64_t *ms)
{
	const char *p = s;
	int Y, M, D, h, m, sec;
	if (!*s)
		return -EINVAL;
	if (strspn(s, "0123456789") == strlen(s)) {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (errno || *end)
			return -EINVAL;
		*ms = v;
		return 0;
	}
	if (digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' || digits(&p, 2, &D))
		return -EINVAL;
	if (*p != 'T' && *p != 't' && *p != ' ')
		return -EINVAL;
	p++;
	if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m) || *p++ != ':' || digits(&p, 2, &sec))
		return -EINVAL;
	if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
		return -EINVAL;
	int frac_ms = 0;
	if (*p == '.') {
		p++;
		int n = 0;
		while (isdigit((unsigned char)*p)) {
			if (n < 3)
				frac_ms = frac_ms * 10 + (*p - '0');
			n++;
			p++;
		}
		if (n == 0)
			return -EINVAL;
		for (; n < 3; n++)
			frac_ms *= 10;
	}
	int off_s = 0;
	if (*p == 'Z' || *p == 'z')
		p++;
	else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, oh, om;
		p++;
		if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om))
			return -EINVAL;
		off_s = sign * (oh * 3600 + om * 60);
	} else
		return -EINVAL;
	if (*p)
		return -EINVAL;
	struct tm tm = {
	    .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = sec};
	time_t t = timegm(&tm);
	*ms = ((int64_t)t - off_s) * 1000 + frac_ms;
	return 0;
}
