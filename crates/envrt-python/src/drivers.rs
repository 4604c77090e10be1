//! The drivers of `Runtime.create(**drivers)`: each keyword is a driver key with that
//! driver's settings in the form of its `envrt.toml` section, applied through the
//! facade's driver registry, so a driver added to the registry is reachable from Python
//! without a change here.

use envrt::{JsonMap, RuntimeBuilder};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The keys of every driver this build knows, in registration order.
#[pyfunction]
pub(crate) fn known_drivers() -> Vec<&'static str> {
    envrt::known_drivers()
}

/// `builder` with the drivers `drivers` names configured; a driver set up only on demand
/// (one that connects somewhere) that `drivers` does not name is left out.
pub(crate) fn configured(mut builder: RuntimeBuilder, drivers: &JsonMap) -> PyResult<RuntimeBuilder> {
    for descriptor in envrt::registry::descriptors() {
        if !drivers.contains_key(descriptor.key()) && descriptor.on_demand() && descriptor.registers_by_default() {
            builder = builder.without_driver(descriptor.key());
        }
    }
    for (key, section) in drivers {
        builder = builder.configure_section(key, section).map_err(PyValueError::new_err)?;
    }
    Ok(builder)
}

/// One sandbox plugin, to add to a builder: the manifest's JSON text (relative paths
/// resolved against `folder`), which entry, and its configuration. Manifests arrive as
/// text (the Python side builds the reference worker's), which `envrt.toml`'s `[[plugin]]`
/// (a manifest file) cannot express, so this names the sandbox driver's own types.
pub(crate) fn plugin(
    manifest: &str,
    folder: Option<&std::path::Path>,
    driver_key: Option<String>,
    config: JsonMap,
) -> PyResult<(
    envrt::plugin_sandbox::PluginManifest,
    envrt::plugin_sandbox::SandboxOptions,
)> {
    use envrt::plugin_sandbox::{PluginManifest, SandboxOptions};
    let manifest = PluginManifest::from_json_in(manifest, folder).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let options = SandboxOptions {
        driver_key,
        config,
        ..Default::default()
    };
    Ok((manifest, options))
}

/// `builder` with the sandbox plugins `loaded` (from [`plugin`]).
pub(crate) fn with_plugins(
    builder: RuntimeBuilder,
    loaded: Vec<(
        envrt::plugin_sandbox::PluginManifest,
        envrt::plugin_sandbox::SandboxOptions,
    )>,
) -> RuntimeBuilder {
    builder.configure_with(|s: &mut envrt::plugin_sandbox::SandboxSettings| s.plugins.extend(loaded))
}
