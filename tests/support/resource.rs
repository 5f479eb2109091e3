//! The resource each lock of the workload guards: a counter in Redis, read and written by
//! scripts that refuse a holder that no longer holds the lock.

use fred::interfaces::{KeysInterface, LuaInterface};
use redisson_lock::LockClient;

/// The protected resource's write: refuses a writer that no longer holds the lock. It is
/// idempotent, as it must be: fred resends a command whose connection dropped before the
/// reply came (`max_command_attempts`), so one write may arrive twice.
///
/// KEYS: the value, the count of accepted writes, the highest fencing token accepted, the
/// id of the last accepted write, the lock's hash. ARGV: the new value, the writer's fencing
/// token ('' for a lock without tokens), the writer's field in the lock's hash (checked
/// when it has no token), the write's unique id.
/// Reply: 1 written (now or before), 0 refused.
const WRITE: &str = r"
if ARGV[4] ~= '' and redis.call('get', KEYS[4]) == ARGV[4] then
    return 1
end
if ARGV[2] ~= '' then
    if tonumber(ARGV[2]) < tonumber(redis.call('get', KEYS[3]) or '0') then
        return 0
    end
    redis.call('set', KEYS[3], ARGV[2])
elseif redis.call('hexists', KEYS[5], ARGV[3]) == 0 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('incr', KEYS[2])
if ARGV[4] ~= '' then
    redis.call('set', KEYS[4], ARGV[4])
end
return 1
";

/// The keys of the resource that lock `name` guards: value, accepted writes, highest
/// token, last write's id.
pub fn resource_keys(name: &str) -> [String; 4] {
    ["value", "accepted", "fence", "last"].map(|part| format!("resource:{{{name}}}:{part}"))
}

/// The protected resource's read for a read-modify-write under a fenced lock: the reader's
/// token reaches the resource before its data is read, so that a late holder's write cannot
/// land between this read and the write that follows it (the write would be checked against
/// the older, highest token the resource had seen, pass, and then be overwritten).
///
/// KEYS: the value, the highest fencing token accepted. ARGV: the reader's token.
/// Reply: `{1, value}` (value `false` when unset), or `{0}` refused for a lower token.
const FENCED_READ: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('get', KEYS[2]) or '0') then
    return {0}
end
redis.call('set', KEYS[2], ARGV[1])
return {1, redis.call('get', KEYS[1])}
";

/// Reads the value of the resource of lock `name` for a read-modify-write, with the
/// reader's fencing token for a fenced lock. `Ok(None)` when the resource refused a stale
/// token; `Ok(Some(None))` when it has no value yet.
pub async fn read_resource(
    client: &LockClient,
    name: &str,
    token: Option<u64>,
) -> Result<Option<Option<String>>, fred::error::Error> {
    let [value, _, fence, _] = resource_keys(name);
    let Some(token) = token else {
        return client.redis().get(value).await.map(Some);
    };
    let reply: Vec<fred::types::Value> = client
        .redis()
        .eval(FENCED_READ, vec![value, fence], vec![token.to_string()])
        .await?;
    Ok(match reply.as_slice() {
        [read, value] if read.as_i64() == Some(1) => Some(value.as_string()),
        _ => None,
    })
}

/// One write to the resource of a lock.
pub struct Write<'a> {
    pub value: &'a str,
    /// The writer's fencing token, for a fenced lock.
    pub token: Option<u64>,
    /// The writer's field in the lock's hash, checked when there is no token.
    pub field: &'a str,
    /// Unique to this write; empty for a write that is never sent twice.
    pub id: &'a str,
}

/// Writes to the resource of lock `name`; `Ok(true)` when the resource accepted it.
pub async fn write_resource(
    client: &LockClient,
    name: &str,
    write: Write<'_>,
) -> Result<bool, fred::error::Error> {
    let [value, accepted, fence, last] = resource_keys(name);
    let token = write.token.map(|t| t.to_string()).unwrap_or_default();
    let written: i64 = client
        .redis()
        .eval(
            WRITE,
            vec![value, accepted, fence, last, name.to_owned()],
            vec![
                write.value.to_owned(),
                token,
                write.field.to_owned(),
                write.id.to_owned(),
            ],
        )
        .await?;
    Ok(written == 1)
}
