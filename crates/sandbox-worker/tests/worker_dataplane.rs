//! The reference worker's side of the `envrt.dataPlane` offer over raw JSON lines: it takes
//! the offer only for a socket it inherited, in a version it speaks (the host-side tests
//! with a real socket are in `dataplane.rs`).

mod common;

use common::*;
use serde_json::json;

/// The name a worker advertises when it accepts the offer.
const EXTENSION: &str = "envrt.dataPlane";

#[test]
fn the_worker_declines_an_offer_it_cannot_take_and_keeps_json_frames() {
    // no socket was inherited at the named descriptor, a version it does not speak, and no
    // offer at all: `supportedMethods` stays as it was
    for offer in [
        json!({"version": 1, "fd": 3, "window": 65536, "chunk": 65536}),
        json!({"version": 2, "fd": 3, "window": 65536, "chunk": 65536}),
        json!(null),
    ] {
        let mut w = Worker::start();
        let mut params = init_params();
        if !offer.is_null() {
            params["envrtDataPlane"] = offer;
        }
        let result = w.ok("initialize", params);
        let methods = result["supportedMethods"].as_array().unwrap();
        assert!(!methods.contains(&json!(EXTENSION)), "{result}");
        assert!(methods.contains(&json!("duplexChannelWrite")));
    }
}
