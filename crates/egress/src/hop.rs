//! The hop-by-hop headers: the proxy's own, never passed on and never set as a brokered
//! credential. Outside the `proxy` feature, since a credential is checked without it.

/// Hop-by-hop headers, lower case.
pub(crate) const HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];
