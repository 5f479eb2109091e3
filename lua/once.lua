-- Shared snippet: a write applied exactly once, however often it is sent. The client gives
-- each such write (a release, a count-down) a record key of its own, and sends it again
-- until it is answered: the first run does the write and keeps its reply under the record
-- for a while; a later copy finds the record and answers the same, writing nothing. Java
-- never reads these keys. The client also hands each script the records of its writes
-- whose replies arrived (their purpose is over): they are deleted here.

-- Whether the write with record `record` ran already, and its reply then (a number, or
-- false for a nil reply).
local function ran_before(record)
    local kept = redis.call('get', record)
    if kept == false then
        return false, nil
    end
    if kept == 'nil' then
        return true, false
    end
    return true, tonumber(kept)
end

-- Asks for what `remember` and `forget` write (see permit.lua).
local function permit_records(needs, record, done)
    permit(needs, 'set', record, '0', 'px', '1')
    if done[1] then
        permit(needs, 'del', done[1])
    end
end

-- Keeps `reply` (a number, or false) under `record` for `ms` milliseconds.
local function remember(record, reply, ms)
    local kept = 'nil'
    if reply then
        kept = string.format('%d', reply)
    end
    redis.call('set', record, kept, 'px', ms)
    return reply
end

-- Deletes the records of writes whose replies arrived: the keys of `done`.
local function forget(done)
    if done[1] then
        redis.call('del', unpack(done))
    end
end

-- Whether the write with record `record` ran before: then the answered records `done` are
-- deleted, and its reply then comes too (`true, reply`); else `false`, nothing written.
local function replayed(record, done)
    local ran, reply = ran_before(record)
    if ran then
        forget(done)
    end
    return ran, reply
end
