-- heart-fleet migration 0002 (SQLite): the store's clock.
--
-- A SQLite file has no server, so the clock of a request is the clock of the process that runs
-- it, and processes sharing a file may disagree (a clock stepped back by NTP, a container with
-- its own idea of time, a process under libfaketime). Exclusion is decided by comparing the
-- expiry one writer stamped with the clock of the next, so a clock that goes backwards would
-- let a lease be taken twice.
--
-- heart_clock holds the latest instant any request has used. Every request's first statement
-- (under BEGIN IMMEDIATE, so one writer at a time) is
--
--   INSERT INTO heart_clock (id, now) VALUES (1, <this process's clock>)
--   ON CONFLICT (id) DO UPDATE SET now = max(heart_clock.now, excluded.now) RETURNING now
--
-- so the store's clock never goes backwards, whoever's clock is behind. A process whose clock
-- is ahead moves it forward for everyone: leases then end early (safe: a holder whose lease
-- ended is fenced out), and the clock stands still until the others' clocks catch up, so until
-- then no lease expires and a dead holder's run waits (a liveness loss, never a safety one).
-- Idempotent: safe to run twice.

CREATE TABLE IF NOT EXISTS heart_clock (
  id  INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
  now TEXT NOT NULL CHECK (now GLOB
        '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z')
);
