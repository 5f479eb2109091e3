//! Sends the scripts: EVALSHA routed by the first key's slot, followed through a
//! cluster's redirections (MOVED, ASK, TRYAGAIN) and loaded where the server lost it. Each
//! of those answers proves the script did not run, and only they lead to another send: a
//! lock script that may have run is never sent blindly again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use fred::clients::{Client, WithOptions};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface, LuaInterface};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::base::backoff::{doubled, TRY_AGAIN_PAUSE};
use crate::base::boxed::{boxed_in_place, BoxFuture};
use crate::base::error::is_noscript;
use crate::topology::redirect::{
    is_redirected, is_try_again, send_asking, slot_view, slot_view_of, MAX_REDIRECTIONS,
};
use crate::topology::script::{slot_of, Call};
use crate::topology::sentinel::{self, NamedMaster};

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
        self.run_placed::<OwnBox>(call)
    }

    /// [`run`](Self::run), its first send made as `P` says (see [`Placement`]).
    pub(crate) fn run_placed<P: Placement>(
        &self,
        call: Call,
    ) -> impl Future<Output = Result<Value, RedisError>> + Send + 'static {
        let mut send = self.sender(call, None);
        let named = self.named.clone();
        async move {
            sentinel::checked(&named, Ok(()))?;
            let reply = P::once(&send).await;
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
    /// The future returned is a box, made in place, which so carries fred's future too.
    pub(crate) fn run_followed<T: Send + 'static>(
        &self,
        call: Call,
        node: Option<Server>,
        behind: BoxFuture<T>,
    ) -> BoxFuture<Followed<T>> {
        let mut send = self.sender(call, node);
        let named = self.named.clone();
        boxed_in_place(|| async move {
            if let Err(astray) = sentinel::checked(&named, Ok(())) {
                let node = send.node;
                return Followed {
                    reply: Err(astray),
                    behind: None,
                    node,
                };
            }
            let (reply, followed) = {
                let mut sent = std::pin::pin!(send.once_in_place());
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

/// Where a script's first EVALSHA future is made (a follow-up, rare, has a box of its own).
/// fred's command futures are large (kilobytes) and are copied when moved.
pub(crate) trait Placement: 'static {
    fn once(send: &Evalsha) -> impl Future<Output = Result<Value, RedisError>> + Send + '_;
}

/// In a box of its own: the script's future stays small, for callers that carry it.
pub(crate) enum OwnBox {}

/// In the script's future itself: for callers whose future is already made in a box
/// (an acquisition's, a release's), which so carries fred's without a second allocation.
pub(crate) enum InPlace {}

impl Placement for OwnBox {
    fn once(send: &Evalsha) -> impl Future<Output = Result<Value, RedisError>> + Send + '_ {
        send.once()
    }
}

impl Placement for InPlace {
    fn once(send: &Evalsha) -> impl Future<Output = Result<Value, RedisError>> + Send + '_ {
        send.once_in_place()
    }
}

/// One script call as EVALSHA sends it.
pub(crate) struct Evalsha {
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
        boxed_in_place(|| self.once_in_place())
    }

    /// One EVALSHA, made where it is awaited.
    async fn once_in_place(&self) -> Result<Value, RedisError> {
        let (command, argv) = self.command();
        match &self.node {
            None => self.redis.custom::<Value, Value>(command, argv).await,
            Some(node) => {
                let to_node = Options {
                    cluster_node: Some(node.clone()),
                    ..self.redis.options().clone()
                };
                let client: &Client = &self.redis;
                client.with_options(&to_node).custom(command, argv).await
            }
        }
    }

    /// The EVALSHA's command and arguments.
    fn command(&self) -> (CustomCommand, Vec<Value>) {
        let command = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(self.slot), false);
        (command, self.call.evalsha_args())
    }

    /// The reply `first` made final: a redirected script is sent where the cluster says,
    /// and one the server did not have is loaded there and sent again, until a command's
    /// timeout has passed (a failover or a flush can lose it again in between). Both
    /// answers prove it did not run.
    async fn settle(&mut self, first: Result<Value, RedisError>) -> Result<Value, RedisError> {
        let timeout = self
            .redis
            .options()
            .timeout
            .unwrap_or(Duration::from_secs(1));
        let give_up = Instant::now() + timeout;
        let mut reply = self.follow(first).await;
        let mut loaded = false;
        while matches!(&reply, Err(error) if is_noscript(error)) {
            if loaded && Instant::now() >= give_up {
                break;
            }
            tracing::debug!(
                script = self.call.script.name,
                "script not cached; loading it"
            );
            self.load().await?;
            loaded = true;
            let again = self.once().await;
            reply = self.follow(again).await;
        }
        reply
    }

    /// Loads the script on the node the EVALSHA went to, or on every master of the slot
    /// map. On the plain client: loading is harmless to retry, and fred may.
    async fn load(&self) -> Result<(), RedisError> {
        let client: &Client = &self.redis;
        let Some(node) = &self.node else {
            return client.script_load_cluster(self.call.script.lua).await;
        };
        let to_node = Options {
            cluster_node: Some(node.clone()),
            ..Options::default()
        };
        let load = CustomCommand::new_static("SCRIPT", ClusterHash::Random, false);
        let lua = Value::from_static_str(self.call.script.lua);
        let argv = vec![Value::from_static_str("LOAD"), lua];
        let on_node = client.with_options(&to_node);
        on_node.custom::<Value, _>(load, argv).await.map(drop)
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

/// Whether `reply` is a script's answer, where [`Evalsha::settle`] has nothing to do: not a
/// redirection, a refusal while a slot migrates (TRYAGAIN), or a missing script, each of
/// which proves the script did not run and calls for another send.
fn is_final(reply: &Result<Value, RedisError>) -> bool {
    match reply {
        Err(error) => !(is_noscript(error) || is_redirected(error) || is_try_again(error)),
        Ok(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::script::LOCK_RELEASE;

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
}
