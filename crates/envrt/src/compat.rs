//! Deprecated per-driver builder methods, kept so that programs written before the driver
//! registry still compile: each is [`RuntimeBuilder::configure`] or
//! [`RuntimeBuilder::configure_with`] with the driver's own settings type.

#![allow(deprecated)]

use crate::RuntimeBuilder;

impl RuntimeBuilder {
    /// Configures the local driver.
    #[cfg(feature = "local")]
    #[cfg_attr(docsrs, doc(cfg(feature = "local")))]
    #[deprecated(note = "use `configure(envrt::local::LocalConfig { .. })`")]
    pub fn local_config(self, config: envrt_driver_local::LocalConfig) -> Self {
        self.configure(config)
    }

    /// Configures the Docker driver.
    #[cfg(feature = "docker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
    #[deprecated(note = "use `configure(envrt::docker::DockerConfig { .. })`")]
    pub fn docker_config(self, config: envrt_driver_docker::DockerConfig) -> Self {
        self.configure(config)
    }

    /// Configures the SSH driver (it connects lazily, on a lease's first call).
    #[cfg(feature = "ssh")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ssh")))]
    #[deprecated(note = "use `configure(envrt::ssh::SshConfig { .. })`")]
    pub fn ssh_config(self, config: envrt_driver_ssh::SshConfig) -> Self {
        self.configure(config)
    }

    /// Adds a sandbox driver run by the plugin worker `manifest` names; its key is the
    /// manifest entry's `driverKey` (`sandbox` by default).
    #[cfg(feature = "plugin-sandbox")]
    #[cfg_attr(docsrs, doc(cfg(feature = "plugin-sandbox")))]
    #[deprecated(note = "use `configure_with(|s: &mut envrt::plugin_sandbox::SandboxSettings| s.plugins.push(..))`")]
    pub fn sandbox_plugin(
        self,
        manifest: envrt_driver_plugin_sandbox::PluginManifest,
        options: envrt_driver_plugin_sandbox::SandboxOptions,
    ) -> Self {
        self.configure_with(|s: &mut envrt_driver_plugin_sandbox::SandboxSettings| s.plugins.push((manifest, options)))
    }
}
