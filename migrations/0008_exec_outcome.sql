-- Why a command ended (issue 27): the OOM killer ended a task of it (its
-- memory limit or its tenant's budget), a pids limit refused one of its
-- forks, or it ran uncontained (no cgroups: rlimits only). Kept on its
-- exec row (the ShellResult in result says the same) and on the audit
-- record of the request that ran it, so an operator can find the
-- commands their limits ended (`WHERE oom_killed`) without parsing
-- results. 0 for every row written before (and for requests that ran
-- nothing).
ALTER TABLE execs ADD COLUMN oom_killed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE execs ADD COLUMN pids_limited INTEGER NOT NULL DEFAULT 0;
ALTER TABLE execs ADD COLUMN uncontained INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit ADD COLUMN oom_killed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit ADD COLUMN pids_limited INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit ADD COLUMN uncontained INTEGER NOT NULL DEFAULT 0;
