-- lib/paging.lua: the paging arguments of the read scripts that walk a
-- sorted set or a stream one bounded page at a time (the tenant registry,
-- the archive's streams and queue, a tenant's event stream). Included with
-- "-- include: lib/paging.lua". One table, so the Functions library's chunk
-- gains one local, not one per helper.
local paging = {}

-- paging.size parses a page, batch or window size argument: a whole number
-- in 1..max. Returns the number, or nil and the INVALID_REQUEST refusal that
-- names what (e.g. 'batch size') and the range, for the script to return
-- before it reads anything.
function paging.size(arg, max, what)
  local n = tonumber(arg)
  if not n or n < 1 or n > max or n ~= math.floor(n) then
    return nil, fail('INVALID_REQUEST', what .. ' must be 1..' .. max)
  end
  return n
end

-- paging.after is the exclusive lower bound of the page after cursor, for
-- ZRANGEBYLEX (a member) and XRANGE (a stream id) alike: '(' .. cursor, or
-- '-' (from the first) when cursor is '' or absent. The cursor is a member
-- or an id, not an offset, so entries added during a walk never shift it.
function paging.after(cursor)
  if cursor == nil or cursor == '' then return '-' end
  return '(' .. cursor
end
