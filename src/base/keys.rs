//! Every Redis key, channel, field suffix and message this crate uses, built by Redisson's
//! naming rules (protocol §2). Nothing else in the crate formats a Redis name.

pub(crate) use fred::bytes_utils::Str;

/// The unlock message of every exclusive lock and of read unlocks: wakes one waiter.
pub(crate) const UNLOCK_MESSAGE: &str = "0";
/// The message of a write unlock: wakes every waiter.
pub(crate) const READ_UNLOCK_MESSAGE: &str = "1";
/// The read-write lock's hash field that holds its mode, and its two modes.
pub(crate) const MODE_FIELD: &str = "mode";
pub(crate) const READ_MODE: &str = "read";
pub(crate) const WRITE_MODE: &str = "write";
/// The error a non-reentrant acquire replies when the owner already holds the lock
/// (protocol §8.2, §8.3); passed to the scripts as an argument, as Redisson does.
pub(crate) const NON_REENTRANT_REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

/// Redisson's `prefixName`: `prefix:name` when the name already has a `{`, else
/// `prefix:{name}`, so every derived name lands in the lock key's cluster slot.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    let (open, close) = braces(name);
    joined(&[prefix, ":", open, name, close])
}

/// The braces that make `name` a cluster hash tag, unless it has one.
fn braces(name: &str) -> (&'static str, &'static str) {
    if name.contains('{') {
        ("", "")
    } else {
        ("{", "}")
    }
}

/// Why the keys of the lock `raw` (the prefixed name) would not share one cluster slot, if
/// they would not. Redis hashes a key by its first `{` and the first `}` after it when they
/// enclose something, and by the whole key otherwise; [`prefix_name`] adds braces only to a
/// name without `{`. So a name with a `{` needs such a tag, and a name without one must not
/// contain `}` (the added braces would close at it).
pub(crate) fn split_slots(raw: &str) -> Option<&'static str> {
    match raw.find('{') {
        Some(open) => match raw[open + 1..].find('}') {
            None => Some("its first `{` has no `}` after it"),
            Some(0) => Some("its first `{` opens an empty tag `{}`"),
            Some(_) => None,
        },
        None if raw.contains('}') => Some("it has a `}` but no `{`"),
        None => None,
    }
}

/// `parts` in one string of exactly their length: a name kept for the lock's life (or
/// turned into shared text) then carries no spare capacity.
fn joined(parts: &[&str]) -> String {
    let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    parts.iter().for_each(|part| text.push_str(part));
    text
}

/// The names derived from one lock's raw (prefixed) name.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// The lock hash, which is also the raw name. Shared text: a copy, or a script argument
    /// made of it, only counts a reference.
    pub(crate) raw: Str,
    /// `redisson_lock__channel:{raw}`: unlock messages of plain, fair, fenced locks.
    pub(crate) channel: Str,
}

impl LockKeys {
    /// `raw` is the user's name after the client's name prefix was applied.
    pub(crate) fn new(raw: &str) -> Self {
        LockKeys {
            raw: raw.into(),
            channel: prefix_name("redisson_lock__channel", raw).into(),
        }
    }

    /// `redisson_unlock_latch:{raw}:<request id>`.
    pub(crate) fn unlock_latch(&self, request_id: &str) -> String {
        format!(
            "{}:{request_id}",
            prefix_name("redisson_unlock_latch", &self.raw)
        )
    }

    /// `redisson_lock_queue:{raw}`: the fair lock's waiting list.
    pub(crate) fn fair_queue(&self) -> String {
        prefix_name("redisson_lock_queue", &self.raw)
    }

    /// `redisson_lock_timeout:{raw}`: the fair lock's waiter deadlines.
    pub(crate) fn fair_timeouts(&self) -> String {
        prefix_name("redisson_lock_timeout", &self.raw)
    }

    /// `redisson_lock_left:{raw}:<owner field>:<wait id>`: a fair waiter's fence, set when it
    /// leaves (this client's own key, see `lua/fair_acquire.lua`).
    pub(crate) fn fair_fence(&self, owner_field: &str, wait_id: u64) -> String {
        let base = prefix_name("redisson_lock_left", &self.raw);
        format!("{base}:{owner_field}:{wait_id}")
    }

    /// `redisson_lock_took:{raw}:<owner field>`: which wait of the owner took its last new
    /// fair hold (this client's own key, see `lua/fair_acquire.lua`).
    pub(crate) fn fair_trace(&self, owner_field: &str) -> String {
        format!(
            "{}:{owner_field}",
            prefix_name("redisson_lock_took", &self.raw)
        )
    }

    /// `redisson_lock__channel:{raw}:<owner field>`: one fair waiter's own channel.
    pub(crate) fn fair_waiter_channel(&self, owner_field: &str) -> String {
        format!("{}:{owner_field}", self.channel)
    }

    /// `redisson_lock_token:{raw}`: the fenced lock's token counter.
    pub(crate) fn fence_token(&self) -> String {
        prefix_name("redisson_lock_token", &self.raw)
    }

    /// `redisson_rwlock:{raw}`: the read-write lock's channel.
    pub(crate) fn rw_channel(&self) -> String {
        prefix_name("redisson_rwlock", &self.raw)
    }

    /// The part of every reader's timeout prefix before `:<owner field>` (Redisson's
    /// `suffixName` without its suffix): `{raw}`, or the raw name itself when it already
    /// carries a `{`.
    pub(crate) fn read_key_prefix(&self) -> String {
        let (open, close) = braces(&self.raw);
        joined(&[open, &self.raw, close])
    }
}

/// `redisson_sc:{raw}`: a semaphore's channel (Redisson's `RSemaphore`, protocol §13.1).
pub(crate) fn semaphore_channel(raw: &str) -> String {
    prefix_name("redisson_sc", raw)
}

/// `redisson_sc_attempt:{raw}:<client id>:<attempt id>`: what one acquire attempt of this
/// client took, kept for a while so that an attempt whose reply was lost can be undone
/// (this crate's own key, see `lua/semaphore_acquire.lua`); in the counter's slot.
pub(crate) fn semaphore_attempt(raw: &str, client: &str, attempt: u64) -> String {
    format!(
        "{}:{client}:{attempt}",
        prefix_name("redisson_sc_attempt", raw)
    )
}

/// `redisson_countdownlatch_attempt:{raw}:<client id>:<write id>`: the record of one
/// count-down of this client, through which a copy of it sent again changes nothing (this
/// crate's own key, see `lua/once.lua`); braced as the latch's channel, so in its slot.
pub(crate) fn latch_record(raw: &str, client: &str, write: u64) -> String {
    format!("redisson_countdownlatch_attempt:{{{raw}}}:{client}:{write}")
}

/// `redisson_countdownlatch__channel__{raw}`: a count-down latch's channel (Redisson's
/// `RCountDownLatch`, protocol §14.1). Not `prefixName`: the raw name is always braced.
pub(crate) fn latch_channel(raw: &str) -> String {
    joined(&["redisson_countdownlatch__channel__{", raw, "}"])
}

/// Why the latch `raw` (the prefixed name) and its channel would not share one cluster
/// slot, if they would not. The channel's tag runs from its own `{` to the first `}` after
/// it: the raw name whole when it has no `}`, which is how Redis hashes the key then (a key
/// without `}` has no tag). A `}` cuts the channel's tag short of the key's hash.
pub(crate) fn latch_split_slots(raw: &str) -> Option<&'static str> {
    raw.contains('}').then_some(
        "it has a `}`, and the latch's channel `redisson_countdownlatch__channel__{<name>}` \
         (always braced, as Java names it) then hashes by a tag cut at that `}`",
    )
}

/// `{raw}:timeout`: a permit-expirable semaphore's leases (Redisson's `suffixName`, protocol
/// §15.1), in the counter's slot.
pub(crate) fn expirable_leases(raw: &str) -> String {
    let (open, close) = braces(raw);
    joined(&[open, raw, close, ":timeout"])
}

/// The write side's hash field: `<owner field>:write`.
pub(crate) fn write_field(owner_field: &str) -> String {
    joined(&[owner_field, ":write"])
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "U";

    // The literal examples of the protocol's naming table (§2.3), for both name styles.
    #[test]
    fn plain_name() {
        let k = LockKeys::new("orders");
        assert_eq!(&*k.raw, "orders");
        assert_eq!(&*k.channel, "redisson_lock__channel:{orders}");
        assert_eq!(
            k.fair_waiter_channel(&format!("{U}:57")),
            "redisson_lock__channel:{orders}:U:57"
        );
        assert_eq!(k.fair_queue(), "redisson_lock_queue:{orders}");
        assert_eq!(k.fair_timeouts(), "redisson_lock_timeout:{orders}");
        assert_eq!(k.unlock_latch("R"), "redisson_unlock_latch:{orders}:R");
        assert_eq!(k.fence_token(), "redisson_lock_token:{orders}");
        assert_eq!(k.rw_channel(), "redisson_rwlock:{orders}");
        assert_eq!(k.read_key_prefix(), "{orders}");
        assert_eq!(write_field("U:57"), "U:57:write");
    }

    #[test]
    fn hash_tagged_name() {
        let k = LockKeys::new("{user:7}:cart");
        assert_eq!(&*k.raw, "{user:7}:cart");
        assert_eq!(&*k.channel, "redisson_lock__channel:{user:7}:cart");
        assert_eq!(
            k.fair_waiter_channel("U:57"),
            "redisson_lock__channel:{user:7}:cart:U:57"
        );
        assert_eq!(k.fair_queue(), "redisson_lock_queue:{user:7}:cart");
        assert_eq!(k.fair_timeouts(), "redisson_lock_timeout:{user:7}:cart");
        assert_eq!(k.unlock_latch("R"), "redisson_unlock_latch:{user:7}:cart:R");
        assert_eq!(k.fence_token(), "redisson_lock_token:{user:7}:cart");
        assert_eq!(k.rw_channel(), "redisson_rwlock:{user:7}:cart");
        assert_eq!(k.read_key_prefix(), "{user:7}:cart");
    }

    #[test]
    fn semaphore_names() {
        assert_eq!(semaphore_channel("jobs"), "redisson_sc:{jobs}");
        assert_eq!(
            semaphore_channel("{user:7}:sem"),
            "redisson_sc:{user:7}:sem"
        );
        assert_eq!(
            semaphore_attempt("jobs", U, 3),
            "redisson_sc_attempt:{jobs}:U:3"
        );
    }

    #[test]
    fn latch_names() {
        assert_eq!(
            latch_channel("jobs"),
            "redisson_countdownlatch__channel__{jobs}"
        );
        assert_eq!(
            latch_record("jobs", U, 4),
            "redisson_countdownlatch_attempt:{jobs}:U:4"
        );
        assert_eq!(
            latch_channel("{user:7}:latch"),
            "redisson_countdownlatch__channel__{{user:7}:latch}"
        );
        for split in ["{user:7}:latch", "a}b", "}", "{t}"] {
            assert!(latch_split_slots(split).is_some(), "{split}");
        }
        for whole in ["jobs", "a{b", "app1:jobs"] {
            assert_eq!(latch_split_slots(whole), None, "{whole}");
        }
        // Redis's own hashing agrees: the key and the channel share a slot exactly then.
        for name in ["jobs", "a{b", "{user:7}:latch", "a}b", "}", "{t}"] {
            let same = fred::util::redis_keyslot(name.as_bytes())
                == fred::util::redis_keyslot(latch_channel(name).as_bytes());
            assert_eq!(same, latch_split_slots(name).is_none(), "{name}");
        }
    }

    #[test]
    fn expirable_semaphore_names() {
        assert_eq!(expirable_leases("jobs"), "{jobs}:timeout");
        assert_eq!(expirable_leases("{user:7}:sem"), "{user:7}:sem:timeout");
    }

    #[test]
    fn name_mapper_prefix_is_part_of_the_raw_name() {
        let k = LockKeys::new("app1:orders");
        assert_eq!(&*k.channel, "redisson_lock__channel:{app1:orders}");
    }

    #[test]
    fn tells_names_whose_keys_would_split_across_slots() {
        for split in ["a{}b", "x{y", "{}", "a}b", "}", "{}{z}", "a{b"] {
            assert!(split_slots(split).is_some(), "{split}");
        }
        for whole in ["orders", "{user:7}:cart", "x}{y}", "{t}{}", "a{b}c}", "{{}"] {
            assert_eq!(split_slots(whole), None, "{whole}");
        }
    }

    #[test]
    fn only_an_opening_brace_counts() {
        // Redisson tests for `{` alone, whether or not the tag is well formed.
        assert_eq!(prefix_name("p", "a{b"), "p:a{b");
        assert_eq!(prefix_name("p", "a}b"), "p:{a}b}");
        assert_eq!(LockKeys::new("a}b").read_key_prefix(), "{a}b}");
        assert_eq!(LockKeys::new("x{y}").read_key_prefix(), "x{y}");
    }
}
