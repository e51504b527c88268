-- lib/idem_hash.lua: comparing payload hashes (lib/idem.lua), on its own so
-- that commit and release, which keep their hash in the reservation record,
-- include only this. Included with "-- include: lib/idem_hash.lua".

-- idem_same: does a stored payload hash (a record's, or a reservation's
-- commit/release hash) belong to the same payload as hash? A 64-hex hash
-- stored before hashes were shortened matches the 22-character base64url
-- form of its first 16 bytes.
local function idem_same(stored, hash)
  if stored == hash then return true end
  if type(stored) ~= 'string' or #stored ~= 64 or #hash ~= 22 then return false end
  local A = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  local bits, nbits, hex = 0, 0, {}
  for i = 1, 22 do
    local v = string.find(A, string.sub(hash, i, i), 1, true)
    if v == nil then return false end
    bits, nbits = bits * 64 + v - 1, nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      local byte = math.floor(bits / 2 ^ nbits)
      bits = bits - byte * 2 ^ nbits
      hex[#hex + 1] = string.format('%02x', byte)
    end
  end
  return string.lower(string.sub(stored, 1, 32)) == table.concat(hex)
end
