//! Plugin arguments: the error every plugin constructor returns, and the helpers that parse a
//! plugin's YAML `args` into its typed struct (naming the offending field) and show them back.
use serde::de::DeserializeOwned;

/// Errors building a plugin from config.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PluginError {
    /// No plugin of this kind has this name.
    #[error("unknown {kind} plugin {name:?} (known: {known})")]
    Unknown {
        /// `filter` or `score`.
        kind: &'static str,
        /// The name.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The plugin's arguments are malformed or out of range.
    #[error("{plugin} args{}: {message}", if path.is_empty() { String::new() } else { format!(".{path}") })]
    InvalidArgs {
        /// The plugin.
        plugin: String,
        /// Path of the offending field inside `args` (`targetUtilization`,
        /// `resources[1].weight`); empty for the whole `args`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl PluginError {
    /// An invalid-argument error for `plugin` at `path`.
    pub fn invalid(plugin: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError::InvalidArgs {
            plugin: plugin.to_string(),
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Deserializes `args` (null = all defaults) into `T`, reporting the field path on error.
pub fn parse_args<T: DeserializeOwned>(
    plugin: &str,
    args: &serde_norway::Value,
) -> Result<T, PluginError> {
    let value = if args.is_null() {
        serde_norway::Value::Mapping(serde_norway::Mapping::new())
    } else {
        args.clone()
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        PluginError::invalid(plugin, path, e.into_inner().to_string())
    })
}

/// Arguments of plugins that take none: any key is rejected.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Serializes a plugin's arguments for display (`ListProfiles`).
pub fn args_to_yaml<T: serde::Serialize>(args: &T) -> String {
    serde_norway::to_string(args).unwrap_or_default()
}
