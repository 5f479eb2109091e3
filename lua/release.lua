-- Shared by the release scripts that keep an unlock latch (see src/script.rs and
-- src/latches.rs): the latch redisson_unlock_latch:{<raw>}:<id>, which records
-- "<request id>:<outcome>" of the last release that used it, and the release of one hold.

-- The outcome recorded when the owner held nothing. Java records only numbers; a number
-- here would replay as a release that happened.
local NOT_HELD = 'none'

-- A resent release (same request id) must not release a second time: returns true and the
-- reply its first run recorded (nil for NOT_HELD), or false when the latch records no run of
-- this request (nothing, or another, earlier request of the same latch key). A first send
-- (`resent` false) cannot have run before: the latch is not read.
local function latch_replay(latch, request, resent)
    if not resent then
        return false
    end
    local recorded = redis.call('get', latch)
    if not recorded then
        return false
    end
    local prefix = request .. ':'
    if string.sub(recorded, 1, #prefix) ~= prefix then
        return false
    end
    local outcome = string.sub(recorded, #prefix + 1)
    if outcome == NOT_HELD then
        return true, nil
    end
    return true, tonumber(outcome)
end

-- Records the reply `outcome` (0, 1, or nil for "not held") of `request` in the latch for
-- `ttl` ms, so that a resend replays it; returns it for the script to reply.
local function latch_record(latch, ttl, request, outcome)
    local value = outcome
    if value == nil then
        value = NOT_HELD
    end
    redis.call('set', latch, request .. ':' .. value, 'px', ttl)
    return outcome
end

-- One hold of `field` fewer. While others remain, the key lives `lease` ms from now: what
-- the caller computed that the owner's other holds need. Returns how many remain.
local function drop_hold(key, field, lease)
    local left = redis.call('hincrby', key, field, -1)
    if left > 0 then
        redis.call('pexpire', key, lease)
    end
    return left
end

-- Redisson's release of one hold of `owner` in a reentrant lock hash: nil when it holds
-- none (nothing changes); 0 when holds remain (see drop_hold); 1 when that was the last
-- hold and the hash is deleted.
local function release_hold(key, owner, lease)
    if redis.call('hexists', key, owner) == 0 then
        return nil
    end
    if drop_hold(key, owner, lease) > 0 then
        return 0
    end
    redis.call('del', key)
    return 1
end
