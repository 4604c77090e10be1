//! A tracing subscriber and a `log` logger that watch every span, event and log record of
//! the process (every thread, every level) for given strings, so a check can prove that a
//! secret never reaches the driver's tracing or log output (a driver's dependencies, such
//! as an HTTP client, often log with `log`). Both are installed as the global default the
//! first time a check asks for them; they format nothing unless a [`Watch`] is open.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// What the open watches look for.
#[derive(Default)]
struct Shared {
    open: AtomicUsize,
    watches: Mutex<Vec<Arc<WatchState>>>,
}

#[derive(Default)]
struct WatchState {
    needles: Vec<String>,
    /// Per needle: where it was seen (`target level name`), never the text itself.
    seen: Mutex<Vec<Vec<String>>>,
}

impl Shared {
    fn scan(&self, metadata: Option<&Metadata<'_>>, record: impl FnOnce(&mut dyn Visit)) {
        let mut text = Text(String::new());
        record(&mut text);
        let watches = self.watches.lock().unwrap().clone();
        for watch in watches {
            let mut seen = watch.seen.lock().unwrap();
            for (i, needle) in watch.needles.iter().enumerate() {
                if text.0.contains(needle.as_str()) {
                    seen[i].push(match metadata {
                        Some(m) => format!("{} {} {:?}", m.target(), m.level(), m.name()),
                        None => "a span field recorded later".to_owned(),
                    });
                }
            }
        }
    }
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

struct CaptureSubscriber {
    shared: Arc<Shared>,
    next_id: AtomicU64,
}

impl Subscriber for CaptureSubscriber {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // Asked again on every use: on only while a watch is open.
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        self.shared.open.load(Ordering::Acquire) > 0
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.shared.scan(Some(span.metadata()), |v| span.record(v));
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed).max(1))
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        // Span metadata is not kept: the sighting says "recorded later".
        self.shared.scan(None, |v| values.record(v));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        self.shared.scan(Some(event.metadata()), |v| event.record(v));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

static INSTALLED: OnceLock<Result<Arc<Shared>, String>> = OnceLock::new();

/// The `log` side: forwards every record to the shared state while a watch is open.
struct CaptureLogger;

static LOGGER: CaptureLogger = CaptureLogger;

impl log::Log for CaptureLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        INSTALLED
            .get()
            .and_then(|s| s.as_ref().ok())
            .is_some_and(|s| s.open.load(Ordering::Acquire) > 0)
    }
    fn log(&self, record: &log::Record<'_>) {
        let Some(Ok(shared)) = INSTALLED.get() else { return };
        if shared.open.load(Ordering::Acquire) == 0 {
            return;
        }
        let text = record.args().to_string();
        let watches = shared.watches.lock().unwrap().clone();
        for watch in watches {
            let mut seen = watch.seen.lock().unwrap();
            for (i, needle) in watch.needles.iter().enumerate() {
                if text.contains(needle.as_str()) {
                    seen[i].push(format!("log {} {}", record.target(), record.level()));
                }
            }
        }
    }
    fn flush(&self) {}
}

fn shared() -> Result<Arc<Shared>, String> {
    INSTALLED
        .get_or_init(|| {
            let shared = Arc::new(Shared::default());
            let subscriber = CaptureSubscriber {
                shared: shared.clone(),
                next_id: AtomicU64::new(1),
            };
            tracing::subscriber::set_global_default(subscriber)
                .map_err(|_| "another global tracing subscriber is installed in this process".to_owned())?;
            log::set_logger(&LOGGER)
                .map_err(|_| "another global `log` logger is installed in this process".to_owned())?;
            Ok(shared)
        })
        .clone()
}

/// An open watch: while it lives, every span and event of the process is scanned for its
/// needles.
pub(crate) struct Watch {
    shared: Arc<Shared>,
    state: Arc<WatchState>,
}

impl Watch {
    /// Installs the subscriber if needed and starts watching for `needles`. Fails when the
    /// process already has another global subscriber (then nothing can be captured).
    pub(crate) fn open(needles: Vec<String>) -> Result<Watch, String> {
        let shared = shared()?;
        let state = Arc::new(WatchState {
            seen: Mutex::new(vec![Vec::new(); needles.len()]),
            needles,
        });
        shared.watches.lock().unwrap().push(state.clone());
        shared.open.fetch_add(1, Ordering::AcqRel);
        log::set_max_level(log::LevelFilter::Trace);
        tracing::callsite::rebuild_interest_cache();
        Ok(Watch { shared, state })
    }

    /// Where needle `i` was seen so far (`target level name` per sighting).
    pub(crate) fn seen(&self, i: usize) -> Vec<String> {
        self.state.seen.lock().unwrap()[i].clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared
            .watches
            .lock()
            .unwrap()
            .retain(|w| !Arc::ptr_eq(w, &self.state));
        if self.shared.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            log::set_max_level(log::LevelFilter::Off);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_needles_in_events_and_spans_on_any_thread() {
        let watch = Watch::open(vec![
            "needle-one".into(),
            "needle-two".into(),
            "absent".into(),
            "needle-three".into(),
        ])
        .unwrap();
        std::thread::spawn(|| {
            tracing::trace!(value = "xx needle-one xx", "an event");
            let span = tracing::debug_span!("a span", field = tracing::field::Empty);
            span.record("field", "needle-two");
            log::debug!(target: "some_client", "body {{\"Env\":[\"TOKEN=needle-three\"]}}");
        })
        .join()
        .unwrap();
        assert_eq!(watch.seen(0).len(), 1, "{:?}", watch.seen(0));
        assert_eq!(watch.seen(1).len(), 1, "{:?}", watch.seen(1));
        assert!(watch.seen(2).is_empty());
        assert_eq!(watch.seen(3), ["log some_client DEBUG"]);
        drop(watch);
        let later = Watch::open(vec!["needle-one".into()]).unwrap();
        assert!(later.seen(0).is_empty(), "a new watch starts empty");
    }
}
