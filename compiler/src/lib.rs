//! The planc compiler: from `.tp` files to a checked, costed plan.
//!
//! Data flows `source` (files, imports) → `resolve` (blocks, attributes, units, presets:
//! a [`plan::PlanSpec`]) → `validate` (layout rules) → `cost` (parameters, FLOPs, memory,
//! time) → `report` (the JSON contract). [`check`] runs the whole pipeline and is what the
//! command line, tests and (later) the LSP call.

pub mod attr_docs;
pub mod capability;
pub mod catalog;
pub mod check;
pub mod cost;
pub mod nccl_env;
pub mod plan;
pub mod pricing;
pub mod profile;
pub mod report;
pub mod resolve;
pub mod schema;
pub mod settings;
pub mod solve;
pub mod source;
pub mod synonyms;
pub mod token_file;
pub mod validate;
pub mod value;
