-- tenure fence: highest.lua
-- The highest token accepted: the value of the fence key KEYS[1], nil for none.
-- Calling convention: README.md in this directory.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
	return redis.error_reply('TENURE_WRONGTYPE the fence key ' .. KEYS[1] .. ' is not a string: ' .. v.err)
end
return v
