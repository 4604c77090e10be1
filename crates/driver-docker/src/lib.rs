//! The envrt `driver-docker` driver (filled by its own issue).
