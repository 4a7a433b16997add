//! YAML values as an import shows them: the LLaMA-Factory, NeMo and Megatron Bridge configs
//! are read with `yaml_rust2`, and a value placed or listed is written as its text.

use yaml_rust2::Yaml;

/// A value as its text: scalars as written, a list joined with commas, a mapping by the
/// Python object it builds (`_target_`) or by its keys; None for null.
pub fn text(v: &Yaml) -> Option<String> {
    match v {
        Yaml::Hash(h) => Some(target(v).unwrap_or_else(|| {
            let keys: Vec<&str> = h.keys().filter_map(Yaml::as_str).collect();
            format!("{{{}}}", keys.join(", "))
        })),
        Yaml::Real(s) | Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(n) => Some(n.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        Yaml::Array(a) => Some(a.iter().filter_map(text).collect::<Vec<_>>().join(",")),
        Yaml::Null | Yaml::BadValue => None,
        _ => Some(format!("{v:?}")),
    }
}

/// The class or function a mapping builds (`_target_: torch.nn.functional.silu`), as
/// Hydra and OmegaConf write Python objects.
pub fn target(v: &Yaml) -> Option<String> {
    match v {
        Yaml::Hash(h) => h
            .get(&Yaml::String("_target_".into()))
            .and_then(Yaml::as_str)
            .map(str::to_string),
        _ => None,
    }
}
