//! Waiting for something the pipeline does in the background: one helper, so every test waits
//! the same way and a timeout always says what did not happen.
//!
//! Tests poll for an outcome rather than sleep a fixed time: a fixed sleep either wastes time
//! on a fast machine or decides the result on a slow one.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(100);

/// Polls `check` until it returns `Some`, and returns that value; panics naming `what` if
/// `deadline` passes first. `check` is always asked at least once, and once more after the
/// deadline, so a slow last poll is not lost.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        if Instant::now() >= until {
            if let Some(found) = check().await {
                return found;
            }
            panic!("{what}: did not happen within {deadline:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a blocking check, from synchronous tests (browser drivers, processes).
pub fn eventually_blocking<T>(
    deadline: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + deadline;
    loop {
        if let Some(found) = check() {
            return found;
        }
        if Instant::now() >= until {
            if let Some(found) = check() {
                return found;
            }
            panic!("{what}: did not happen within {deadline:?}");
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test]
    async fn returns_the_first_value_found() {
        let asked = Cell::new(0);
        let v = eventually(Duration::from_secs(5), "third ask", || {
            asked.set(asked.get() + 1);
            let n = asked.get();
            async move { (n == 3).then_some(n) }
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "never: did not happen within")]
    async fn names_what_did_not_happen() {
        eventually(Duration::from_millis(50), "never", || async { None::<()> }).await;
    }

    #[test]
    fn blocking_checks_poll_the_same_way() {
        let mut n = 0;
        assert_eq!(
            eventually_blocking(Duration::from_secs(5), "two", || {
                n += 1;
                (n == 2).then_some(n)
            }),
            2
        );
    }
}
