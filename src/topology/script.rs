//! The Lua scripts of `lua/`, embedded at build time, and one call of one of them, laid out
//! as EVALSHA sends it (the sending is [`runner`](crate::topology::runner)'s).

use std::sync::OnceLock;

use fred::error::Error as RedisError;
use fred::interfaces::ClientLike;
use fred::types::Value;

use crate::base::error::{refused_keys, Error, Result};
use crate::base::keys::Str;

/// One script of `lua/`: its source, and its SHA-1 computed once on first use.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) lua: &'static str,
    /// Static text, as the script's: sending it counts no reference, which every task of
    /// every core would otherwise update on one shared counter.
    sha: OnceLock<Str>,
}

impl Script {
    const fn new(name: &'static str, lua: &'static str) -> Self {
        Script {
            name,
            lua,
            sha: OnceLock::new(),
        }
    }

    /// The SHA-1 Redis files the script under (what EVALSHA names).
    pub(crate) fn sha(&self) -> &Str {
        self.sha.get_or_init(|| {
            // Made once per script of the program, which lives as long.
            let sha: &'static str = Box::leak(fred::util::sha1_hash(self.lua).into_boxed_str());
            Str::from_static(sha)
        })
    }
}

/// One script call, ready to send: the script, its keys then its arguments (EVALSHA's
/// arguments after the SHA and the number of keys), laid out once so that a send copies
/// one list.
pub(crate) struct Call {
    pub(crate) script: &'static Script,
    argv: Argv,
    keys: usize,
}

impl Call {
    /// A call with `keys` (copied) and `args`.
    pub(crate) fn new(script: &'static Script, keys: &[&str], args: Vec<Value>) -> Call {
        Call::of(script, keys.iter().map(|key| Value::from(*key)), args)
    }

    /// A call with `keys` and `args` as they are (shared text is not copied), with room for
    /// a key and two arguments more (what a release appends for its latch).
    pub(crate) fn of(
        script: &'static Script,
        keys: impl IntoIterator<Item = Value, IntoIter: ExactSizeIterator>,
        args: impl IntoIterator<Item = Value, IntoIter: ExactSizeIterator>,
    ) -> Call {
        let (keys, args) = (keys.into_iter(), args.into_iter());
        let mut argv = Argv::with_capacity(keys.len() + args.len() + 3);
        argv.extend(keys);
        let keys = argv.len();
        argv.extend(args);
        Call { script, argv, keys }
    }

    /// Appends a key after the others.
    pub(crate) fn push_key(&mut self, key: Value) {
        self.argv.insert(self.keys, key);
        self.keys += 1;
    }

    /// Appends arguments after the others.
    pub(crate) fn push_args(&mut self, args: impl IntoIterator<Item = Value>) {
        self.argv.extend(args);
    }

    /// EVALSHA's arguments: the SHA, the number of keys, the keys, then the arguments.
    pub(crate) fn evalsha_args(&self) -> Vec<Value> {
        let mut all = Vec::with_capacity(2 + self.argv.len());
        all.push(Value::String(self.script.sha().clone()));
        all.push(Value::Integer(self.keys as i64));
        self.argv.copy_to(&mut all);
        all
    }

    /// `error`, naming this script and its keys when the server refused it as a whole for
    /// a key this user may not use (the server names none).
    pub(crate) fn explain(&self, error: RedisError) -> RedisError {
        let keys = (0..self.keys).filter_map(|at| self.argv.text(at));
        refused_keys(error, self.script.name, keys.collect())
    }

    /// The first key, which routes the call.
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        (self.keys > 0).then(|| self.argv.bytes(0)).flatten()
    }
}

/// The keys and arguments a call holds in place: a lock's release has 9 (3 keys, 6
/// arguments), and every allocation counts on a lock's hot path.
const IN_PLACE: usize = 9;

/// One key or argument held in place: text or an integer, what a lock's calls send (less
/// than fred's `Value`, so that a call stays small).
enum Arg {
    Text(Str),
    Integer(i64),
}

impl Arg {
    fn value(&self) -> Value {
        match self {
            Arg::Text(text) => Value::String(text.clone()),
            Arg::Integer(n) => Value::Integer(*n),
        }
    }
}

/// A call's keys and arguments: in place up to [`IN_PLACE`] texts and integers, so that a
/// send allocates only the list fred is handed (the call is kept to be sent again after
/// NOSCRIPT or a redirection); more, or others, on the heap.
#[allow(clippy::large_enum_variant, reason = "in place is the point")]
enum Argv {
    InPlace { items: [Arg; IN_PLACE], len: usize },
    Heap(Vec<Value>),
}

impl Argv {
    fn with_capacity(capacity: usize) -> Argv {
        if capacity <= IN_PLACE {
            let items = [const { Arg::Integer(0) }; IN_PLACE];
            Argv::InPlace { items, len: 0 }
        } else {
            Argv::Heap(Vec::with_capacity(capacity))
        }
    }

    fn len(&self) -> usize {
        match self {
            Argv::InPlace { len, .. } => *len,
            Argv::Heap(items) => items.len(),
        }
    }

    fn push(&mut self, value: Value) {
        let Argv::InPlace { items, len } = self else {
            if let Argv::Heap(items) = self {
                items.push(value);
            }
            return;
        };
        let arg = match value {
            Value::String(text) if *len < IN_PLACE => Arg::Text(text),
            Value::Integer(n) if *len < IN_PLACE => Arg::Integer(n),
            value => {
                let mut spilled = Vec::with_capacity(2 * IN_PLACE);
                spilled.extend(items[..*len].iter().map(Arg::value));
                spilled.push(value);
                *self = Argv::Heap(spilled);
                return;
            }
        };
        items[*len] = arg;
        *len += 1;
    }

    fn extend(&mut self, values: impl IntoIterator<Item = Value>) {
        for value in values {
            self.push(value);
        }
    }

    /// Puts `value` at `at`, after those before it.
    fn insert(&mut self, at: usize, value: Value) {
        self.push(value);
        match self {
            Argv::InPlace { items, len } => items[at..*len].rotate_right(1),
            Argv::Heap(items) => items[at..].rotate_right(1),
        }
    }

    /// Appends them all to `to`.
    fn copy_to(&self, to: &mut Vec<Value>) {
        match self {
            Argv::InPlace { items, len } => to.extend(items[..*len].iter().map(Arg::value)),
            Argv::Heap(items) => to.extend_from_slice(items),
        }
    }

    fn bytes(&self, at: usize) -> Option<&[u8]> {
        match self {
            Argv::InPlace { items, .. } => match &items[at] {
                Arg::Text(text) => Some(text.as_bytes()),
                Arg::Integer(_) => None,
            },
            Argv::Heap(items) => items[at].as_bytes(),
        }
    }

    fn text(&self, at: usize) -> Option<String> {
        match self {
            Argv::InPlace { items, .. } => items[at].value().as_string(),
            Argv::Heap(items) => items[at].as_string(),
        }
    }
}

/// A constant script argument, sent without copying it.
pub(crate) fn static_arg(text: &'static str) -> Value {
    Value::String(fred::bytes_utils::Str::from_static(text))
}

/// The cluster slot of `key`, which routes a command about it; 0 outside a cluster, where
/// fred ignores it (not worth hashing the key for).
pub(crate) fn slot_of(redis: &impl ClientLike, key: &[u8]) -> u16 {
    if redis.is_clustered() {
        fred::util::redis_keyslot(key)
    } else {
        0
    }
}

/// Reads a script's nil-or-integer reply.
pub(crate) fn nil_or_int(script: &'static Script, reply: Value) -> Result<Option<i64>> {
    match reply {
        Value::Null => Ok(None),
        Value::Integer(n) => Ok(Some(n)),
        other => Err(Error::UnexpectedReply {
            script: script.name,
            detail: format!("{other:?}"),
        }),
    }
}

/// Lists the scripts: `NAME => "file"` embeds `lua/file.lua`; `NAME => "file" with "a", "b"`
/// puts the shared snippets `lua/a.lua` then `lua/b.lua` in front of it, so each rule of the
/// protocol is written once. The file's text becomes the function `script`, which the
/// epilogue `lua/main.lua` runs, so that a refusal raised anywhere reaches the client as the
/// script's own error reply on every server version. A snippet only defines local functions and constants, taking
/// what it needs as arguments (never KEYS or ARGV), so the parts may come in any order that
/// puts a function after those it calls. `tests/support/mod.rs` reads these lines to
/// assemble a script as sent here.
macro_rules! scripts {
    ($($ident:ident => $file:literal $(with $($part:literal),+)?),* $(,)?) => {
        $(pub(crate) static $ident: Script = Script::new(
            $file,
            concat!(
                $($(include_str!(concat!("../../lua/", $part, ".lua")),)+)?
                "local function script()\n",
                include_str!(concat!("../../lua/", $file, ".lua")),
                "end\n",
                include_str!("../../lua/main.lua"),
            ),
        );)*

        /// Every script, with the parts it is assembled from: (name, text) of each snippet
        /// in order, then the text of its own file.
        #[cfg(test)]
        pub(crate) static ALL: &[(&Script, &[(&str, &str)], &str)] = &[$((
            &$ident,
            &[$($(($part, include_str!(concat!("../../lua/", $part, ".lua")))),+)?],
            include_str!(concat!("../../lua/", $file, ".lua")),
        )),*];
    };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire" with "permit", "common",
    LOCK_RELEASE => "lock_release" with "permit", "common", "publish", "release",
    LOCK_HAND_OFF => "lock_hand_off" with "permit", "common", "publish", "release",
    LOCK_FORCE_RELEASE => "lock_force_release" with "permit", "publish",
    RENEW_BATCH => "renew_batch" with "permit", "common",
    FAIR_ACQUIRE => "fair_acquire" with "permit", "common", "fair_queue",
    FAIR_ACQUIRE_FAILED => "fair_acquire_failed" with "permit", "publish", "fair_queue",
    FAIR_LEAVE_MANY => "fair_leave_many" with "permit", "publish",
    FAIR_RELEASE => "fair_release" with "permit", "common", "publish", "release", "fair_queue",
    FAIR_FORCE_RELEASE => "fair_force_release" with "permit", "publish", "fair_queue",
    FENCED_ACQUIRE => "fenced_acquire" with "permit", "common",
    READ_ACQUIRE => "read_acquire" with "permit", "common", "read_keys",
    READ_RELEASE => "read_release" with "permit", "common", "instant", "publish", "release", "read_keys",
    READ_RENEW_BATCH => "read_renew_batch" with "permit", "common", "read_keys",
    READ_LOCKED => "read_locked",
    WRITE_ACQUIRE => "write_acquire" with "permit", "common",
    WRITE_RELEASE => "write_release" with "permit", "common", "publish", "release",
    RW_FORCE_RELEASE => "rw_force_release" with "permit", "publish",
    INSPECT => "inspect" with "read_keys",
    SEMAPHORE_SET => "semaphore_set" with "permit", "publish",
    SEMAPHORE_ACQUIRE => "semaphore_acquire" with "permit", "semaphore_count", "once",
    SEMAPHORE_UNDO => "semaphore_undo" with "permit", "publish", "semaphore_count",
    SEMAPHORE_RELEASE => "semaphore_release" with "permit", "publish", "semaphore_count", "once",
    SEMAPHORE_ADD => "semaphore_add" with "permit", "publish", "semaphore_count", "once",
    SEMAPHORE_DRAIN => "semaphore_drain" with "permit", "semaphore_count",
    SEMAPHORE_DELETE => "semaphore_delete" with "permit",
    LATCH_SET => "latch_set" with "permit", "publish", "latch_count",
    LATCH_COUNT_DOWN => "latch_count_down" with "permit", "publish", "latch_count", "once",
    LATCH_DELETE => "latch_delete" with "permit", "publish", "latch_count",
    EXPIRABLE_ACQUIRE => "expirable_acquire" with "permit", "publish", "semaphore_count", "expirable_leases",
    EXPIRABLE_UNDO => "expirable_undo" with "permit", "publish", "semaphore_count", "expirable_leases",
    EXPIRABLE_RELEASE => "expirable_release" with "permit", "publish", "semaphore_count",
    EXPIRABLE_RELEASE_MANY => "expirable_release_many" with "permit", "publish", "semaphore_count", "expirable_leases", "once",
    EXPIRABLE_COUNT => "expirable_count" with "permit", "publish", "semaphore_count", "expirable_leases",
    EXPIRABLE_SET => "expirable_set" with "permit", "publish", "semaphore_count",
    EXPIRABLE_ADD => "expirable_add" with "permit", "publish", "semaphore_count",
    EXPIRABLE_LEASE => "expirable_lease" with "permit", "publish", "semaphore_count", "expirable_leases",
    EXPIRABLE_DELETE => "expirable_delete" with "permit",
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = include_str!("../../lua/main.lua");

    /// The leading comment lines of a script file: its header.
    fn header(file: &str) -> String {
        let lines = file.lines().take_while(|line| line.starts_with("--"));
        lines.collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn a_call_keeps_its_keys_before_its_arguments() {
        let mut call = Call::of(&LOCK_RELEASE, [Value::from("k1")], [Value::from("a1")]);
        call.push_key(Value::from("k2"));
        call.push_args([Value::from("a2"), Value::from(3)]);
        let expected: Vec<Value> = vec![
            Value::String(LOCK_RELEASE.sha().clone()),
            2.into(),
            "k1".into(),
            "k2".into(),
            "a1".into(),
            "a2".into(),
            3.into(),
        ];
        assert_eq!(call.evalsha_args(), expected);
        assert_eq!(call.first_key(), Some(&b"k1"[..]));
        let keyless = Call::new(&READ_LOCKED, &[], Vec::new());
        assert_eq!(keyless.first_key(), None);
    }

    #[test]
    fn a_call_past_its_room_in_place_keeps_its_order() {
        let args: Vec<Value> = (0..IN_PLACE as i64 - 5).map(Value::from).collect();
        let mut call = Call::of(&LOCK_RELEASE, [Value::from("k1")], args.clone());
        call.push_key(Value::from("k2"));
        call.push_args([Value::from("a2"), Value::from("a3"), Value::from("a4")]);
        call.push_key(Value::from("k3"));
        let sha = Value::String(LOCK_RELEASE.sha().clone());
        let mut expected = vec![sha, 3.into(), "k1".into(), "k2".into(), "k3".into()];
        expected.extend(args);
        expected.extend(["a2".into(), "a3".into(), "a4".into()]);
        assert_eq!(call.evalsha_args(), expected);
        // A value neither text nor an integer goes to the heap with the others.
        let mut call = Call::of(&LOCK_RELEASE, [Value::from("k1")], [Value::Null]);
        call.push_key(Value::from("k2"));
        let sha = Value::String(LOCK_RELEASE.sha().clone());
        let expected = vec![sha, 2.into(), "k1".into(), "k2".into(), Value::Null];
        assert_eq!(call.evalsha_args(), expected);
        assert_eq!(call.first_key(), Some(&b"k1"[..]));
    }

    #[test]
    fn every_script_has_a_header_and_a_distinct_sha() {
        let mut shas = std::collections::HashSet::new();
        for (script, _, file) in ALL {
            // The header is the file's own, after whatever snippets come first, and the
            // file is the body of the function the epilogue runs.
            let wrapped = format!("local function script()\n{file}end\n{MAIN}");
            let own = &script.lua[script.lua.len() - wrapped.len()..];
            assert_eq!(own, wrapped, "{} does not end with its file", script.name);
            let own = *file;
            let header = header(own);
            let body = &own[header.len()..];
            for section in ["-- KEYS", "-- Reply"] {
                assert!(header.contains(section), "{} lacks {section}", script.name);
            }
            // Every KEYS[n] and ARGV[n] the script reads is stated.
            for table in ["KEYS[", "ARGV["] {
                for (at, _) in body.match_indices(table) {
                    let index = &body[at + table.len()..];
                    let digits =
                        index.len() - index.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    if digits > 0 {
                        let entry = format!("-- {table}{}]", &index[..digits]);
                        assert!(header.contains(&entry), "{} lacks {entry}", script.name);
                    }
                }
            }
            assert_eq!(script.sha().len(), 40);
            assert!(
                shas.insert(script.sha().to_string()),
                "{} shares its SHA",
                script.name
            );
        }
    }

    #[test]
    fn a_script_with_parts_begins_with_them_in_order() {
        for (script, parts, file) in ALL {
            let prologue: String = parts.iter().map(|(_, text)| *text).collect();
            assert!(script.lua.starts_with(&prologue), "{}", script.name);
            let wrapped = format!("local function script()\n{file}end\n{MAIN}");
            assert_eq!(
                script.lua,
                format!("{prologue}{wrapped}"),
                "{}",
                script.name
            );
        }
    }

    #[test]
    fn snippets_take_what_they_use_as_arguments() {
        // A snippet reads no KEYS or ARGV and runs nothing at load: it only defines, so a
        // script's own header stays the whole contract.
        for (script, parts, _) in ALL {
            for (part, text) in *parts {
                assert!(!text.contains("KEYS[") && !text.contains("ARGV["), "{part}");
                for line in text.lines().filter(|line| !line.starts_with([' ', '-'])) {
                    assert!(
                        line.is_empty() || line == "end" || line.starts_with("local "),
                        "{part} (in {}) runs code at load: {line}",
                        script.name
                    );
                }
            }
        }
    }
}
