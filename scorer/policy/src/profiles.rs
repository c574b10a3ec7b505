//! The profile registry: the profiles a scorer serves, looked up by name (the first is the
//! default). Every layer above (gRPC, scheduler, extender) asks it; lookups fail with a
//! [`ProfileError`] that each caller maps to its own protocol.
use std::collections::HashMap;
use std::sync::Arc;

use loadstar_framework::Profile;
use thiserror::Error;

/// Errors of a profile lookup.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// The registry is empty and the default profile was asked for.
    #[error("no profiles configured")]
    NoneConfigured,
    /// No profile has this name.
    #[error("unknown profile {name}; configured profiles: {configured}")]
    Unknown {
        /// The name asked for, quoted and cut to a bounded length.
        name: String,
        /// The configured names, comma-separated.
        configured: String,
    },
}

/// The profiles a scorer serves; the first is the default.
#[derive(Debug)]
pub struct Profiles {
    list: Vec<Arc<Profile>>,
    by_name: HashMap<String, usize>,
}

impl Profiles {
    /// Wraps built profiles (must be non-empty; the first is the default).
    pub fn new(list: Vec<Profile>) -> Profiles {
        let list: Vec<Arc<Profile>> = list.into_iter().map(Arc::new).collect();
        let by_name = list
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        Profiles { list, by_name }
    }

    /// The profile named `name`, or the default for an empty name.
    pub fn get(&self, name: &str) -> Result<&Arc<Profile>, ProfileError> {
        if name.is_empty() {
            return self.list.first().ok_or(ProfileError::NoneConfigured);
        }
        self.by_name
            .get(name)
            .map(|&i| &self.list[i])
            .ok_or_else(|| ProfileError::Unknown {
                name: loadstar_common::text::quote(name),
                configured: self
                    .list
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Whether a profile is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// All profiles.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Profile>> {
        self.list.iter()
    }
}
