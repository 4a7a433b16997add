//! Quoting for the three languages artifacts are written in: POSIX shell, YAML and JSON.
//!
//! Every string that comes from the plan goes through one of these before it lands in an
//! artifact, so that no value (a job name, a partition, an environment variable) can end a
//! quoted word and run a command.
//!
//! Environment values are the one place a plan string is not all literal: `$NAME` and
//! `${NAME}` refer to the node's environment (`planc_compiler::nccl_env::env_value` parses
//! them). [`shell_env`], [`kube_env`] and [`deepspeed_env`] write that meaning in a shell
//! export, a container's `env` list and DeepSpeed's `.deepspeed_env`.

use planc_compiler::nccl_env::EnvPiece;

/// Single-quotes `s` for POSIX shells: the only character special inside single quotes is
/// `'` itself, written as `'\''` (close, escaped quote, reopen). Always quotes, even words
/// that would be safe bare, so that a reader sees at once which words came from the plan.
pub fn shell(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Quotes `s` only where a shell would read it differently bare (`shlex.quote`): for words
/// planc writes itself (flags), which stay readable.
pub fn shell_word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c));
    if safe {
        s.to_string()
    } else {
        shell(s)
    }
}

/// A JSON string literal, which is also a YAML double-quoted scalar: YAML 1.2 flow scalars
/// in double quotes accept exactly JSON's escapes, and JSON escapes every control character.
/// Non-ASCII is escaped too (`\uXXXX`), so no line separator or BOM survives raw.
pub fn yaml(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || (c as u32) >= 0x7f => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` with every `$` doubled, for a container's `command`, `args` and `env` values: the
/// kubelet replaces `$(NAME)` there with a variable's value and reads `$$` as one `$`, so a
/// plan string that contains `$(HOME)` reaches the program as written.
pub fn kube_literal(s: &str) -> String {
    s.replace('$', "$$")
}

/// Text inside double quotes with every character the shell interprets there escaped.
fn double_quoted_text(out: &mut String, text: &str) {
    for c in text.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
}

/// An environment value as the right-hand side of a shell export: double-quoted, the text
/// escaped, each reference `${NAME-}` (empty when the node does not set it, as a shell user
/// without `set -u` means it; the launch scripts run with `set -u`).
pub fn shell_env(pieces: &[EnvPiece]) -> String {
    let mut out = String::from("\"");
    for p in pieces {
        match p {
            EnvPiece::Text(t) => double_quoted_text(&mut out, t),
            EnvPiece::Var(n) => out.push_str(&format!("${{{n}-}}")),
        }
    }
    out.push('"');
    out
}

/// An environment value for a container's `env` list, where the kubelet reads `$(NAME)` as a
/// variable defined earlier in the list (`defined`) and `$$` as `$`. `None` when the value
/// refers to any other variable: the kubelet knows only the pod spec's variables, not the
/// image's or the node's, and would leave `$(NAME)` as it is.
pub fn kube_env(pieces: &[EnvPiece], defined: &[&str]) -> Option<String> {
    let mut out = String::new();
    for p in pieces {
        match p {
            EnvPiece::Text(t) => out.push_str(&kube_literal(t)),
            EnvPiece::Var(n) if defined.contains(&n.as_str()) => out.push_str(&format!("$({n})")),
            EnvPiece::Var(_) => return None,
        }
    }
    Some(out)
}

/// An environment value as a line of `.deepspeed_env` (after `NAME=`). DeepSpeed's launcher
/// (launcher/runner.py, multinode_runner.py) strips the value, wraps it in double quotes when
/// it holds anything but `\w@%+=:,./-`, and sends `export NAME="VALUE";` to every node
/// through pdsh, where the node's shell expands it: so the value is written as the inside of
/// a double-quoted word, references as `${NAME}`. (Its openmpi, mpich and slurm launchers
/// pass the value without a shell: there a reference stays unexpanded.)
pub fn deepspeed_env(pieces: &[EnvPiece]) -> String {
    let mut out = String::new();
    for p in pieces {
        match p {
            EnvPiece::Text(t) => double_quoted_text(&mut out, t),
            EnvPiece::Var(n) => out.push_str(&format!("${{{n}}}")),
        }
    }
    out
}

/// A name usable as a Kubernetes object name (RFC 1123 label: lowercase letters, digits and
/// `-`, starting and ending with an alphanumeric, at most 63 characters).
pub fn dns_label(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(63).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "planc-job".to_string()
    } else {
        out
    }
}

/// A word safe in a `#SBATCH` line and a file name: letters, digits, `.`, `_`, `-`; other
/// characters become `_`. sbatch reads `#SBATCH` lines itself, not through a shell, so
/// nothing there could run, but a stray quote or space would cut the option short.
pub fn plain_word(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "planc-job".to_string()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quotes_everything_and_escapes_quotes() {
        assert_eq!(shell("gpu"), "'gpu'");
        assert_eq!(shell(""), "''");
        assert_eq!(shell("it's"), "'it'\\''s'");
        assert_eq!(shell("x\"; rm -rf ~; echo \""), "'x\"; rm -rf ~; echo \"'");
        assert_eq!(shell("$(touch /tmp/x)`id`"), "'$(touch /tmp/x)`id`'");
    }

    #[test]
    fn shell_word_leaves_flags_bare() {
        assert_eq!(
            shell_word("--tensor-model-parallel-size"),
            "--tensor-model-parallel-size"
        );
        assert_eq!(shell_word("mlx5_0:1,mlx5_1:1"), "mlx5_0:1,mlx5_1:1");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn yaml_is_json() {
        let nasty = "a\"b\\c\nd\u{2028}e\u{1F600}: #x";
        let q = yaml(nasty);
        let back: String = serde_json::from_str(&q).unwrap();
        assert_eq!(back, nasty);
        assert!(q.is_ascii());
    }

    #[test]
    fn kube_literal_doubles_dollars() {
        assert_eq!(
            kube_literal("$(touch x) $$ $HOME"),
            "$$(touch x) $$$$ $$HOME"
        );
        assert_eq!(kube_literal("/ckpt"), "/ckpt");
    }

    fn pieces(s: &str) -> Vec<EnvPiece> {
        planc_compiler::nccl_env::env_value(s).unwrap()
    }

    #[test]
    fn env_values_in_each_syntax() {
        let v = pieces("/opt/vccl/lib:$LD_LIBRARY_PATH \"$5\\ ${A}");
        assert_eq!(
            shell_env(&v),
            "\"/opt/vccl/lib:${LD_LIBRARY_PATH-} \\\"\\$5\\\\ ${A-}\""
        );
        assert_eq!(kube_env(&v, &["LD_LIBRARY_PATH"]), None);
        assert_eq!(
            kube_env(&v, &["LD_LIBRARY_PATH", "A"]).as_deref(),
            Some("/opt/vccl/lib:$(LD_LIBRARY_PATH) \"$$5\\ $(A)")
        );
        assert_eq!(kube_env(&pieces("x$ $"), &[]).as_deref(), Some("x$$ $$"));
        assert_eq!(
            deepspeed_env(&v),
            "/opt/vccl/lib:${LD_LIBRARY_PATH} \\\"\\$5\\\\ ${A}"
        );
    }

    #[test]
    fn names() {
        assert_eq!(dns_label("Llama3_70B pretrain!"), "llama3-70b-pretrain");
        assert_eq!(dns_label("x\"; rm -rf ~; echo \""), "x-rm-rf-echo");
        assert_eq!(dns_label("---"), "planc-job");
        assert_eq!(dns_label(&"a".repeat(80)).len(), 63);
        assert_eq!(plain_word("x\"; rm -rf ~"), "x___rm_-rf__");
    }
}
