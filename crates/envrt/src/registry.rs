//! The drivers this build knows: one feature-gated line per driver crate, the only place
//! in the facade that names one. [`RuntimeBuilder`](crate::RuntimeBuilder),
//! [`config`](crate::config), `envrt caps`, `envrt doctor`, the Python package and the
//! bench iterate this list instead.

use envrt_runtime_core::Environment;
use envrt_runtime_core::descriptor::DriverDescriptor;

/// Every driver descriptor this build enables, in registration order (the order of
/// `envrt.toml`'s sections and of `envrt doctor`'s checks).
static DRIVERS: &[&dyn DriverDescriptor] = &[
    #[cfg(feature = "local")]
    &envrt_driver_local::DESCRIPTOR,
    #[cfg(feature = "docker")]
    &envrt_driver_docker::DESCRIPTOR,
    #[cfg(feature = "ssh")]
    &envrt_driver_ssh::DESCRIPTOR,
    #[cfg(feature = "plugin-sandbox")]
    &envrt_driver_plugin_sandbox::DESCRIPTOR,
    #[cfg(feature = "example")]
    &envrt_driver_example::DESCRIPTOR,
];

/// Every driver descriptor this build enables, in registration order.
pub fn descriptors() -> &'static [&'static dyn DriverDescriptor] {
    DRIVERS
}

/// The keys of every driver this build knows, in registration order (`local`, `docker`,
/// `ssh`, `sandbox` with every feature).
pub fn known_drivers() -> Vec<&'static str> {
    DRIVERS.iter().map(|d| d.key()).collect()
}

/// The descriptor of the driver key `key`, when this build knows it.
pub fn descriptor(key: &str) -> Option<&'static dyn DriverDescriptor> {
    DRIVERS.iter().copied().find(|d| d.describes(key))
}

/// `(setting, value)` rows of what `environment` enforces on its commands (for `envrt
/// caps` and `envrt doctor`); a driver this build does not know (a plugin's own key) is
/// set by its plugin worker.
pub fn isolation(environment: &Environment) -> Vec<(String, String)> {
    match descriptor(&environment.driver) {
        Some(descriptor) => descriptor.isolation(environment),
        None => vec![("isolation".into(), "set by the plugin worker".into())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_drivers_follow_the_features_in_registration_order() {
        let expected: Vec<&str> = [
            ("local", cfg!(feature = "local")),
            ("docker", cfg!(feature = "docker")),
            ("ssh", cfg!(feature = "ssh")),
            ("sandbox", cfg!(feature = "plugin-sandbox")),
        ]
        .into_iter()
        .filter_map(|(key, on)| on.then_some(key))
        .collect();
        // The built-in four come first, in this order; a driver added later (such as the
        // example driver, under its own feature) follows them, once, with its descriptor.
        let known = known_drivers();
        assert_eq!(known[..expected.len()], expected, "{known:?}");
        for (at, key) in known.iter().enumerate() {
            assert_eq!(descriptor(key).map(|d| d.key()), Some(*key));
            assert!(!known[..at].contains(key), "{key} registered twice: {known:?}");
        }
        assert!(descriptor("zzz").is_none());
        let unknown = Environment::new("p", "p", "bwrap");
        assert_eq!(
            isolation(&unknown),
            [("isolation".to_owned(), "set by the plugin worker".to_owned())]
        );
    }
}
