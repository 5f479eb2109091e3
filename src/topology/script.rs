//! The Lua scripts of `lua/`, embedded at build time, and how they are sent: by EVALSHA,
//! routed by their first key's slot, loaded on NOSCRIPT, following a cluster's
//! redirections, never resent blindly.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use fred::clients::{Client, WithOptions};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface, LuaInterface};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::base::backoff::{doubled, TRY_AGAIN_PAUSE};
use crate::base::error::{is_noscript, refused_keys, Error, Result};
use crate::base::keys::Str;
use crate::topology::redirect::{
    is_redirected, is_try_again, send_asking, slot_view, slot_view_of, MAX_REDIRECTIONS,
};
use crate::topology::sentinel::{self, NamedMaster};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

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

/// One script call, ready to send: the script and EVALSHA's arguments after the SHA (the
/// number of keys, the KEYS, then the ARGV), laid out once so that a send copies one list.
pub(crate) struct Call {
    pub(crate) script: &'static Script,
    argv: Vec<Value>,
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
        let mut argv = Vec::with_capacity(1 + keys.len() + args.len() + 3);
        argv.push(Value::Integer(keys.len() as i64));
        argv.extend(keys);
        let keys = argv.len() - 1;
        argv.extend(args);
        Call { script, argv, keys }
    }

    /// Appends a key after the others.
    pub(crate) fn push_key(&mut self, key: Value) {
        self.keys += 1;
        self.argv.insert(self.keys, key);
        self.argv[0] = Value::Integer(self.keys as i64);
    }

    /// Appends arguments after the others.
    pub(crate) fn push_args(&mut self, args: impl IntoIterator<Item = Value>) {
        self.argv.extend(args);
    }

    /// `error`, naming this script and its keys when the server refused it as a whole for
    /// a key this user may not use (the server names none).
    fn explain(&self, error: RedisError) -> RedisError {
        let keys = self.argv[1..=self.keys].iter().filter_map(Value::as_string);
        refused_keys(error, self.script.name, keys.collect())
    }

    /// The first key, which routes the call.
    fn first_key(&self) -> Option<&[u8]> {
        (self.keys > 0).then(|| self.argv[1].as_bytes()).flatten()
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

/// Runs scripts by EVALSHA. Cheap to clone; its futures own what they need.
#[derive(Clone)]
pub(crate) struct ScriptRunner {
    /// The client with this crate's options for scripts: one attempt, the command timeout
    /// (made once: fred copies a client and its options for each `with_options`).
    redis: WithOptions<Client>,
    /// Behind Sentinel, the master they name: nothing is sent to another, nor trusted from it.
    named: Option<Arc<NamedMaster>>,
}

impl ScriptRunner {
    /// `timeout` bounds each command; `named` is the gate of a client behind Sentinel.
    pub(crate) fn new(
        redis: Client,
        timeout: Duration,
        named: Option<Arc<NamedMaster>>,
    ) -> ScriptRunner {
        let options = Options {
            max_attempts: Some(1),
            timeout: Some(timeout),
            ..Default::default()
        };
        ScriptRunner {
            redis: redis.with_options(&options),
            named,
        }
    }

    /// The client the scripts go through: a WAIT about a script's write must take the
    /// same connection.
    pub(crate) fn client(&self) -> &Client {
        &self.redis
    }

    /// Sends `script` once. fred never resends it on its own: a lock script that reached
    /// the server may have run, and running it twice would take or release a second hold.
    /// Only answers that prove the script did not run lead to another send: a cluster's
    /// redirection (see [`redirect`](crate::topology::redirect)), and NOSCRIPT, after a load.
    ///
    /// fred's command futures are large (kilobytes, mostly for paths a script never takes)
    /// and are copied when moved, so the one send in flight is made in a box of its own
    /// ([`boxed_in_place`]), as is the rare follow-up: the future returned is small.
    pub(crate) fn run(
        &self,
        call: Call,
    ) -> impl Future<Output = Result<Value, RedisError>> + Send + 'static {
        let mut send = self.sender(call, None);
        let named = self.named.clone();
        async move {
            sentinel::checked(&named, Ok(()))?;
            let reply = send.once().await;
            let reply = if is_final(&reply) {
                reply
            } else {
                Box::pin(send.settle(reply)).await
            };
            sentinel::checked(&named, reply).map_err(|error| send.call.explain(error))
        }
    }

    /// [`run`](Self::run), sent to `node` (on a cluster; `None`: where the slot map says),
    /// with `behind` (a WAIT, say) sent right behind the EVALSHA, so that the server runs it
    /// next on the same connection. Its answer comes back when it followed the EVALSHA that
    /// ran: not when that was redirected or refused with NOSCRIPT, and sent again.
    pub(crate) fn run_followed<T: Send + 'static>(
        &self,
        call: Call,
        node: Option<Server>,
        behind: BoxFuture<T>,
    ) -> BoxFuture<Followed<T>> {
        let mut send = self.sender(call, node);
        let named = self.named.clone();
        Box::pin(async move {
            if let Err(astray) = sentinel::checked(&named, Ok(())) {
                let node = send.node;
                return Followed {
                    reply: Err(astray),
                    behind: None,
                    node,
                };
            }
            let (reply, followed) = {
                let mut sent = send.once();
                // fred queues a command in its first poll: the EVALSHA goes first.
                let early = std::future::poll_fn(|cx| Poll::Ready(sent.as_mut().poll(cx))).await;
                let reply = async {
                    match early {
                        Poll::Ready(reply) => reply,
                        Poll::Pending => sent.await,
                    }
                };
                tokio::join!(reply, behind)
            };
            let (reply, behind) = match reply {
                reply if !is_final(&reply) => (Box::pin(send.settle(reply)).await, None),
                reply => (reply, Some(followed)),
            };
            let reply = sentinel::checked(&named, reply);
            Followed {
                reply: reply.map_err(|error| send.call.explain(error)),
                behind,
                node: send.node,
            }
        })
    }

    fn sender(&self, call: Call, node: Option<Server>) -> Evalsha {
        let slot = call.first_key().map_or(0, |key| slot_of(&*self.redis, key));
        Evalsha {
            redis: self.redis.clone(),
            slot,
            call,
            node,
        }
    }
}

/// What [`ScriptRunner::run_followed`] got.
pub(crate) struct Followed<T> {
    pub(crate) reply: Result<Value, RedisError>,
    /// What was sent behind the EVALSHA answered, when it followed the one that ran.
    pub(crate) behind: Option<T>,
    /// The node the EVALSHA that ran was sent to, when it was named (see [`Evalsha::node`]).
    pub(crate) node: Option<Server>,
}

/// One script call as EVALSHA sends it.
struct Evalsha {
    redis: WithOptions<Client>,
    slot: u16,
    call: Call,
    /// The node it goes to (a cluster's master); `None`: where fred's slot map says. After
    /// a redirection, the node it was sent to last, so that a WAIT can follow it there.
    node: Option<Server>,
}

impl Evalsha {
    /// One EVALSHA, made in a box (see [`ScriptRunner::run`]).
    fn once(&self) -> Pin<Box<dyn Future<Output = Result<Value, RedisError>> + Send + '_>> {
        let (command, argv) = self.command();
        match &self.node {
            None => boxed_in_place(|| self.redis.custom::<Value, Value>(command, argv)),
            Some(node) => {
                let to_node = Options {
                    cluster_node: Some(node.clone()),
                    ..self.redis.options().clone()
                };
                boxed_in_place(|| async move {
                    let client: &Client = &self.redis;
                    client.with_options(&to_node).custom(command, argv).await
                })
            }
        }
    }

    /// The EVALSHA's command and arguments.
    fn command(&self) -> (CustomCommand, Vec<Value>) {
        let command = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(self.slot), false);
        let mut argv = Vec::with_capacity(1 + self.call.argv.len());
        argv.push(Value::String(self.call.script.sha().clone()));
        argv.extend_from_slice(&self.call.argv);
        (command, argv)
    }

    /// The reply `first` made final: a redirected script is sent where the cluster says,
    /// and one Redis did not have is loaded and sent again. Both answers prove it did not
    /// run.
    async fn settle(&mut self, first: Result<Value, RedisError>) -> Result<Value, RedisError> {
        match self.follow(first).await {
            Err(error) if is_noscript(&error) => {
                tracing::debug!(
                    script = self.call.script.name,
                    "script not cached by Redis; loading it"
                );
                // On the plain client: loading is harmless to retry, and fred may.
                (*self.redis)
                    .script_load_cluster::<Value, _>(self.call.script.lua)
                    .await?;
                let again = self.once().await;
                self.follow(again).await
            }
            reply => reply,
        }
    }

    /// After a redirection: sends the script to the master serving the slot, by that
    /// master's own account; when that master redirects it while migrating the slot (an
    /// ASK: it has none of the keys), to the importing master, right behind an ASKING.
    async fn redirected(&mut self) -> Result<Value, RedisError> {
        let client: Client = (*self.redis).clone();
        let view = match slot_view(&client, self.slot).await {
            Some(view) if view.serves => view,
            // fred's slot map is behind the master it names (or cannot be read): read it
            // again and send the script as it says.
            _ => {
                if let Err(error) = client.sync_cluster().await {
                    tracing::debug!(%error, "reading the slot map failed");
                }
                let routing = client.cached_cluster_state();
                self.node = routing.and_then(|routing| routing.get_server(self.slot).cloned());
                return self.once().await;
            }
        };
        self.node = Some(view.node.clone());
        let reply = self.once().await;
        let Some(target) = view.migrating_to.clone() else {
            return reply;
        };
        match &reply {
            // Still serving the slot and migrating it to the same master after it answered:
            // the answer was an ASK.
            Err(error) if is_redirected(error) => {
                match slot_view_of(&client, view.node.clone(), self.slot).await {
                    Some(now) if now == view => {
                        tracing::debug!(script = self.call.script.name, %target, "following ASK");
                        let (command, argv) = self.command();
                        self.node = Some(target.clone());
                        send_asking(&client, self.redis.options(), target, command, argv).await
                    }
                    _ => reply,
                }
            }
            _ => reply,
        }
    }

    /// Follows the redirections `reply` may be: to the importing master of a migrating
    /// slot (with ASKING), or again by fred's slot map, which a MOVED brought up to date.
    /// A script whose keys are split by a slot's migration (TRYAGAIN) is sent again after
    /// a pause, until the migration ends or a command timeout has passed.
    async fn follow(&mut self, mut reply: Result<Value, RedisError>) -> Result<Value, RedisError> {
        let (mut redirections, mut pause) = (0, TRY_AGAIN_PAUSE.0);
        let give_up = self.redis.options().timeout.map(|t| Instant::now() + t);
        loop {
            match &reply {
                Err(error) if is_redirected(error) && redirections < MAX_REDIRECTIONS => {
                    redirections += 1;
                }
                Err(error) if is_try_again(error) => {
                    if give_up.is_some_and(|at| Instant::now() + pause >= at) {
                        return reply;
                    }
                    tokio::time::sleep(pause).await;
                    pause = doubled(pause, TRY_AGAIN_PAUSE.1);
                    // The resend meets the migration's redirections again; the time, not
                    // their count, bounds a migration's wait.
                    redirections = 0;
                    reply = self.once().await;
                    continue;
                }
                _ => return reply,
            }
            reply = self.redirected().await;
        }
    }
}

/// The future `make` returns, boxed. The box is allocated first, so that the compiler makes
/// a large future in it; `Box::pin(future)` makes it on the stack and copies it over.
pub(crate) fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    let slot = Box::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}

/// Whether `reply` is a script's answer, where [`Evalsha::settle`] has nothing to do: not a
/// redirection, a refusal while a slot migrates (TRYAGAIN), or a missing script, each of
/// which proves the script did not run and calls for another send.
fn is_final(reply: &Result<Value, RedisError>) -> bool {
    match reply {
        Err(error) => !(is_noscript(error) || is_redirected(error) || is_try_again(error)),
        Ok(_) => true,
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
    LOCK_FORCE_RELEASE => "lock_force_release" with "permit", "publish",
    RENEW_BATCH => "renew_batch" with "permit", "common",
    FAIR_ACQUIRE => "fair_acquire" with "permit", "common", "fair_queue",
    FAIR_ACQUIRE_FAILED => "fair_acquire_failed" with "permit", "publish", "fair_queue",
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
    fn a_script_future_is_small_as_fred_s_command_future_has_a_box_of_its_own() {
        let runner = ScriptRunner::new(Client::default(), Duration::from_secs(1), None);
        let call = Call::of(&LOCK_RELEASE, [Value::from("k1")], [Value::from("a1")]);
        let command = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(0), false);
        let fred_future = runner.redis.custom::<Value, Value>(command, vec![]);
        let (script, fred) = (size_of_val(&runner.run(call)), size_of_val(&fred_future));
        // Every lock future that awaits a script carries this, and would copy fred's state.
        assert!(
            script * 8 < fred,
            "a script's future is {script} bytes, fred's {fred}"
        );
    }

    #[test]
    fn a_call_keeps_its_keys_before_its_arguments() {
        let mut call = Call::of(&LOCK_RELEASE, [Value::from("k1")], [Value::from("a1")]);
        call.push_key(Value::from("k2"));
        call.push_args([Value::from("a2"), Value::from(3)]);
        let expected: Vec<Value> = vec![
            2.into(),
            "k1".into(),
            "k2".into(),
            "a1".into(),
            "a2".into(),
            3.into(),
        ];
        assert_eq!(call.argv, expected);
        assert_eq!(call.first_key(), Some(&b"k1"[..]));
        let keyless = Call::new(&READ_LOCKED, &[], Vec::new());
        assert_eq!(keyless.first_key(), None);
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
