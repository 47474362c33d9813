-- heart-fleet migration 0004: the index the operator console reads receipts by.
--
-- `heart-fleet serve` counts receipts by event on every /metrics scrape and draws the last
-- hour's acquisitions, recoveries and quarantines from the receipts table. (event, at) serves
-- both from the index alone (an index-only count per event; a range of `at` per event for the
-- chart) instead of a scan of the whole table, which grows with every lease operation.
-- Idempotent: safe to run twice.

CREATE INDEX IF NOT EXISTS idx_heart_receipts_event_at ON heart_receipts (event, at);
