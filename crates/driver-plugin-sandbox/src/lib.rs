//! The envrt `driver-plugin-sandbox` driver (filled by its own issue).
pub mod worker;
