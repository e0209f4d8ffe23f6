#pragma once
/* Backend `ssh`: a tenant's files and commands on a host reached over SSH
 * (sandbox/ssh.h does the protocol), a provider of routes/provider.h.
 *
 * Files: over SFTP, every path resolved under the policy's ssh_root with
 * the local routes' errors and renderings. Commands: one exec channel
 * each, on a job thread (routes/jobs.c), with the runner's events and
 * result; output is bounded by the same collector, without a spill file.
 * A host that cannot be reached, or a host key that is not the pinned
 * one, is 503 backend_unavailable with Retry-After 5 (and the reason in
 * the log and /readyz); a connection that breaks mid-command ends it with
 * 503 backend_unavailable (what became of it there is unknown).
 *
 * Threads: the provider's connections are pooled by sandbox/ssh.c, one
 * thread per connection at a time; the provider is freed with its tenant,
 * after its last job reported its exit. */
struct app;
struct route_policy;
struct route_provider;

/* Never fails: settings that cannot work (the key file's rules, a pin that
 * does not parse, `ssh` not offered) make every request 503 saying why. */
struct route_provider *route_ssh_new(struct app *a, const char *tenant, const struct route_policy *p);
