//! The envrt `driver-local` driver (filled by its own issue).
