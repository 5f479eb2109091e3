//! The kind-agnostic core: acquiring, waiting, holding, renewing and releasing, the scripts
//! and their runner, and the names every key and channel has. It never looks at which kind
//! it runs.

pub(crate) mod attempt;
pub(crate) mod guard;
pub(crate) mod hand_off;
pub(crate) mod handle;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod protocol;
pub(crate) mod release;
pub(crate) mod wait;
