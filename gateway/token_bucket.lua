-- Atomic token bucket shared by every gateway replica.
-- KEYS[1] = bucket state hash (tokens, ts): the only key the script writes
-- ARGV[1] = cost in tokens, ARGV[2] = default rate, ARGV[3] = default burst (no limit published yet)
-- ARGV[4] = name of the limit hash published by the daemon (rate, burst, reason). An argument, not a KEY:
-- Redis' ACL counts every KEY of EVALSHA as written, and the gateway's user may only read the limits
-- (deploy/redis/users.acl); the HMGET below is checked as the read it is.
-- Returns {allowed 0/1, tokens left, retry-after seconds, rate, reason}; numbers as strings
-- because Redis would truncate Lua floats to integers.
local lim = redis.call('HMGET', ARGV[4], 'rate', 'burst', 'reason')
-- a published value that is not a number >= 0 (NaN, negative, garbage) counts as not published; inf is unlimited
local function usable(x)
  return x ~= nil and x == x and x >= 0
end
local rate = tonumber(lim[1])
if not usable(rate) then
  rate = tonumber(ARGV[2])
end
local burst = tonumber(lim[2])
if not usable(burst) then
  burst = tonumber(ARGV[3])
end
local reason = lim[3] or 'default limit'
local cost = tonumber(ARGV[1])
-- a bucket must hold at least one request, or a small rate (burst = rate * burst_seconds < cost) would refuse
-- every request forever while Retry-After promises a time
if burst < cost then
  burst = cost
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
if now > ts then
  tokens = tokens + (now - ts) * rate
end
if tokens > burst then
  tokens = burst
end
local allowed = 0
local retry = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
elseif rate > 0 then
  retry = (cost - tokens) / rate
else
  retry = -1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
-- the state lives as long as a refill from empty takes (at most 30 days; inf / inf is NaN), plus a minute
local life = burst / math.max(rate, 0.001)
if life ~= life or life > 2592000 then
  life = 2592000
end
redis.call('PEXPIRE', KEYS[1], math.ceil(life * 1000) + 60000)
return {allowed, tostring(tokens), tostring(retry), tostring(rate), reason}
