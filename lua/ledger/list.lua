#!lua flags=no-writes
-- ledger/list: one page of the caller's reservations (docs/protocol.md#reads).
-- include: lib/ledger_util.lua lib/ledger_record.lua lib/keys.lua
-- Bounded work: scans at most ARGV[6] index entries per call (Go caps it),
-- so a page may hold fewer than `limit` rows (even none) while more remain;
-- the result then carries a position to continue from.
--
-- Read only (no-writes: it answers on a full Redis). An index entry whose
-- record outlived its retention is skipped, not removed: reserve.lua trims
-- the listing indexes of entries older than two retention periods.
-- KEYS: 1 tenant_prefix
--       2 index              the index to walk (created or expires index)
--       3 created_index
--       4 expires_index      unused; kept for the key layout
-- ARGV: 1 direction          'asc' | 'desc'
--       2 lowest             lowest score ('-inf' or ms)
--       3 highest            highest score ('+inf' or ms)
--       4 consumed           entries at the boundary score already consumed (cursor)
--       5 limit
--       6 scan_budget
--       7 filters            JSON {state, idem, segs = ["agent:x", ...], cf, ct, ef,
--                            et, ff, ft} (times as decimal strings, '' = unset;
--                            segs lowercased)
--       8 boundary_score     of the cursor ('' on the first page)
--       9 reserve_metadata   include reserve metadata ('1' | '0')
--       10 commit_metadata   include commit metadata ('1' | '0')
-- Result: ok({rows = [{<field> = <value>}...], more = bool, s = '<score>', k = '<n>',
--   rs = ['<score>'...], rk = ['<n>'...], lid = '<id>'})
--   (s, k) is the position after the last entry scanned; valid when more.
--   (rs[i], rk[i]) is the position right after rows[i], and lid the id of
--   the last entry scanned: a listing merged with the archive's rows
--   resumes after the last row it used and bounds the merge by (s, lid).
-- Order: by score, ties by reservation id (Redis sorted-set order).

local desc = (ARGV[1] == 'desc')
local lo, hi = ARGV[2], ARGV[3]
local skip = small_int(ARGV[4]) or 0
local limit = small_int(ARGV[5]) or 50
local budget = small_int(ARGV[6]) or 1000
local f = jdecode(ARGV[7]) or {}
-- Scores are integer milliseconds (< 2^53), compared as numbers: stores
-- format large scores differently.
local cur_s = small_int(ARGV[8])
local cur_k = skip
local with_meta, with_cmeta = ARGV[9] == '1', ARGV[10] == '1'

local function t(s)
  if s == nil or s == '' then return nil end
  return small_int(s)
end
local cf, ct, ef, et, ff, ft = t(f.cf), t(f.ct), t(f.ef), t(f.et), t(f.ff), t(f.ft)
local segs = f.segs
if type(segs) ~= 'table' then segs = {} end

local function within(v, a, b)
  if a == nil and b == nil then return true end
  if v == nil then return false end
  if a and v < a then return false end
  if b and v > b then return false end
  return true
end

local function matches(rec)
  if f.state and f.state ~= '' and rec.state ~= f.state then return false end
  if f.idem and f.idem ~= '' and rec.idem_key ~= f.idem then return false end
  local path = '/' .. (rec.scope_path or '') .. '/'
  for _, seg in ipairs(segs) do
    if not string.find(path, '/' .. seg .. '/', 1, true) then return false end
  end
  if not within(small_int(rec.created_at), cf, ct) then return false end
  if not within(small_int(rec.expires_at), ef, et) then return false end
  if not within(small_int(rec.finalized_at), ff, ft) then return false end
  return true
end

local rows, rs, rk, lid, scanned, stop = {}, {}, {}, '', 0, false
while not stop and scanned < budget and #rows < limit do
  local chunk = math.min(100, budget - scanned)
  local page
  if desc then
    page = redis.call('ZREVRANGEBYSCORE', KEYS[2], cur_s and ms(cur_s) or hi, lo, 'WITHSCORES', 'LIMIT', cur_s and cur_k or 0, chunk)
  else
    page = redis.call('ZRANGEBYSCORE', KEYS[2], cur_s and ms(cur_s) or lo, hi, 'WITHSCORES', 'LIMIT', cur_s and cur_k or 0, chunk)
  end
  if #page == 0 then stop = true end
  for j = 1, #page, 2 do
    local id, score = page[j], tonumber(page[j + 1])
    scanned = scanned + 1
    if score == cur_s then cur_k = cur_k + 1 else cur_s, cur_k = score, 1 end
    lid = id
    local key = key_reservation(KEYS[1], id)
    local rec = read_record(key, #RECORD_FIELDS - 2)
    -- rec == nil: the record outlived its retention; its index entry is
    -- skipped (and counted against the scan budget).
    if rec ~= nil and matches(rec) then
      if with_meta or with_cmeta then
        local m = redis.call('HMGET', key, 'metadata', 'committed_metadata')
        if with_meta and m[1] then rec.metadata = m[1] end
        if with_cmeta and m[2] then rec.committed_metadata = m[2] end
      end
      rows[#rows + 1] = rec
      rs[#rows], rk[#rows] = ms(cur_s), ms(cur_k)
      if #rows >= limit then break end
    end
  end
end

-- More entries after the position?
local more = false
if cur_s ~= nil then
  local peek
  if desc then
    peek = redis.call('ZREVRANGEBYSCORE', KEYS[2], ms(cur_s), lo, 'LIMIT', cur_k, 1)
  else
    peek = redis.call('ZRANGEBYSCORE', KEYS[2], ms(cur_s), hi, 'LIMIT', cur_k, 1)
  end
  more = #peek > 0
end

return ok({rows = rows, more = more, s = cur_s and ms(cur_s) or '', k = ms(cur_k), rs = rs, rk = rk, lid = lid})
