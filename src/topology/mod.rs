//! The deployment: pub/sub and its modes, replica acknowledgement, Sentinel, cluster
//! redirections, the connections' names and tasks, and which URLs name a deployment.

pub(crate) mod connection_name;
pub(crate) mod connection_tasks;
pub(crate) mod link;
pub(crate) mod pubsub;
pub(crate) mod redirect;
pub(crate) mod replicas;
pub(crate) mod runner;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod url;
pub(crate) mod waiters;
