//! Rows of the Docker driver: execute latency (2), duplex throughput (5), sync (6).

use crate::Config;
use crate::facade::DRIVER_MISSING;
use crate::report::Row;

/// Row 2.
pub(crate) async fn exec_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing(
        "exec-docker",
        2,
        "docker execute `true` p50",
        DRIVER_MISSING,
    )]
}

/// Row 5 (Docker).
pub(crate) async fn duplex_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing("duplex", 5, "docker duplex read", DRIVER_MISSING)]
}

/// Row 6 (Docker).
pub(crate) async fn sync_rows(_config: &Config) -> Vec<Row> {
    vec![Row::missing("sync-docker", 6, "docker sync", DRIVER_MISSING)]
}
