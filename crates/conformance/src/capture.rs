//! A tracing subscriber that watches every span and event of the process (every thread,
//! every level) for given strings, so a check can prove that a secret never reaches the
//! driver's tracing output. It is installed as the global default the first time a check
//! asks for it; it formats nothing unless a [`Watch`] is open.

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

fn shared() -> Result<Arc<Shared>, String> {
    INSTALLED
        .get_or_init(|| {
            let shared = Arc::new(Shared::default());
            let subscriber = CaptureSubscriber {
                shared: shared.clone(),
                next_id: AtomicU64::new(1),
            };
            tracing::subscriber::set_global_default(subscriber)
                .map(|()| shared)
                .map_err(|_| "another global tracing subscriber is installed in this process".to_owned())
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
        self.shared.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_needles_in_events_and_spans_on_any_thread() {
        let watch = Watch::open(vec!["needle-one".into(), "needle-two".into(), "absent".into()]).unwrap();
        std::thread::spawn(|| {
            tracing::trace!(value = "xx needle-one xx", "an event");
            let span = tracing::debug_span!("a span", field = tracing::field::Empty);
            span.record("field", "needle-two");
        })
        .join()
        .unwrap();
        assert_eq!(watch.seen(0).len(), 1, "{:?}", watch.seen(0));
        assert_eq!(watch.seen(1).len(), 1, "{:?}", watch.seen(1));
        assert!(watch.seen(2).is_empty());
        drop(watch);
        let later = Watch::open(vec!["needle-one".into()]).unwrap();
        assert!(later.seen(0).is_empty(), "a new watch starts empty");
    }
}
