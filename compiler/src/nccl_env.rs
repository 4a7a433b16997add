//! The `job.env` lint: NCCL and PyTorch variables checked against a table of real ones.
//!
//! The table is data (`catalog/env.toml`): each variable with its status (known, renamed,
//! removed, or widely used but read by nobody), its replacement and, where the set is fixed,
//! the values it accepts. Names outside the NCCL and PyTorch namespaces are the user's own
//! business and are not checked.
//!
//! It also owns what an environment value means ([`env_value`]): `$NAME` and `${NAME}` refer
//! to the node's environment, everything else is literal, and command substitution is
//! refused (P0713). Every target writes that one meaning in its own syntax.

use std::collections::HashMap;
use std::sync::OnceLock;

use planc_lang::codes;
use planc_lang::Diagnostic;
use serde::Deserialize;

use crate::plan::PlanSpec;
use crate::schema::did_you_mean;

const ENV_TOML: &str = include_str!("../catalog/env.toml");

/// Prefixes whose names must be in the table: NCCL's and PyTorch's distributed settings.
const LINTED_PREFIXES: &[&str] = &["NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Known,
    Renamed,
    Removed,
    Unknown,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Text,
    Int,
    List,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub status: Status,
    #[serde(default)]
    pub replacement: Option<String>,
    #[serde(default)]
    pub values: Vec<String>,
    #[serde(default)]
    pub kind: Kind,
    pub description: String,
}

#[derive(Deserialize)]
struct EnvFile {
    var: Vec<EnvVar>,
}

/// The table, in file order.
pub fn table() -> &'static [EnvVar] {
    static TABLE: OnceLock<Vec<EnvVar>> = OnceLock::new();
    TABLE.get_or_init(|| {
        toml::from_str::<EnvFile>(ENV_TOML)
            .expect("catalog/env.toml is valid (a unit test parses it)")
            .var
    })
}

fn by_name() -> &'static HashMap<&'static str, &'static EnvVar> {
    static MAP: OnceLock<HashMap<&'static str, &'static EnvVar>> = OnceLock::new();
    MAP.get_or_init(|| table().iter().map(|v| (v.name.as_str(), v)).collect())
}

/// Looks a variable up by its exact name.
pub fn lookup(name: &str) -> Option<&'static EnvVar> {
    by_name().get(name).copied()
}

/// Warnings for the plan's `job.env`: unknown, removed and renamed NCCL/PyTorch variables
/// (P0701–P0703) and values outside a variable's fixed set (P0704).
pub fn lint_env(spec: &PlanSpec) -> Vec<Diagnostic> {
    let Some(job) = &spec.job else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, value) in &job.env {
        let (vf0, vs0) = spec.origins.of("job.env", name).unwrap_or_default();
        let pieces = match env_value(value) {
            Ok(p) => p,
            Err(bad) => {
                out.push(
                    Diagnostic::new(
                        codes::P0713,
                        format!("the value of `{name}` runs a command: {}", bad.what),
                    )
                    .at(vf0, vs0, "refused")
                    .help(
                        "job.env values are exported as written, with `$NAME` and `${NAME}` \
                         taken from the node's environment; compute the value before the job \
                         (or in the training script) and write the result",
                    ),
                );
                continue;
            }
        };
        if name == crate::plan::LAUNCH_BLOCKING && crate::plan::launch_blocking_value(value) {
            out.push(
                Diagnostic::new(
                    codes::P0714,
                    "`CUDA_LAUNCH_BLOCKING` makes every kernel launch wait for its kernel",
                )
                .at(vf0, vs0, "a debugging setting; priced as it runs")
                .help(
                    "the host's dispatch of each operation then sits between kernels and \
                     collectives stop overlapping compute: remove it unless the job needs it \
                     (`planc explain P0714`)",
                ),
            );
        }
        // A reference's value is only known on the node: only the name is checked.
        let refers = pieces.iter().any(|p| matches!(p, EnvPiece::Var(_)));
        let (nf, ns) = spec
            .origins
            .of(crate::resolve::ENV_NAME_ORIGIN, name)
            .or_else(|| spec.origins.of("job.env", name))
            .unwrap_or_default();
        let (vf, vs) = spec.origins.of("job.env", name).unwrap_or((nf, ns));
        if let Some(d) = check(name, value) {
            let d = match d {
                Finding::Name(d) => d.at(nf, ns, "not read by NCCL or PyTorch"),
                Finding::Renamed(d, new) => d.at(nf, ns, format!("now `{new}`")).fix(new),
                Finding::Removed(d) => d.at(nf, ns, "no longer read"),
                Finding::Value(_) if refers => continue,
                Finding::Value(d) => d.at(vf, vs, "not an accepted value"),
            };
            out.push(d);
        }
    }
    out
}

/// One piece of an environment value: literal text, or a reference to a variable of the
/// node's environment (`$NAME`, `${NAME}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvPiece {
    Text(String),
    Var(String),
}

/// Why a value is refused, and where in it (a byte offset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadEnvValue {
    pub at: usize,
    pub what: &'static str,
}

/// An environment value as a shell user means it: `$NAME` and `${NAME}` (NAME a letter or `_`
/// then letters, digits and `_`) refer to the node's environment; a `$` that starts neither
/// is a literal `$`. Command substitution (`$(...)`, backquotes) is refused, and so is
/// `${...}` with anything but a name in it (`${X:-d}`): no target can carry its meaning into
/// every syntax (the kubelet's `$(NAME)` has no defaults), and a command would run on every
/// node at every start.
pub fn env_value(value: &str) -> Result<Vec<EnvPiece>, BadEnvValue> {
    fn is_name_start(c: u8) -> bool {
        c.is_ascii_alphabetic() || c == b'_'
    }
    fn is_name(c: u8) -> bool {
        c.is_ascii_alphanumeric() || c == b'_'
    }
    let b = value.as_bytes();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        match b[i] {
            b'`' => {
                return Err(BadEnvValue {
                    at: i,
                    what: "a backquote (command substitution) is refused",
                })
            }
            b'$' if b.get(i + 1) == Some(&b'(') => {
                return Err(BadEnvValue {
                    at: i,
                    what: "`$(...)` (command substitution) is refused",
                })
            }
            b'$' if b.get(i + 1) == Some(&b'{') => {
                let start = i + 2;
                let mut j = start;
                while j < b.len() && is_name(b[j]) {
                    j += 1;
                }
                if j == start || !is_name_start(b[start]) || b.get(j) != Some(&b'}') {
                    return Err(BadEnvValue {
                        at: i,
                        what: "`${...}` holds only a variable name (no defaults or substitutions)",
                    });
                }
                text.push_str(&value[last..i]);
                if !text.is_empty() {
                    out.push(EnvPiece::Text(std::mem::take(&mut text)));
                }
                out.push(EnvPiece::Var(value[start..j].to_string()));
                i = j + 1;
                last = i;
            }
            b'$' if b.get(i + 1).is_some_and(|&c| is_name_start(c)) => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && is_name(b[j]) {
                    j += 1;
                }
                text.push_str(&value[last..i]);
                if !text.is_empty() {
                    out.push(EnvPiece::Text(std::mem::take(&mut text)));
                }
                out.push(EnvPiece::Var(value[start..j].to_string()));
                i = j;
                last = i;
            }
            _ => i += 1,
        }
    }
    text.push_str(&value[last..]);
    if !text.is_empty() {
        out.push(EnvPiece::Text(text));
    }
    Ok(out)
}

enum Finding {
    Name(Diagnostic),
    Renamed(Diagnostic, String),
    Removed(Diagnostic),
    Value(Diagnostic),
}

fn check(name: &str, value: &str) -> Option<Finding> {
    let Some(var) = lookup(name) else {
        if !LINTED_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return None;
        }
        let known = table()
            .iter()
            .filter(|v| v.status == Status::Known)
            .map(|v| v.name.as_str());
        let d = Diagnostic::new(
            codes::P0701,
            format!("`{name}` is not an NCCL or PyTorch environment variable"),
        );
        let d = match did_you_mean(name, known) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help("it has no effect; see `planc explain P0701`"),
        };
        return Some(Finding::Name(d));
    };
    match var.status {
        Status::Unknown => Some(Finding::Name(
            Diagnostic::new(
                codes::P0701,
                format!("`{name}` is not read by NCCL or PyTorch"),
            )
            .help(var.description.clone()),
        )),
        Status::Renamed => {
            let new = var.replacement.clone().unwrap_or_default();
            Some(Finding::Renamed(
                Diagnostic::new(codes::P0703, format!("`{name}` was renamed `{new}`"))
                    .help(format!("write `{new} = \"{value}\"` ({})", var.description)),
                new,
            ))
        }
        Status::Removed => {
            let d = Diagnostic::new(codes::P0702, format!("`{name}` was removed"));
            Some(Finding::Removed(match &var.replacement {
                Some(r) => d.help(format!("{}; use `{r}` instead", var.description)),
                None => d.help(var.description.clone()),
            }))
        }
        Status::Known => check_value(var, value).map(Finding::Value),
    }
}

fn check_value(var: &EnvVar, value: &str) -> Option<Diagnostic> {
    let v = value.trim();
    let bad = |accepted: String| {
        Diagnostic::new(
            codes::P0704,
            format!("`{}` does not accept `{value}`", var.name),
        )
        .help(format!("accepted: {accepted} ({})", var.description))
    };
    let in_set = |s: &str| var.values.iter().any(|a| a.eq_ignore_ascii_case(s));
    match var.kind {
        Kind::Int => {
            if v.parse::<i64>().is_err() {
                return Some(bad("a whole number".into()));
            }
        }
        Kind::List => {
            // `^a,b` excludes; NCCL_ALGO/NCCL_PROTO also take `allreduce:ring,tree;...`.
            for part in v.split(';').filter(|p| !p.trim().is_empty()) {
                let list = part.rsplit(':').next().unwrap_or(part).trim();
                let list = list.strip_prefix('^').unwrap_or(list);
                for item in list.split(',') {
                    let item = item.trim();
                    if item.is_empty() || !in_set(item) {
                        return Some(bad(format!(
                            "a comma-separated list of {} (a leading ^ excludes)",
                            var.values.join(", ")
                        )));
                    }
                }
            }
        }
        Kind::Text => {
            if !var.values.is_empty() && !in_set(v) {
                return Some(bad(var.values.join(", ")));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    #[test]
    fn env_values_mean_what_a_shell_user_means() {
        use EnvPiece::{Text, Var};
        let t = |s: &str| Text(s.to_string());
        let v = |s: &str| Var(s.to_string());
        assert_eq!(
            env_value("/opt/vccl/lib:$LD_LIBRARY_PATH").unwrap(),
            [t("/opt/vccl/lib:"), v("LD_LIBRARY_PATH")]
        );
        assert_eq!(
            env_value("${HOME}x$A_1-$5 $ \\$").unwrap(),
            [v("HOME"), t("x"), v("A_1"), t("-$5 $ \\$")]
        );
        assert_eq!(env_value("").unwrap(), []);
        for bad in ["a$(id)", "`id`", "${X:-d}", "${}", "${1}", "${X"] {
            assert!(env_value(bad).is_err(), "{bad}");
        }
        assert_eq!(env_value("ab$(id)").unwrap_err().at, 2);
        let refused = codes_for("        NCCL_SOCKET_IFNAME = \"$(ip route | cut -d' ' -f5)\"");
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "P0713");
        // A reference is not checked against the variable's accepted values.
        assert!(codes_for("        NCCL_DEBUG = \"$LEVEL\"").is_empty());
    }

    fn codes_for(env: &str) -> Vec<(String, String)> {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}\n\
             model m {{ layers = 4, hidden = 512, heads = 8, vocab = 1000, seq_len = 512 }}\n\
             train {{ global_batch = 8, precision = bf16, optimizer = adamw }}\n\
             parallel {{ tp = 1, pp = 1, dp = auto, micro_batch = 1 }}\n\
             job {{\n    env {{\n{env}\n    }}\n}}\n"
        );
        let checked = check_source("env.tp", &text);
        let spec = checked.spec.expect("the plan resolves");
        lint_env(&spec)
            .into_iter()
            .map(|d| (d.code.to_string(), d.help.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn launch_blocking_is_warned_where_it_is_set_on() {
        let f = codes_for("CUDA_LAUNCH_BLOCKING = 1");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, "P0714");
        for off in [
            "CUDA_LAUNCH_BLOCKING = 0",
            "CUDA_LAUNCH_BLOCKING = \"$DEBUG\"",
        ] {
            assert!(codes_for(off).is_empty(), "{off}");
        }
    }

    #[test]
    fn table_parses_with_enough_real_variables() {
        let t = table();
        assert!(t.len() >= 40, "{} variables", t.len());
        let mut seen = std::collections::HashSet::new();
        for v in t {
            assert!(seen.insert(&v.name), "duplicate {}", v.name);
            if matches!(v.status, Status::Renamed) {
                let r = v.replacement.as_deref().expect("renamed has a replacement");
                assert_eq!(lookup(r).map(|x| x.status), Some(Status::Known), "{r}");
            }
        }
    }

    #[test]
    fn known_variables_with_good_values_pass() {
        assert!(codes_for(
            "NCCL_DEBUG = \"WARN\"\nNCCL_IB_HCA = \"mlx5_0:1,mlx5_1:1\"\nNCCL_P2P_LEVEL = \"NVL\"\n\
             NCCL_ALGO = \"^NVLS,Tree\"\nNCCL_PROTO = \"allreduce:LL128,Simple;allgather:Simple\"\n\
             NCCL_IB_DISABLE = 0\nNCCL_DEBUG_SUBSYS = \"INIT,NET\"\nNCCL_BUFFSIZE = 8388608\n\
             TORCH_NCCL_ASYNC_ERROR_HANDLING = 3\nPYTHONUNBUFFERED = 1\nnccl_debug = \"info\""
        )
        .is_empty());
    }

    #[test]
    fn unknown_names_are_warned_with_the_correction() {
        let f = codes_for("NCCL_TIMEOUT = 3600\nNCCL_DEBG = \"INFO\"");
        assert_eq!(f[0].0, "P0701");
        assert!(f[0].1.contains("init_process_group(timeout="), "{}", f[0].1);
        assert_eq!(f[1].0, "P0701");
        assert!(f[1].1.contains("NCCL_DEBUG"), "{}", f[1].1);
    }

    #[test]
    fn renamed_and_removed() {
        let f = codes_for(
            "NCCL_ASYNC_ERROR_HANDLING = 1\nNCCL_BLOCKING_WAIT = 1\nNCCL_IB_GDR_LEVEL = 3\nNCCL_TREE_THRESHOLD = 0",
        );
        let got: Vec<&str> = f.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(got, ["P0703", "P0703", "P0703", "P0702"]);
        assert!(f[0].1.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING = \"1\""));
        assert!(f[1].1.contains("TORCH_NCCL_BLOCKING_WAIT"));
        assert!(f[2].1.contains("NCCL_NET_GDR_LEVEL"));
        assert!(f[3].1.contains("NCCL_ALGO"));
    }

    #[test]
    fn bad_values_list_the_accepted_ones() {
        let f = codes_for(
            "NCCL_DEBUG = \"VERBOSE\"\nNCCL_IB_DISABLE = \"yes\"\nNCCL_P2P_LEVEL = \"NVLINK\"\n\
             NCCL_ALGO = \"Ring,Butterfly\"\nNCCL_PROTO = \"LL256\"\nNCCL_BUFFSIZE = \"8MB\"",
        );
        assert_eq!(f.len(), 6, "{f:?}");
        assert!(f.iter().all(|(c, _)| c == "P0704"));
        assert!(f[0].1.contains("VERSION, WARN, INFO, TRACE"));
        assert!(f[1].1.contains("0, 1"));
        assert!(f[2].1.contains("LOC, NVL, PIX"));
        assert!(f[3].1.contains("Ring, Tree"));
        assert!(f[4].1.contains("LL, LL128, Simple"));
        assert!(f[5].1.contains("whole number"));
    }

    #[test]
    fn spans_point_at_the_name_and_the_value() {
        let text = "cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }\n\
             model m { layers = 4, hidden = 512, heads = 8, vocab = 1000, seq_len = 512 }\n\
             train { global_batch = 8, precision = bf16, optimizer = adamw }\n\
             parallel { tp = 1, pp = 1, dp = auto, micro_batch = 1 }\n\
             job { env { NCCL_TIMEOUT = 60, NCCL_DEBUG = \"LOUD\" } }\n";
        let checked = check_source("env.tp", text);
        let d = lint_env(checked.spec.as_ref().unwrap());
        let span = |i: usize| {
            let s = d[i].primary.as_ref().unwrap().span;
            &text[s.start as usize..s.end as usize]
        };
        assert_eq!(span(0), "NCCL_TIMEOUT");
        assert_eq!(span(1), "\"LOUD\"");
    }
}
