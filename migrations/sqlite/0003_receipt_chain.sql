-- heart-fleet migration 0003 (SQLite): the receipt chain.
--
-- A chained receipt carries its position in its run's log (`seq`, from 1), the link of the
-- receipt before it (`prev`) and its own `link` (see docs/ARCHITECTURE.md, "Receipts"). They
-- live in the `receipt` JSON as written, so the columns of the receipts table stay the
-- reference's. This index makes a position in a run's chain one row: two writers that chained
-- a receipt after the same head cannot both append it (the second insert finds the position
-- taken, re-reads the head and chains again). Receipts without `seq` (unchained: a TypeScript
-- node's, or older ones) are not constrained (NULL). It also serves the head lookup.
-- Idempotent: safe to run twice.

CREATE UNIQUE INDEX IF NOT EXISTS heart_receipts_chain
  ON heart_receipts (run_id, json_extract(receipt, '$.seq'));
