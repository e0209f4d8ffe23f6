-- The id the `exit` event of an exec had on its live stream: a finished
-- exec replays `start` (id 1) and `exit` with the ids they were sent with.
-- NULL for rows finished before this column (and for commands that never
-- started): they replay as start 1, exit 2.
ALTER TABLE execs ADD COLUMN exit_event_id INTEGER;
