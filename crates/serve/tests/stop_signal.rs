//! `stop_signal` catches SIGTERM from the moment it is called, not from its first poll: a
//! program that starts its warm pools between the two and is asked to stop meanwhile
//! still stops the graceful way (releasing the pools), instead of dying of the signal's
//! default action. Its own test binary: the signal is raised at this process.

use std::time::Duration;

#[tokio::test]
async fn a_sigterm_before_the_first_poll_is_kept_for_it() {
    let stop = envrt_serve::stop_signal();
    // Not yet polled. Without the handler in place this ends the test process.
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
    tokio::time::timeout(Duration::from_secs(10), stop)
        .await
        .expect("the stop resolves on the signal raised before it was polled");
}
