//! Output under pressure: a sink that is slow to take chunks must still get every byte of
//! each stream in order (a driver must hold the command back, not drop or reorder what it
//! cannot hand on at once), and a command killed at its timeout keeps what it printed
//! before, on both streams, in the result and through the sink.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, LeasePolicy, OutputStream};

use super::{Check, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("execute_sink_slow_reader_gets_every_byte", has_execute, slow_sink)
        .promise("A slow sink still receives every byte of MiBs of interleaved stdout and stderr, in order per stream."),
    Check::new("execute_timeout_keeps_partial_output", has_execute, timeout_keeps_output)
        .promise("A command killed at its timeout keeps what it printed before on both streams, in the result and through the sink, with timed_out set."),
];

/// Lines per stream of the slow-sink command, each [`LINE`] bytes long: 2 MiB a stream.
const LINES: usize = 2048;
const LINE: usize = 1024;
/// The sink pauses this long each time another [`PAUSE_EVERY`] bytes have arrived.
const PAUSE: Duration = Duration::from_millis(5);
const PAUSE_EVERY: usize = 32 * 1024;

/// Line `i` of `stream` (`o` or `e`): its number, then filler, `LINE` bytes with the
/// newline.
fn line(stream: char, i: usize) -> String {
    format!("{stream}{i:06} {}\n", "x".repeat(LINE - 9))
}

/// A sink that keeps every chunk per stream and is slow to return.
#[derive(Default)]
struct SlowSink {
    seen: Mutex<(Vec<u8>, Vec<u8>, usize)>,
}

impl SlowSink {
    fn take(&self, stream: OutputStream, chunk: &[u8]) {
        let pause = {
            let mut seen = self.seen.lock().unwrap();
            let (out, err, total) = &mut *seen;
            match stream {
                OutputStream::Stdout => out.extend_from_slice(chunk),
                OutputStream::Stderr => err.extend_from_slice(chunk),
            }
            let before = *total / PAUSE_EVERY;
            *total += chunk.len();
            *total / PAUSE_EVERY != before
        };
        if pause {
            // A consumer that cannot keep up: the driver must wait for it.
            std::thread::sleep(PAUSE);
        }
    }
}

/// Where two byte strings first differ, for a short failure text.
fn first_difference(got: &[u8], expected: &[u8]) -> String {
    let at = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    let show = |bytes: &[u8]| String::from_utf8_lossy(&bytes[at..(at + 16).min(bytes.len())]).into_owned();
    format!(
        "{} bytes for {} expected; first difference at byte {at}: got {:?}, expected {:?}",
        got.len(),
        expected.len(),
        show(got),
        show(expected)
    )
}

fn slow_sink(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let script = format!(
            "p=$(printf '%0{pad}d' 0 | tr 0 x); i=0; while [ $i -lt {LINES} ]; do \
             printf 'o%06d %s\\n' $i \"$p\"; printf 'e%06d %s\\n' $i \"$p\" >&2; i=$((i+1)); done",
            pad = LINE - 9
        );
        let sink = Arc::new(SlowSink::default());
        let taking = sink.clone();
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
        request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            taking.take(stream, chunk)
        }));
        request.timeout = Some(Duration::from_secs(240));
        let result = ctx.exec(&lease, request).await?;
        ensure_eq(result.timed_out, false, "timed out")?;
        ensure_eq(result.exit_code, Some(0), "exit code")?;
        let expected = |stream: char| -> Vec<u8> { (0..LINES).flat_map(|i| line(stream, i).into_bytes()).collect() };
        let (out, err) = {
            let seen = sink.seen.lock().unwrap();
            (seen.0.clone(), seen.1.clone())
        };
        for (name, got, want) in [
            ("stdout through the slow sink", &out, expected('o')),
            ("stderr through the slow sink", &err, expected('e')),
            ("stdout in the result", &result.stdout, expected('o')),
            ("stderr in the result", &result.stderr, expected('e')),
        ] {
            ensure(*got == want, || format!("{name}: {}", first_difference(got, &want)))?;
        }
        Ok(())
    })
}

/// Bytes printed on stdout before the marker: more than a pipe holds, so a driver that
/// reads only after the command ended has to have kept reading.
const BEFORE: usize = 200 * 1024;

fn timeout_keeps_output(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("partial");
        let script = format!(
            "head -c {BEFORE} /dev/zero | tr '\\0' p; printf 'out-%s\\n' \"$1\"; printf 'err-%s\\n' \"$1\" >&2; \
             exec sleep 60"
        );
        let seen: Arc<Mutex<(Vec<u8>, Vec<u8>)>> = Arc::default();
        let sink = seen.clone();
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script, "sh".into(), marker.clone()]);
        request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            let mut seen = sink.lock().unwrap();
            match stream {
                OutputStream::Stdout => seen.0.extend_from_slice(chunk),
                OutputStream::Stderr => seen.1.extend_from_slice(chunk),
            }
        }));
        request.timeout = Some(Duration::from_secs(6));
        let result = ctx.exec(&lease, request).await?;
        ensure(result.timed_out, || {
            format!(
                "timed_out is false (exit code {:?}, signal {:?})",
                result.exit_code, result.signal
            )
        })?;
        ensure_eq(result.exit_code, None, "exit code of a command killed at its timeout")?;
        let mut out = vec![b'p'; BEFORE];
        out.extend_from_slice(format!("out-{marker}\n").as_bytes());
        let err = format!("err-{marker}\n").into_bytes();
        let (sunk_out, sunk_err) = seen.lock().unwrap().clone();
        for (name, got, want) in [
            ("stdout in the result of a timed-out command", &result.stdout, &out),
            ("stderr in the result of a timed-out command", &result.stderr, &err),
            ("stdout through the sink of a timed-out command", &sunk_out, &out),
            ("stderr through the sink of a timed-out command", &sunk_err, &err),
        ] {
            ensure(got == want, || format!("{name}: {}", first_difference(got, want)))?;
        }
        Ok(())
    })
}
