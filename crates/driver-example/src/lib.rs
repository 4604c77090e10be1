//! # envrt-driver-example
//!
//! The smallest driver: key `example`. Its leases hold nothing (acquire hands out a fresh
//! id, release and destroy are no-ops), it has no optional operation and grants no
//! capability, so the facade refuses every verb (execute, sync, duplex, resume, realize,
//! templates) with its exact `Environment driver "example" does not support ...` texts.
//! It exists to show what adding a driver takes (`docs/writing-a-driver.md`): this crate,
//! the workspace `Cargo.toml`, one feature and one registry entry in the facade, one
//! conformance target. It follows the driver file template: `driver.rs` (the driver and
//! its trait impl), `descriptor.rs` (how the facade learns about it).

#![forbid(unsafe_code)]

mod descriptor;
mod driver;

pub use descriptor::{DESCRIPTOR, ExampleDescriptor};
pub use driver::{DRIVER_KEY, ExampleConfig, ExampleDriver};
