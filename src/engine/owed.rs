//! What this client owes Redis: the permits its guards hold, and the releases and
//! count-downs on their way. A shutdown gives the first back and lets the others finish,
//! within a time limit, before it closes the connections; then it reports how many it could
//! not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::base::boxed::BoxFuture;
use crate::base::error::{Error, Result};

/// Gives a guard's permits back.
pub(crate) type GiveBack = Box<dyn FnOnce() -> BoxFuture<Result<()>> + Send>;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Owed {
    state: Mutex<State>,
    /// Told each time a write in flight ends.
    ended: Notify,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// The give-backs of the guards still holding permits, by guard.
    guards: HashMap<u64, GiveBack>,
    /// Writes that must finish (releases, count-downs) in flight.
    writing: usize,
    /// The shutdown has given back and waited what it could: no write starts any more.
    settled: bool,
}

/// What [`Owed::settle`] found: how many give-backs and writes finished, and how many did
/// not within its time limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) finished: usize,
    pub(crate) unfinished: usize,
}

/// A write in flight, counted until it is dropped.
pub(crate) struct Writing {
    owed: Arc<Owed>,
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.owed.state.lock().writing -= 1;
        self.owed.ended.notify_waiters();
    }
}

impl Owed {
    /// Files the give-back of a guard's permits; the guard's id, for
    /// [`take`](Self::take). After the shutdown settled, nothing is filed (`None`): there is
    /// no connection left to give them back on.
    pub(crate) fn hold(&self, give_back: GiveBack) -> Option<u64> {
        let mut state = self.state.lock();
        if state.settled {
            return None;
        }
        state.next_id += 1;
        let id = state.next_id;
        state.guards.insert(id, give_back);
        Some(id)
    }

    /// The guard `id` gives its permits back itself, or keeps them: whether it still had
    /// them (`false`: the shutdown gave them back).
    pub(crate) fn take(&self, id: u64) -> bool {
        self.state.lock().guards.remove(&id).is_some()
    }

    /// Counts a write that must finish until the returned value is dropped.
    ///
    /// # Errors
    /// [`Error::Closed`] once the shutdown settled: the connections are closing.
    pub(crate) fn writing(self: &Arc<Self>) -> Result<Writing> {
        let mut state = self.state.lock();
        if state.settled {
            return Err(Error::Closed);
        }
        state.writing += 1;
        Ok(Writing { owed: self.clone() })
    }

    /// Whether the shutdown settled: the connections are closing.
    pub(crate) fn is_settled(&self) -> bool {
        self.state.lock().settled
    }

    /// At shutdown: gives back every guard's permits and waits for the writes in flight
    /// (those give-backs among them), for at most `limit`. Writes that did not finish by
    /// then go on until the connections close, and are counted unfinished.
    pub(crate) async fn settle(self: &Arc<Self>, limit: Duration) -> Settled {
        let give_backs: Vec<GiveBack> = (self.state.lock().guards.drain())
            .map(|(_, give_back)| give_back)
            .collect();
        let mut giving = JoinSet::new();
        for give_back in give_backs {
            // Made here, so counted among the writes in flight before this waits for them.
            giving.spawn(give_back());
        }
        let mut settled = Settled::default();
        let deadline = tokio::time::Instant::now() + limit;
        let gave = async {
            while let Some(given) = giving.join_next().await {
                match given {
                    Ok(Ok(())) => settled.finished += 1,
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "giving back a guard's permits at shutdown failed");
                        settled.unfinished += 1;
                    }
                    Err(_) => settled.unfinished += 1,
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, gave).await;
        let others = async {
            loop {
                let ended = self.ended.notified();
                if self.state.lock().writing == 0 {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout_at(deadline, others).await;
        let mut state = self.state.lock();
        state.settled = true;
        if state.writing > 0 {
            tracing::warn!(
                writes = state.writing,
                "releases or count-downs still unanswered when the client shut down"
            );
        }
        settled.unfinished += state.writing;
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn gives_back_held_guards_and_waits_for_writes() {
        let owed = Arc::new(Owed::default());
        let kept = owed.hold(Box::new(|| Box::pin(async { Ok(()) }))).unwrap();
        let taken = owed.hold(Box::new(|| Box::pin(async { Ok(()) }))).unwrap();
        assert!(owed.take(taken));
        let failing =
            Box::new(|| -> BoxFuture<Result<()>> { Box::pin(async { Err(Error::Closed) }) });
        owed.hold(failing).unwrap();
        let writing = owed.writing().unwrap();
        let ending = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(writing);
        });
        let settled = owed.settle(Duration::from_secs(5)).await;
        assert_eq!(
            settled,
            Settled {
                finished: 1,
                unfinished: 1
            }
        );
        ending.await.unwrap();
        assert!(!owed.take(kept), "the shutdown gave it back");
        assert!(matches!(owed.writing(), Err(Error::Closed)));
        assert!(owed.hold(Box::new(|| Box::pin(async { Ok(()) }))).is_none());
    }
}
