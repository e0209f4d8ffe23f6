/* sbx watch (the tenant's feed, or one exec's events, followed across
 * broken connections until Ctrl-C) and sbx audit (the history, a page or
 * all of them). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli/cli.h"

static struct sbxc_cancel *watch_stop; /* fired by SIGINT/SIGTERM (async-signal-safe) */

static void on_stop_signal(int sig)
{
	(void)sig;
	sbxc_cancel_fire(watch_stop);
}

struct watch {
	struct cli *c;
	long count, max;
	struct cli_term out; /* the commands' output, neutralised (cli.h) */
};

/* A string field of an event, as cli_term_puts prints it. */
static void put_field(json_t *d, const char *name)
{
	json_t *v = json_object_get(d, name);
	cli_term_puts(stdout, json_string_value(v) ?: "", json_string_length(v));
}

/* What tenants wrote (output, commands, sessions) is neutralised: a
 * command's escape sequences must not drive the watcher's terminal. */
static void print_human(struct watch *w, const struct sbxc_event *ev, json_t *d)
{
	const char *exec = json_string_value(json_object_get(d, "id"));
	if (strcmp(ev->name, "output") == 0) {
		json_t *data = json_object_get(d, "data");
		cli_term_write(&w->out, stdout, json_string_value(data) ?: "", json_string_length(data));
	} else if (strcmp(ev->name, "start") == 0) {
		printf("start     %s ", exec ?: "-");
		put_field(d, "session");
		fputs(": ", stdout);
		put_field(d, "command");
		fputs("\n", stdout);
	} else if (strcmp(ev->name, "heartbeat") == 0) {
		printf("heartbeat %s %lldms stdout=%lld stderr=%lld\n", exec ?: "-",
		       (long long)json_integer_value(json_object_get(d, "elapsed_ms")),
		       (long long)json_integer_value(json_object_get(d, "stdout_bytes")),
		       (long long)json_integer_value(json_object_get(d, "stderr_bytes")));
	} else if (strcmp(ev->name, "exit") == 0) {
		printf("exit      %s code=%lld%s%s%s%s%s %lldms\n", exec ?: "-",
		       (long long)json_integer_value(json_object_get(d, "exit_code")),
		       json_is_true(json_object_get(d, "timed_out")) ? " timed_out" : "",
		       json_is_true(json_object_get(d, "cancelled")) ? " cancelled" : "",
		       json_is_true(json_object_get(d, "oom_killed")) ? " oom_killed" : "",
		       json_is_true(json_object_get(d, "pids_limited")) ? " pids_limited" : "",
		       json_is_true(json_object_get(d, "uncontained")) ? " uncontained" : "",
		       (long long)json_integer_value(json_object_get(d, "duration_ms")));
	} else if (strcmp(ev->name, "gap") == 0) {
		printf("gap       events before %lld are no longer kept (sbx ls of execs: GET /execs)\n",
		       (long long)json_integer_value(json_object_get(d, "first_id")));
	} else {
		printf("%-9s ", ev->name);
		cli_term_puts(stdout, ev->data, ev->data_len);
		fputs("\n", stdout);
	}
}

static int on_event(void *arg, const struct sbxc_event *ev)
{
	struct watch *w = arg;
	json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
	if (w->c->json) {
		json_t *o = json_pack("{s:s?, s:s, s:O?}", "id", ev->id, "event", ev->name, "data", d);
		if (!d)
			json_object_set_new(o, "data", json_stringn(ev->data, ev->data_len));
		cli_print_json(o);
	} else {
		print_human(w, ev, d);
	}
	json_decref(d);
	fflush(stdout);
	return w->max > 0 && ++w->count >= w->max;
}

int cmd_watch(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"exec", required_argument, NULL, 'x'},   {"output", no_argument, NULL, 'o'},
	    {"tenant", required_argument, NULL, 'T'}, {"last-event-id", required_argument, NULL, 'L'},
	    {"count", required_argument, NULL, 'n'},  {NULL, 0, NULL, 0}};
	struct sbxc_follow f = {0};
	struct watch w = {.c = c};
	int ch;
	while ((ch = getopt_long(argc, argv, "x:on:", opts, NULL)) != -1) {
		if (ch == 'x')
			f.exec_id = optarg;
		else if (ch == 'o')
			f.output = true;
		else if (ch == 'T')
			f.tenant = optarg;
		else if (ch == 'L')
			f.last_event_id = optarg;
		else if (ch == 'n')
			w.max = strtol(optarg, NULL, 10);
		else
			return CLI_USAGE;
	}
	if (optind != argc)
		return cli_usage("watch takes no operands");
	sbxc_cancel_new(&watch_stop);
	struct sigaction sa = {.sa_handler = on_stop_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	struct sbxc_call call = c->call;
	call.cancel = watch_stop;
	struct sbxc_err err;
	int rc = sbxc_follow(c->h, &call, &f, on_event, &w, &err);
	sbxc_cancel_free(&watch_stop);
	if (rc < 0 && rc != -ECANCELED)
		return cli_fail(c, "watch", rc, &err);
	return CLI_OK;
}

static void print_record(const struct sbxc_audit_record *r)
{
	printf("%-8lld %-27s %-3ld %-6s %-6s %-22s ", (long long)r->id, r->at ?: "", r->status,
	       r->outcome ?: "", r->method ?: "", r->route ?: "");
	cli_term_puts(stdout, r->target ?: "", strlen(r->target ?: "")); /* a tenant's command or path */
	fputs("\n", stdout);
}

static json_t *record_json(const struct sbxc_audit_record *r)
{
	json_t *o = json_pack(
	    "{s:I, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:i, s:s?, s:I, s:I, s:I, s:s?}", "id",
	    (json_int_t)r->id, "at", r->at, "tenant", r->tenant, "session", r->session, "request_id",
	    r->request_id, "method", r->method, "route", r->route, "target", r->target, "status",
	    (int)r->status, "outcome", r->outcome, "bytes_in", (json_int_t)r->bytes_in, "bytes_out",
	    (json_int_t)r->bytes_out, "duration_ms", (json_int_t)r->duration_ms, "client", r->client);
	json_object_set_new(o, "exit_code", r->has_exit_code ? json_integer(r->exit_code) : json_null());
	return o;
}

static int parse_audit(int argc, char **argv, struct sbxc_audit_query *q, bool *all)
{
	static const struct option opts[] = {{"since", required_argument, NULL, 'S'},
					     {"until", required_argument, NULL, 'U'},
					     {"route", required_argument, NULL, 'r'},
					     {"outcome", required_argument, NULL, 'o'},
					     {"for-session", required_argument, NULL, 'k'},
					     {"tenant", required_argument, NULL, 'T'},
					     {"limit", required_argument, NULL, 'n'},
					     {"after", required_argument, NULL, 'a'},
					     {"all", no_argument, NULL, 'A'},
					     {NULL, 0, NULL, 0}};
	int ch;
	while ((ch = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
		switch (ch) {
		case 'S':
			q->since = optarg;
			break;
		case 'U':
			q->until = optarg;
			break;
		case 'r':
			q->route = optarg;
			break;
		case 'o':
			q->outcome = optarg;
			break;
		case 'k':
			q->session = optarg;
			break;
		case 'T':
			q->tenant = optarg;
			break;
		case 'n':
			q->limit = (int)strtol(optarg, NULL, 10);
			break;
		case 'a':
			q->after = optarg;
			break;
		case 'A':
			*all = true;
			break;
		default:
			return CLI_USAGE;
		}
	}
	return optind == argc ? 0 : cli_usage("audit takes no operands");
}

int cmd_audit(struct cli *c, int argc, char **argv)
{
	struct sbxc_audit_query q = {0};
	bool all = false;
	int rc = parse_audit(argc, argv, &q, &all);
	if (rc)
		return rc;
	json_t *records = json_array();
	char *cursor = NULL, *next = NULL;
	do {
		struct sbxc_audit_record *v = NULL;
		size_t n = 0;
		struct sbxc_err err;
		q.after = cursor ? cursor : q.after;
		rc = sbxc_audit_page(c->h, &c->call, &q, &v, &n, &next, &err);
		if (rc < 0) {
			free(cursor);
			json_decref(records);
			return cli_fail(c, "audit", rc, &err);
		}
		for (size_t i = 0; i < n; i++)
			if (c->json)
				json_array_append_new(records, record_json(&v[i]));
			else
				print_record(&v[i]);
		sbxc_audit_free(v, n);
		free(cursor);
		cursor = next;
	} while (all && cursor);
	if (c->json)
		cli_print_json(json_pack("{s:o, s:s?}", "records", records, "next", cursor));
	else
		json_decref(records);
	if (!c->json && cursor && !c->quiet)
		fprintf(stderr, "sbx: more records: --after %s (or --all)\n", cursor);
	free(cursor);
	return CLI_OK;
}
