-- Shared by the release scripts that keep an unlock latch (see src/script.rs and
-- src/latches.rs): the latch redisson_unlock_latch:{<raw>}:<id>, which records
-- "<request id>:<outcome>" of the last release that used it, and the release of one hold.
-- Put after publish.lua, whose notify_before_writing it calls.

-- The outcome recorded when the owner held nothing. Java records only numbers; a number
-- here would replay as a release that happened.
local NOT_HELD = 'none'

-- The outcome of a last release that handed the lock to a waiter (lock_hand_off.lua).
local HANDED_OVER = 2

-- The record of `request` with the reply `outcome` (nil, 0, 1 or HANDED_OVER, the only
-- replies a release has), spelled out rather than converted: Lua formats a number with
-- sprintf.
local function latch_value(request, outcome)
    if outcome == nil then
        return request .. ':' .. NOT_HELD
    elseif outcome == 0 then
        return request .. ':0'
    elseif outcome == HANDED_OVER then
        return request .. ':2'
    end
    return request .. ':1'
end

-- The reply a latch record `recorded` gives for `request`: true and that reply when the
-- record is this request's (a send of it already ran); false when it is another's. A hand-off
-- that issued a fencing token records it after the outcome (see record_token), and replays
-- as {HANDED_OVER, token}, the token as the digits recorded.
local function latch_reply(recorded, request)
    local prefix = request .. ':'
    if not recorded or string.sub(recorded, 1, #prefix) ~= prefix then
        return false
    end
    local outcome = string.sub(recorded, #prefix + 1)
    if outcome == NOT_HELD then
        return true, nil
    end
    local token = string.match(outcome, '^2:(%d+)$')
    if token then
        return true, {HANDED_OVER, token}
    end
    return true, tonumber(outcome)
end

-- Completes the record of a hand-off that issued the fencing token `token` to the heir (an
-- integer reply of INCR), so that a resend replays the token too. Written after latch_claim
-- recorded the outcome, which was the release's first write.
local function record_token(latch, ttl, request, token)
    local value = request .. ':2:' .. string.format('%d', token)
    redis.call('set', latch, value, 'px', ttl)
end

-- A send of a release that already ran (same request id: a resend, or a first send that
-- arrives after its resend) must not release a second time, so every send reads the latch
-- (a first send delayed on a dead connection can run after its resend did). A release
-- knows its outcome before it writes: this records `outcome` (0, 1, or nil for "not held")
-- for `ttl` ms and reads the record it replaces, in one command. When that was this
-- request's, the record is put back and true is returned with its reply; the caller then
-- writes nothing. Otherwise false: the caller goes on to release.
-- This is the release's first write: the caller has asked for the writes after it (see
-- permit.lua).
local function latch_claim(latch, ttl, request, outcome)
    local value = latch_value(request, outcome)
    local previous = first_write('releasing the lock', 'set', latch, value, 'px', ttl, 'get')
    local replayed, reply = latch_reply(previous, request)
    if replayed and reply ~= outcome then
        redis.call('set', latch, previous, 'px', ttl)
    end
    return replayed, reply
end

-- The outcome of releasing one hold of an owner that has `count` holds (nil or false: it
-- holds none): 0 when holds remain, 1 when it was the last; nil when there is none.
local function release_outcome(count)
    if count then
        return count > 1 and 0 or 1
    end
    return nil
end

-- The step every release takes after asking for its writes and before making them: when
-- `tell`, the waiters are told on `channel` first (see notify_before_writing), then the latch
-- is claimed (see latch_claim). Returns true and the reply to give when a send of this
-- request already ran (the caller then writes nothing); false when it goes on to release.
local function tell_and_claim(tell, publish, channel, message, latch, latch_ttl, request, outcome)
    if tell then
        notify_before_writing(publish, channel, message)
    end
    return latch_claim(latch, latch_ttl, request, outcome)
end

-- Asks for drop_hold's writes (see permit.lua).
local function permit_drop_hold(key, field, lease)
    permit('releasing the lock', 'hincrby', key, field, '-1')
    permit('releasing the lock', 'pexpire', key, lease)
end

-- One hold of `field` fewer. While others remain, the key lives `lease` ms from now: what
-- the caller computed that the owner's other holds of `field` need; with `keep_longer`
-- (holds under another field need what the TTL gives them now), at least that long.
-- Returns how many remain.
local function drop_hold(key, field, lease, keep_longer)
    local left = redis.call('hincrby', key, field, '-1')
    if left > 0 then
        if keep_longer then
            extend(key, lease)
        else
            redis.call('pexpire', key, lease)
        end
    end
    return left
end

-- Asks for release_hold's writes (see permit.lua).
local function permit_release_hold(outcome, key, owner, lease, also)
    if outcome == 0 then
        permit_drop_hold(key, owner, lease)
    elseif outcome == 1 then
        permit('releasing the lock', 'del', key)
        if also then
            permit('releasing the lock', 'del', also)
        end
    end
end

-- Releases one hold of `owner` as `outcome` says (see release_outcome): 0, one hold fewer
-- and the key lives `lease` ms from now (see drop_hold); 1, the lock is deleted, then `also`
-- (a key that goes with the owner's last hold) when given; nil, nothing.
local function release_hold(outcome, key, owner, lease, also)
    if outcome == 0 then
        drop_hold(key, owner, lease)
    elseif outcome == 1 then
        redis.call('del', key)
        if also then
            redis.call('del', also)
        end
    end
end
