-- tenure fence: set.lua
-- SET KEYS[2] to ARGV[2] (ARGV[3]: expiry in ms, 0 for none), fenced.
-- Calling convention: README.md in this directory.
-- tenure:check begin
-- KEYS[1] is the fence key, ARGV[1] the token in decimal. Tokens are
-- compared as decimal strings (length first), never as Lua numbers,
-- which are doubles and would round tokens above 2^53.
local tenure_fkey, tenure_token = KEYS[1], ARGV[1]
if type(tenure_fkey) ~= 'string' or tenure_fkey == '' then
	return redis.error_reply('TENURE_INVALID the fence key (KEYS[1]) is missing')
end
if type(tenure_token) ~= 'string' or not string.match(tenure_token, '^[1-9][0-9]*$') or #tenure_token > 20
	or (#tenure_token == 20 and tenure_token > '18446744073709551615') then
	return redis.error_reply('TENURE_INVALID token (ARGV[1]) ' .. string.format('%q', tostring(tenure_token)) .. ' is not a grant token: a decimal number from 1 to 2^64-1')
end
local tenure_highest = redis.pcall('GET', tenure_fkey)
if type(tenure_highest) == 'table' and tenure_highest.err then
	return redis.error_reply('TENURE_WRONGTYPE the fence key ' .. tenure_fkey .. ' is not a string: ' .. tenure_highest.err)
end
if tenure_highest and tenure_highest ~= tenure_token then
	if not string.match(tenure_highest, '^[1-9][0-9]*$') then
		return redis.error_reply('TENURE_WRONGTYPE the fence key ' .. tenure_fkey .. ' holds ' .. string.format('%q', tenure_highest) .. ', not a token')
	end
	if #tenure_highest > #tenure_token or (#tenure_highest == #tenure_token and tenure_highest > tenure_token) then
		return redis.error_reply('TENURE_STALE ' .. tenure_highest)
	end
end
-- tenure:check end
local key = KEYS[2]
local kt = redis.call('TYPE', key)['ok']
if kt ~= 'none' and kt ~= 'string' then
	return redis.error_reply('TENURE_WRONGTYPE ' .. key .. ' holds a ' .. kt .. ', not a string')
end
if ARGV[3] and ARGV[3] ~= '0' then
	redis.call('SET', key, ARGV[2], 'PX', ARGV[3])
else
	redis.call('SET', key, ARGV[2])
end
-- tenure:record begin
-- The same token again (a holder's next write) is already recorded.
if tenure_highest ~= tenure_token then
	redis.call('SET', tenure_fkey, tenure_token)
end
-- tenure:record end
return redis.status_reply('OK')
