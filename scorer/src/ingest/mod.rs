//! Agent → scorer ingest: report validation and the `loadstar.v1.Ingest` stream service.
pub mod service;
pub mod validate;
