package redisfence

import "github.com/redis/go-redis/v9"

// The scripts. Each takes the fence key as KEYS[1] and the token, in
// decimal, as ARGV[1]; the write's own keys and arguments follow. Tokens
// are compared as decimal strings (length first), not as Lua numbers,
// which are doubles and would lose precision above 2^53.
//
// Each script checks first, writes next and records the token last, and
// refuses a key of the wrong type before it writes anything, so an error
// leaves both the data and the fence as they were.

// checkLua refuses a stale token. It defines tenure_fkey, tenure_token and
// tenure_highest (names a script body of the caller's will not clash
// with) for what follows.
const checkLua = `local tenure_fkey, tenure_token = KEYS[1], ARGV[1]
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
`

// recordLua records the token; the scripts end with it. The same token
// again (a holder's next write) is already recorded.
const recordLua = `if tenure_highest ~= tenure_token then
	redis.call('SET', tenure_fkey, tenure_token)
end
`

// setScript: KEYS[2] key; ARGV[2] value, ARGV[3] ttl in ms (0: none).
var setScript = redis.NewScript(checkLua + `local key = KEYS[2]
local kt = redis.call('TYPE', key)['ok']
if kt ~= 'none' and kt ~= 'string' then
	return redis.error_reply('TENURE_WRONGTYPE ' .. key .. ' holds a ' .. kt .. ', not a string')
end
if ARGV[3] ~= '0' then
	redis.call('SET', key, ARGV[2], 'PX', ARGV[3])
else
	redis.call('SET', key, ARGV[2])
end
` + recordLua + `return redis.status_reply('OK')
`)

// hsetScript: KEYS[2] key; ARGV[2..] field, value pairs. HSET on a key of
// another type fails before it changes anything.
var hsetScript = redis.NewScript(checkLua + `local key = KEYS[2]
local n = redis.pcall('HSET', key, unpack(ARGV, 2))
if type(n) == 'table' and n.err then
	return redis.error_reply('TENURE_WRONGTYPE ' .. key .. ' holds a ' .. redis.call('TYPE', key)['ok'] .. ', not a hash')
end
` + recordLua + `return n
`)

// delScript: KEYS[2..] the keys to delete.
var delScript = redis.NewScript(checkLua + `local n = redis.call('DEL', unpack(KEYS, 2))
` + recordLua + `return n
`)

// advanceScript records the token and writes nothing else.
var advanceScript = redis.NewScript(checkLua + recordLua + `return redis.status_reply('OK')
`)

// readScript returns the fence, as a string (nil for none), refusing a
// fence key of another type.
var readScript = redis.NewScript(`local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
	return redis.error_reply('TENURE_WRONGTYPE the fence key ' .. KEYS[1] .. ' is not a string: ' .. v.err)
end
return v
`)
