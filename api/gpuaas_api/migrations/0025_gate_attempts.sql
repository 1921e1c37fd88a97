-- Staging gates count their claims (docs/control-service.md "Promotion gates"): a build whose checks get the worker
-- killed (or its lease lost) every time fails its gate after the third claim instead of being claimed forever.
ALTER TABLE promotion_gates ADD COLUMN attempts integer NOT NULL DEFAULT 0;
