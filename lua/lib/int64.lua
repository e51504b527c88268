-- int64.lua: exact signed 64-bit decimal arithmetic for Redis Lua (5.1, doubles).
--
-- Amounts are carried as canonical decimal strings ("-12", "0", "9223372036854775807").
-- Values with at most 15 characters are below 2^53 in magnitude, so they take a
-- native fast path; anything longer is computed digit-wise in base 10^7 limbs.
-- Every function returns nil instead of a value outside [-2^63, 2^63-1]; callers
-- refuse the operation (AMOUNT_OVERFLOW) before the first write, so HINCRBY never
-- fails halfway through a script. Loops are bounded by the digit count (<= 20).

local I64_MAX_MAG = '9223372036854775807'
local I64_MIN_MAG = '9223372036854775808'

local function mag_cmp(a, b)
  if #a ~= #b then return (#a < #b) and -1 or 1 end
  if a == b then return 0 end
  return (a < b) and -1 or 1
end

local function strip_zeros(s)
  local r = string.gsub(s, '^0+', '')
  if r == '' then return '0' end
  return r
end

local function mag_add(a, b)
  local n = math.max(#a, #b)
  a = string.rep('0', n - #a) .. a
  b = string.rep('0', n - #b) .. b
  local out, carry, i = {}, 0, n
  while i > 0 do
    local j = math.max(1, i - 6)
    local w = i - j + 1
    local s = tonumber(string.sub(a, j, i)) + tonumber(string.sub(b, j, i)) + carry
    local base = 10 ^ w
    if s >= base then carry = 1; s = s - base else carry = 0 end
    table.insert(out, 1, string.format('%0' .. w .. '.0f', s))
    i = j - 1
  end
  if carry > 0 then table.insert(out, 1, '1') end
  return strip_zeros(table.concat(out))
end

-- a >= b required.
local function mag_sub(a, b)
  local n = #a
  b = string.rep('0', n - #b) .. b
  local out, borrow, i = {}, 0, n
  while i > 0 do
    local j = math.max(1, i - 6)
    local w = i - j + 1
    local s = tonumber(string.sub(a, j, i)) - tonumber(string.sub(b, j, i)) - borrow
    if s < 0 then borrow = 1; s = s + 10 ^ w else borrow = 0 end
    table.insert(out, 1, string.format('%0' .. w .. '.0f', s))
    i = j - 1
  end
  return strip_zeros(table.concat(out))
end

local function split_sign(s)
  if string.sub(s, 1, 1) == '-' then return true, string.sub(s, 2) end
  return false, s
end

local function in_range(neg, mag)
  return mag_cmp(mag, neg and I64_MIN_MAG or I64_MAX_MAG) <= 0
end

-- i64_norm validates and canonicalizes a decimal integer (string or number).
-- Returns nil when it is not an integer or lies outside int64.
local function i64_norm(v)
  if v == nil or v == false then return '0' end
  if type(v) == 'number' then
    if v ~= math.floor(v) or v >= 2^53 or v <= -2^53 then return nil end
    if v == 0 then return '0' end
    return string.format('%d', v)
  end
  -- Canonical already (every stored amount and most arguments): one
  -- pattern match instead of match, gsub and a range check.
  if v == '0' or (#v < 16 and string.find(v, '^%-?[1-9]%d*$')) then return v end
  local sign, digits = string.match(v, '^(%-?)(%d+)$')
  if not digits then return nil end
  digits = strip_zeros(digits)
  if digits == '0' then return '0' end
  local neg = sign == '-'
  if not in_range(neg, digits) then return nil end
  return (neg and '-' or '') .. digits
end

-- The fast paths below convert by arithmetic (a - b) rather than tonumber:
-- Lua's tonumber() parses its argument twice (lua_isnumber, then
-- lua_tonumber: two strtod calls), an arithmetic operand once. Equal
-- strings (interned: a pointer comparison) need no conversion at all.
local function i64_cmp(a, b)
  if a == b then return 0 end
  if #a < 16 and #b < 16 then
    local d = a - b
    if d == 0 then return 0 end
    return (d < 0) and -1 or 1
  end
  local an, am = split_sign(a)
  local bn, bm = split_sign(b)
  if an ~= bn then return an and -1 or 1 end
  local c = mag_cmp(am, bm)
  if an and c ~= 0 then return -c end
  return c
end

local function i64_add(a, b)
  if #a < 16 and #b < 16 then
    -- %d, not %.0f: an exact integer (< 2^53) formats as a C long without
    -- the floating-point printer (a fifth of a reserve's instructions).
    local r = a + b
    if r == 0 then return '0' end
    return string.format('%d', r)
  end
  local an, am = split_sign(a)
  local bn, bm = split_sign(b)
  local neg, mag
  if an == bn then
    neg, mag = an, mag_add(am, bm)
  else
    local c = mag_cmp(am, bm)
    if c == 0 then return '0' end
    if c > 0 then neg, mag = an, mag_sub(am, bm) else neg, mag = bn, mag_sub(bm, am) end
  end
  if mag == '0' then return '0' end
  if not in_range(neg, mag) then return nil end
  return (neg and '-' or '') .. mag
end

local function i64_neg(a)
  if a == '0' then return '0' end
  if string.sub(a, 1, 1) == '-' then return string.sub(a, 2) end
  return '-' .. a
end

-- a - b (b may be int64 min: its negation is only an intermediate).
local function i64_sub(a, b)
  if #a < 16 and #b < 16 then
    -- As i64_add's fast path, without building the negated string first.
    local r = a - b
    if r == 0 then return '0' end
    return string.format('%d', r)
  end
  return i64_add(a, i64_neg(b))
end

local function i64_min(a, b) if i64_cmp(a, b) <= 0 then return a end return b end
local function i64_max(a, b) if i64_cmp(a, b) >= 0 then return a end return b end
local function i64_pos(a) return i64_max(a, '0') end

-- i64_add_sat saturates at int64 max instead of failing (aggregates only).
local function i64_add_sat(a, b)
  local r = i64_add(a, b)
  if r == nil then
    if string.sub(a, 1, 1) == '-' then return '-' .. I64_MIN_MAG end
    return I64_MAX_MAG
  end
  return r
end
