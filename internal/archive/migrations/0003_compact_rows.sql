-- Schema version 3: a smaller reservation row (issue 22 asks for at most
-- 400 B of table plus indexes per archived reservation).
--
-- * grace_ms, ext_count and max_ext get the narrowest type their values
--   need (a value that does not fit stays in the row's replay bytes, as any
--   value a column cannot hold exactly).
-- * policy and unit are codes (cycles_policies and cycles_units name them):
--   policy 1 REJECT, 2 ALLOW_IF_AVAILABLE, 3 ALLOW_WITH_OVERDRAFT; unit 1
--   USD_MICROCENTS, 2 TOKENS, 3 CREDITS, 4 RISK_POINTS (the cycles.v1.Unit
--   numbers); 0 absent. The migration fails on a row with any other text
--   there; cyclesd never wrote one.
-- * The action {"kind":K,"name":N} is stored as action_kind and
--   action_name when K and N need no JSON escaping (the common case, and
--   the columns an analyst groups by); any other action stays whole in
--   action, and rows written before keep theirs there.
-- * reservation_id is '' (not NULL) for the canonical ids kept as rid: a
--   row without NULLs has no null bitmap (8 B less per committed row).

UPDATE cycles_reservations SET reservation_id = '' WHERE reservation_id IS NULL;

ALTER TABLE cycles_reservations
    ALTER COLUMN grace_ms TYPE integer,
    ALTER COLUMN ext_count TYPE smallint,
    ALTER COLUMN max_ext TYPE smallint,
    ALTER COLUMN policy DROP DEFAULT,
    ALTER COLUMN policy TYPE smallint USING (CASE policy
        WHEN '' THEN 0 WHEN 'REJECT' THEN 1 WHEN 'ALLOW_IF_AVAILABLE' THEN 2 WHEN 'ALLOW_WITH_OVERDRAFT' THEN 3 END),
    ALTER COLUMN policy SET DEFAULT 0,
    ALTER COLUMN unit TYPE smallint USING (CASE unit
        WHEN '' THEN 0 WHEN 'USD_MICROCENTS' THEN 1 WHEN 'TOKENS' THEN 2 WHEN 'CREDITS' THEN 3 WHEN 'RISK_POINTS' THEN 4 END),
    ALTER COLUMN reservation_id SET DEFAULT '',
    ALTER COLUMN reservation_id SET NOT NULL,
    ADD COLUMN action_kind text NOT NULL DEFAULT '',
    ADD COLUMN action_name text NOT NULL DEFAULT '';

-- The codes' names, for analysts' joins.
CREATE TABLE cycles_policies (
    code smallint PRIMARY KEY,
    name text     NOT NULL
);
INSERT INTO cycles_policies VALUES (1, 'REJECT'), (2, 'ALLOW_IF_AVAILABLE'), (3, 'ALLOW_WITH_OVERDRAFT');
CREATE TABLE cycles_units (
    code smallint PRIMARY KEY,
    name text     NOT NULL
);
INSERT INTO cycles_units VALUES (1, 'USD_MICROCENTS'), (2, 'TOKENS'), (3, 'CREDITS'), (4, 'RISK_POINTS');
