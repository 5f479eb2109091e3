//! Futures in boxes: the one type the crate's boxed futures share, and a way to box a large
//! future without making it on the stack first.

use std::future::Future;
use std::pin::Pin;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The future `make` returns, boxed. The box is allocated first, so that the compiler makes
/// a large future in it; `Box::pin(future)` makes it on the stack and copies it over.
pub(crate) fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    let slot = Box::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}
