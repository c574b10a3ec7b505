//! Filter and score plugins (one file per policy) and the registry that builds them by name
//! from a profile's config.
use crate::framework::{FilterPlugin, ScorePlugin};

/// Errors building a plugin from config.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No plugin has this name.
    #[error("unknown plugin {name:?}")]
    Unknown {
        /// The name.
        name: String,
    },
}

/// Builds the filter plugin `name` with `args`.
pub fn build_filter(
    name: &str,
    _args: &serde_norway::Value,
) -> Result<Box<dyn FilterPlugin>, PluginError> {
    Err(PluginError::Unknown { name: name.into() })
}

/// Builds the score plugin `name` with `args`.
pub fn build_score(
    name: &str,
    _args: &serde_norway::Value,
) -> Result<Box<dyn ScorePlugin>, PluginError> {
    Err(PluginError::Unknown { name: name.into() })
}
