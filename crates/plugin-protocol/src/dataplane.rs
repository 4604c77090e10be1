//! The `envrt.dataPlane` extension's wire format, shared by the host
//! (`envrt-driver-plugin-sandbox`) and the reference worker (`envrt-sandbox-worker`) (`docs/plugin-protocol.md`, "The binary data plane"): the `initialize` offer,
//! binary frames on the dedicated socket, and the task that writes them.
//!
//! A frame is a 13-byte header, then the payload:
//!
//! ```text
//! route: u64 (big-endian)  kind: u8  length: u32 (big-endian)  payload: [u8; length]
//! ```
//!
//! `route` is the `<n>` of the host route id `duplex-route-<n>`. Each side may have at most
//! `window` bytes of `data` payload per route in flight; the receiver hands credit back
//! with `credit` frames as it consumes them.

use std::io;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufWriter};
use tokio::sync::mpsc;

/// The name a worker adds to `supportedMethods` when it accepts the offer.
pub const EXTENSION: &str = "envrt.dataPlane";

/// The `initialize` param carrying the host's offer.
pub const OFFER_PARAM: &str = "envrtDataPlane";

/// The framing version this crate speaks.
pub const VERSION: u32 = 1;

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 13;

/// The execute param naming the route of its stdin (see [`STDIN_ROUTE_BASE`]).
pub const STDIN_ROUTE_PARAM: &str = "envrtStdinRoute";

/// The first route number of an execute's stdin (extension param `envrtStdinRoute`):
/// numbers from here up never name a duplex route (`duplex-route-<n>` counts from 1), so
/// both kinds share the socket without a clash.
pub const STDIN_ROUTE_BASE: u64 = 1 << 62;

/// The largest payload a frame may carry; a longer one breaks the data plane.
pub const MAX_PAYLOAD: usize = 1024 * 1024;

/// The host's offer, sent in `initialize` as [`OFFER_PARAM`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The framing version ([`VERSION`]).
    pub version: u32,
    /// The worker's descriptor number of its end of the socket (inherited at spawn).
    pub fd: i32,
    /// Bytes of `data` each side may have in flight per route before credit comes back.
    pub window: u32,
    /// The largest `data` payload the host takes (its chunk bound).
    pub chunk: u32,
}

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Bytes: host → worker for the command's stdin, worker → host for its stdout.
    Data = 1,
    /// Host → worker: close the command's stdin after the data before it (half-close).
    Eof = 2,
    /// Worker → host: the command's stdin can take no more; the payload is the error text
    /// every later write gets (the text of a `-32002` worker error).
    Close = 3,
    /// Either way: the payload (u32, big-endian) is bytes of `data` the sender may send more.
    Credit = 4,
    /// Worker → host: the command ended; the last frame of the route. Payload: one flag
    /// byte (bit 0: an exit code follows, bit 1: the transport closed) and the code (i32,
    /// big-endian).
    Exit = 5,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Data,
            2 => Kind::Eof,
            3 => Kind::Close,
            4 => Kind::Credit,
            5 => Kind::Exit,
            _ => return None,
        })
    }
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The route number.
    pub route: u64,
    /// The kind.
    pub kind: Kind,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Writes the header of a frame whose payload already follows [`HEADER_BYTES`] bytes of
/// room at the start of `frame` (so bulk data is read straight into its frame).
pub fn write_header(frame: &mut [u8], route: u64, kind: Kind) {
    let length = (frame.len().saturating_sub(HEADER_BYTES)) as u32;
    frame[..8].copy_from_slice(&route.to_be_bytes());
    frame[8] = kind as u8;
    frame[9..HEADER_BYTES].copy_from_slice(&length.to_be_bytes());
}

/// Encodes one frame.
pub fn encode(route: u64, kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len());
    frame.extend_from_slice(&route.to_be_bytes());
    frame.push(kind as u8);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A `credit` frame granting `bytes`.
pub fn credit(route: u64, bytes: u32) -> Vec<u8> {
    encode(route, Kind::Credit, &bytes.to_be_bytes())
}

/// An `exit` frame.
pub fn exit(route: u64, exit_code: Option<i32>, transport_closed: bool) -> Vec<u8> {
    let flags = u8::from(exit_code.is_some()) | (u8::from(transport_closed) << 1);
    let mut payload = vec![flags];
    payload.extend_from_slice(&exit_code.unwrap_or(0).to_be_bytes());
    encode(route, Kind::Exit, &payload)
}

/// The bytes a `credit` payload grants; `None` when malformed.
pub fn parse_credit(payload: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(payload.try_into().ok()?))
}

/// The `(exit code, transport closed)` of an `exit` payload; `None` when malformed.
pub fn parse_exit(payload: &[u8]) -> Option<(Option<i32>, bool)> {
    let (&flags, code) = payload.split_first()?;
    let code = i32::from_be_bytes(code.try_into().ok()?);
    if flags > 3 {
        return None;
    }
    Some(((flags & 1 == 1).then_some(code), flags & 2 == 2))
}

/// Reads the next frame; `None` at a clean end of stream. An unknown kind or a payload
/// over [`MAX_PAYLOAD`] is an `InvalidData` error: the stream cannot be resynchronised.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Option<Frame>> {
    let mut header = [0u8; HEADER_BYTES];
    match reader.read_exact(&mut header[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    reader.read_exact(&mut header[1..]).await?;
    let route = u64::from_be_bytes(header[..8].try_into().unwrap_or_default());
    let kind = Kind::from_byte(header[8])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("unknown frame kind {}", header[8])))?;
    let length = u32::from_be_bytes(header[9..].try_into().unwrap_or_default()) as usize;
    if length > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes is over the limit of {MAX_PAYLOAD}"),
        ));
    }
    let mut payload = vec![0u8; length];
    reader.read_exact(&mut payload).await?;
    Ok(Some(Frame { route, kind, payload }))
}

/// Starts the task that writes queued frames, in order, to `sink`; it ends when every
/// sender is dropped or a write fails.
pub fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(sink: W) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut sink = BufWriter::with_capacity(64 * 1024, sink);
        while let Some(frame) = rx.recv().await {
            if sink.write_all(&frame).await.is_err() {
                return;
            }
            // write what is queued behind it in the same flush
            while let Ok(frame) = rx.try_recv() {
                if sink.write_all(&frame).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    tx
}

/// The `<n>` of a host route id `duplex-route-<n>`.
pub fn route_number(route_id: &str) -> Option<u64> {
    route_id.strip_prefix("duplex-route-")?.parse().ok()
}

/// The host route id of route number `n`.
pub fn route_id(n: u64) -> String {
    format!("duplex-route-{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offer_travels_in_initialize_params_under_its_name() {
        let offer = Offer {
            version: VERSION,
            fd: 5,
            window: 10,
            chunk: 4,
        };
        let params = crate::handshake::InitializeParams {
            manifest: serde_json::Value::Null,
            config: Default::default(),
            instance_info: Default::default(),
            api_version: 1,
            database_namespace: None,
            envrt_data_plane: Some(offer),
        };
        let value = serde_json::to_value(&params).unwrap();
        assert_eq!(
            value[OFFER_PARAM],
            serde_json::json!({"version": 1, "fd": 5, "window": 10, "chunk": 4})
        );
        let back: crate::handshake::InitializeParams = serde_json::from_value(value).unwrap();
        assert_eq!(back.envrt_data_plane, Some(offer));
        let without = serde_json::to_value(crate::handshake::InitializeParams {
            envrt_data_plane: None,
            ..params
        })
        .unwrap();
        assert!(without.get(OFFER_PARAM).is_none(), "no socket, no offer: {without}");
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let mut stream = encode(7, Kind::Data, b"hello");
        stream.extend(credit(7, 65536));
        stream.extend(exit(7, Some(-3), false));
        stream.extend(exit(9, None, true));
        stream.extend(encode(u64::MAX, Kind::Eof, b""));
        let mut reader = &stream[..];
        let mut frames = Vec::new();
        while let Some(frame) = read_frame(&mut reader).await.unwrap() {
            frames.push(frame);
        }
        assert_eq!(frames.len(), 5);
        assert_eq!(
            frames[0],
            Frame {
                route: 7,
                kind: Kind::Data,
                payload: b"hello".to_vec()
            }
        );
        assert_eq!(parse_credit(&frames[1].payload), Some(65536));
        assert_eq!(parse_exit(&frames[2].payload), Some((Some(-3), false)));
        assert_eq!(parse_exit(&frames[3].payload), Some((None, true)));
        assert_eq!((frames[4].route, frames[4].kind), (u64::MAX, Kind::Eof));
        assert_eq!(parse_credit(b"abc"), None);
        assert_eq!(parse_exit(&[9, 0, 0, 0, 0]), None);

        let mut bad = encode(1, Kind::Data, b"x");
        bad[8] = 42;
        let err = read_frame(&mut &bad[..]).await.unwrap_err();
        assert_eq!(err.to_string(), "unknown frame kind 42");
        let mut huge = encode(1, Kind::Data, b"");
        huge[9..].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_be_bytes());
        assert_eq!(
            read_frame(&mut &huge[..]).await.unwrap_err().to_string(),
            "a frame of 1048577 bytes is over the limit of 1048576"
        );
        // a stream cut inside a frame is an error, not a clean end
        let cut = &encode(1, Kind::Data, b"abc")[..14];
        assert!(read_frame(&mut &cut[..]).await.is_err());
        let mut framed = vec![0u8; HEADER_BYTES + 3];
        framed[HEADER_BYTES..].copy_from_slice(b"abc");
        write_header(&mut framed, 9, Kind::Data);
        assert_eq!(framed, encode(9, Kind::Data, b"abc"));
        assert_eq!(route_number(&route_id(42)), Some(42));
        assert_eq!(route_number("route-1"), None);
    }
}
