//! The front half of `planc check`: load, parse and resolve a plan file.

use std::path::Path;

use planc_lang::Diagnostic;

use crate::plan::PlanSpec;
use crate::source::{load_plan, FileLoader, SourceMap};

pub struct Checked {
    pub sources: SourceMap,
    pub spec: Option<PlanSpec>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Loads and resolves the plan at `path`. `Err` only when the root file cannot be read.
pub fn check_file(path: &Path, loader: &dyn FileLoader) -> std::io::Result<Checked> {
    let mut sources = SourceMap::default();
    let (order, mut diagnostics) = load_plan(path, loader, &mut sources)?;
    let (spec, resolve_diags) = crate::resolve::resolve(&sources, &order);
    diagnostics.extend(resolve_diags);
    let spec = if diagnostics.iter().any(Diagnostic::is_error) {
        None
    } else {
        spec
    };
    Ok(Checked {
        sources,
        spec,
        diagnostics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FsLoader;

    #[test]
    fn the_gpt3_example_resolves() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt3-175b.tp");
        let c = check_file(&root, &FsLoader).unwrap();
        assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
        let spec = c.spec.unwrap();
        assert_eq!(spec.cluster.world_size(), 1024);
        assert_eq!(spec.model.ffn_hidden, 4 * 12288);
        assert_eq!(spec.cluster.inter_node.unwrap().link.bandwidth, 25e9);
    }
}
