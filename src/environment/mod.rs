//! A run's environment: which OCI image it uses and where that choice came from.

pub mod source;
