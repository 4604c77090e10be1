//! The example driver's [`DriverDescriptor`]: key `example`, no `envrt.toml` section,
//! registered only when a program configures `ExampleConfig { register: true }`.

use std::any::Any;
use std::collections::BTreeMap;

use async_trait::async_trait;
use envrt_driver_api::Environment;
use envrt_driver_api::descriptor::{
    BuildContext, Built, DriverDescriptor, DriverSettings, SettingsContext, settings_as,
};

use crate::driver::{DRIVER_KEY, ExampleConfig, ExampleDriver};

/// The example driver's descriptor (the facade registers it under feature `example`).
pub static DESCRIPTOR: ExampleDescriptor = ExampleDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct ExampleDescriptor;

#[async_trait]
impl DriverDescriptor for ExampleDescriptor {
    fn key(&self) -> &'static str {
        DRIVER_KEY
    }

    /// A plain builder leaves it out: its default settings do not register it.
    fn registers_by_default(&self) -> bool {
        false
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(ExampleConfig::default())
    }

    /// It owns no section of `envrt.toml`, so there is nothing to read.
    fn settings(
        &self,
        _: &BTreeMap<String, serde_json::Value>,
        _: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        Ok(self.default_settings())
    }

    async fn build(
        &self,
        settings: &(dyn Any + Send + Sync),
        context: &BuildContext<'_>,
    ) -> Result<Vec<Built>, String> {
        let config = settings_as::<ExampleConfig>(DRIVER_KEY, settings)?;
        if !config.register || !context.needs(DRIVER_KEY) {
            return Ok(Vec::new());
        }
        Ok(vec![Built::new(DRIVER_KEY, Ok(ExampleDriver::new()))])
    }

    fn isolation(&self, _: &Environment) -> Vec<(String, String)> {
        vec![(
            "isolation".into(),
            "nothing runs: the example driver has no execute".into(),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_configured_register_builds_the_driver() {
        let context = BuildContext {
            state_dir: None,
            environments: &[],
            needed: None,
            left_out: None,
            plugin_state: None,
        };
        let off = DESCRIPTOR.build(&ExampleConfig::default(), &context).await.unwrap();
        assert!(off.is_empty());
        let on = DESCRIPTOR
            .build(&ExampleConfig { register: true }, &context)
            .await
            .unwrap();
        assert_eq!(on.len(), 1);
        assert_eq!(on[0].key, "example");
        assert_eq!(
            DESCRIPTOR.build(&(), &context).await.err().unwrap(),
            "driver \"example\" was handed settings of another type"
        );
    }
}
