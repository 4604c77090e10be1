//! Rows of the sandbox plugin driver: execute latency (3), duplex throughput (5), open
//! duplex routes (7).

use crate::Config;
use crate::facade::DRIVER_MISSING;
use crate::report::Row;

/// Row 3.
pub(crate) async fn exec_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing(
        "exec-sandbox",
        3,
        "sandbox execute `true` p50",
        DRIVER_MISSING,
    )]
}

/// Row 5 (sandbox).
pub(crate) async fn duplex_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing("duplex", 5, "sandbox duplex read", DRIVER_MISSING)]
}

/// Row 7 (sandbox routes).
pub(crate) async fn route_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing(
        "scale-duplex",
        7,
        "128 open duplex routes (sandbox)",
        DRIVER_MISSING,
    )]
}
