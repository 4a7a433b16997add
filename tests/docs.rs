//! The documentation a newcomer reads does what it says: the README's first plan checks as
//! written, and each step of its "then try" list behaves as the README describes, run the
//! way a user runs it (in a fresh folder, with the commands the README prints).

mod common;

use std::path::Path;
use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(common::root().join("README.md")).expect("README.md")
}

/// The body of the first fenced block with this info string after `heading`.
fn fenced_block_after(text: &str, heading: &str, info: &str) -> String {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let rest = &text[start..];
    let open = format!("```{info}\n");
    let from = rest
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{info} block after {heading:?}"))
        + open.len();
    let len = rest[from..].find("\n```").expect("the block is closed") + 1;
    rest[from..from + len].to_string()
}

/// `planc ARGS` in `dir`, as a user types it there.
fn planc_in(dir: &Path, args: &[&str]) -> common::Run {
    let out = Command::new(env!("CARGO_BIN_EXE_planc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("the planc binary runs");
    common::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

const FIRST: &str = "## Your first plan in five minutes";

/// Runs a command the README prints, after checking that the README still prints it.
fn readme_command(readme: &str, dir: &Path, command: &str) -> common::Run {
    assert!(
        readme.contains(command),
        "the README no longer says `{command}`: update tests/docs.rs with it"
    );
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    planc_in(dir, &args)
}

#[test]
fn the_readme_first_plan_checks_as_written() {
    let readme = readme();
    let plan = fenced_block_after(&readme, FIRST, "tp");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("first.tp"), &plan).unwrap();

    let run = readme_command(&readme, dir.path(), "planc check first.tp");
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        run.stderr.contains("dp = auto resolved to 4"),
        "{}",
        run.stderr
    );
    // The layout lines the README shows are the ones planc prints (the figures below them
    // are the cost model's and may move; the README says so).
    let shown = fenced_block_after(&readme, "    planc check first.tp", "");
    for line in shown.lines().take(2) {
        assert!(
            run.stdout.contains(line),
            "the README shows {line:?}; planc prints:\n{}",
            run.stdout
        );
    }
    for head in ["plan ", "model ", "memory ", "time ", "speed "] {
        assert!(shown.contains(head) && run.stdout.contains(head), "{head}");
    }
}

#[test]
fn the_readme_then_try_list_does_what_it_says() {
    let readme = readme();
    let plan = fenced_block_after(&readme, FIRST, "tp");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // 1. Without `zero = 1` the optimizer state does not fit, and the help says so.
    let zero_line = plan
        .lines()
        .find(|l| l.trim_start().starts_with("zero = 1"))
        .expect("the first plan has a `zero = 1` line");
    std::fs::write(
        d.join("first.tp"),
        plan.replace(&format!("{zero_line}\n"), ""),
    )
    .unwrap();
    let run = readme_command(&readme, d, "planc check first.tp");
    assert_eq!(run.code, 1, "{}", run.transcript());
    for said in [
        "error[P0401]: stage 0 needs",
        "but H100_SXM_80GB has 79.60 GiB",
        "optimizer state dominates: set `zero = 1` to shard it over data-parallel ranks",
    ] {
        assert!(readme.contains(said), "the README quotes {said:?}");
        assert!(run.stderr.contains(said), "{said:?} in\n{}", run.stderr);
    }
    let explain = readme_command(&readme, d, "planc explain P0401");
    assert_eq!(explain.code, 0, "{}", explain.transcript());

    // 2. `tp = auto` is filled by the solver and said so; `solve` ranks the layouts.
    std::fs::write(d.join("first.tp"), plan.replace("tp = 2", "tp = auto")).unwrap();
    let run = readme_command(&readme, d, "planc check first.tp");
    assert_eq!(run.code, 0, "{}", run.transcript());
    let said = "note[P0502]: holes filled by planc solve: tp = 2, dp = 4";
    assert!(readme.contains(said));
    assert!(
        run.stderr.contains(said),
        "README.md quotes `{said}` for `tp = auto` in its first plan; planc now says:\n{}\n\
         (if the cost model's best layout changed, change the README's quote)",
        run.stderr
    );
    let solve = readme_command(&readme, d, "planc solve first.tp");
    assert_eq!(solve.code, 0, "{}", solve.transcript());
    assert!(solve.stdout.contains("Pareto front"), "{}", solve.stdout);

    // 3. and 4. The timeline and the launch script land where the README says.
    std::fs::write(d.join("first.tp"), &plan).unwrap();
    let run = readme_command(&readme, d, "planc simulate first.tp --svg first.svg");
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(d.join("first.svg").is_file());
    let run = readme_command(&readme, d, "planc emit first.tp --target torchrun");
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(readme.contains("`planc-out/torchrun/launch-torchrun.sh`"));
    assert!(d.join("planc-out/torchrun/launch-torchrun.sh").is_file());

    // 5. The example it runs next exists.
    assert!(readme.contains("planc run examples/gpt2-124m-1gpu.tp --steps 50"));
    assert!(common::root().join("examples/gpt2-124m-1gpu.tp").is_file());
}

// ---------------------------------------------------------------------------------------
// The language reference lists every attribute the parser accepts.

/// The text of `### `KIND`...` in docs/language.md, up to the next heading of level 2 or 3.
fn block_section<'a>(text: &'a str, kind: &str) -> Option<&'a str> {
    let heads = [format!("### `{kind}`"), format!("### `{kind} ")];
    let start = text
        .match_indices("\n### ")
        .map(|(i, _)| i + 1)
        .find(|&i| heads.iter().any(|h| text[i..].starts_with(h.as_str())))?;
    let body = &text[start..];
    let first_line = body.find('\n').unwrap_or(body.len());
    let end = body[first_line..]
        .match_indices("\n## ")
        .chain(body[first_line..].match_indices("\n### "))
        .map(|(i, _)| first_line + i)
        .min()
        .unwrap_or(body.len());
    Some(&body[..end])
}

/// The attribute names of a section's table rows (`| `name` | default | meaning |`).
fn table_attributes(section: &str) -> Vec<&str> {
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn the_language_reference_lists_every_attribute_the_parser_accepts() {
    use planc_compiler::{attr_docs, schema::SCHEMAS};
    let path = "docs/language.md";
    let text = std::fs::read_to_string(common::root().join(path)).unwrap();
    let mut missing = Vec::new();
    for s in SCHEMAS.iter().filter(|s| !s.attrs.is_empty()) {
        let Some(section) = block_section(&text, s.kind) else {
            missing.push(format!(
                "the `{k}` block has no section: add a heading \"### `{k}`\" under \"## Blocks\" \
                 with a table `| attribute | default | meaning |` of its attributes",
                k = s.kind
            ));
            continue;
        };
        let listed = table_attributes(section);
        for a in s.attrs.iter().filter(|a| !listed.contains(a)) {
            missing.push(format!(
                "`{k}.{a}`: add the row \"| `{a}` | <default> | <meaning> |\" to the table under \
                 \"### `{k}`\" ({path}); mark planc's own attributes *ext.* and say why under \
                 \"## Extensions and why\". attr_docs.rs says: {doc}",
                k = s.kind,
                doc = attr_docs::doc(s.kind, a).unwrap_or("(nothing yet: add a line there too)")
            ));
        }
        // And nothing listed that the parser would refuse (a renamed or removed attribute).
        for a in listed.iter().filter(|a| !s.attrs.contains(a)) {
            missing.push(format!(
                "{path} lists `{}.{a}`, which compiler/src/schema.rs does not accept: remove or rename the row",
                s.kind
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "{path} is the language reference; it must list every attribute compiler/src/schema.rs \
         accepts, with its default and meaning:\n- {}",
        missing.join("\n- ")
    );
    // The file-level syntax a newcomer needs beside the blocks.
    for said in ["## Files and imports", "import \"", "## Holes", "`auto`"] {
        assert!(text.contains(said), "{path} explains {said}");
    }
}

/// The catalog's table in the language reference names every built-in GPU, with the
/// memory it reports and its 16-bit peak as the catalog has them.
#[test]
fn the_language_reference_lists_every_built_in_gpu_as_the_catalog_has_it() {
    use planc_compiler::{catalog::Catalog, plan::Precision};
    let text = std::fs::read_to_string(common::root().join("docs/language.md")).unwrap();
    let start = text
        .find("### Built-in GPUs")
        .expect("docs/language.md has \"### Built-in GPUs\"");
    let section = &text[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
    let rows: Vec<Vec<&str>> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| name"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let catalog = Catalog::builtin();
    for (_, g) in &catalog.gpus {
        let row = rows.iter().find(|r| r[0] == g.name).unwrap_or_else(|| {
            panic!("docs/language.md's catalog table has no row for {}", g.name)
        });
        let gib: f64 = row[3].parse().unwrap();
        assert!(
            (gib - g.memory / 1024f64.powi(3)).abs() < 0.01,
            "{}: {gib} GiB",
            g.name
        );
        let peak: f64 = row[4].split_whitespace().next().unwrap().parse().unwrap();
        let catalog_peak = g.peak(Precision::Bf16).or(g.peak(Precision::Fp16)).unwrap() / 1e12;
        assert!(
            (peak - catalog_peak).abs() < 0.05,
            "{}: {peak} TFLOPS",
            g.name
        );
    }
    assert_eq!(
        rows.len(),
        catalog.gpus.len(),
        "a row for a GPU the catalog lacks"
    );
}

// ---------------------------------------------------------------------------------------
// Every pointer resolves: the files, links, commands and flags that the docs, `--help` and
// `planc explain` name exist.

/// The folders at the repository's top level that a pointer may start with.
const TOP: &[&str] = &[
    "examples/",
    "tests/",
    "compiler/",
    "runtime/",
    "lang/",
    "simulator/",
    "targets/",
    "src/",
    "docs/",
    "benches/",
    "python/",
    ".ci/",
];

/// The markdown files a newcomer reads.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    let mut dirs = vec!["docs".to_string()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(common::root().join(&d))
            .unwrap()
            .flatten()
        {
            let rel = format!("{d}/{}", e.file_name().to_string_lossy());
            if e.path().is_dir() {
                dirs.push(rel);
            } else if rel.ends_with(".md") {
                files.push(rel);
            }
        }
    }
    files.sort();
    files
}

/// Whether a repository path exists; a `*` in its last part matches any text.
fn exists(path: &str) -> bool {
    let root = common::root();
    let path = path.trim_end_matches('/');
    let Some(star) = path.find('*') else {
        return root.join(path).exists();
    };
    let (dir, pattern) = path.rsplit_once('/').unwrap_or(("", path));
    if dir.contains('*') {
        return false;
    }
    let (pre, post) = pattern.split_at(star - (path.len() - pattern.len()));
    let post = &post[1..];
    std::fs::read_dir(root.join(dir)).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(pre) && n.ends_with(post) && n.len() >= pre.len() + post.len()
        })
    })
}

/// Repository paths named in free text (help texts, explanations, code spans): words that
/// start with a top-level folder.
fn paths_in(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`\"'(),;<>[]".contains(c))
        .map(|w| w.trim_end_matches(['.', ':']))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .filter(|w| !w.contains("NNN") && !w.contains('{'))
        .map(str::to_string)
        .collect()
}

/// Inline code spans (`a`, `` a `b` c ``) of one paragraph.
fn code_spans(paragraph: &str, out: &mut Vec<String>) {
    let mut rest = paragraph;
    while let Some(i) = rest.find('`') {
        let ticks = rest[i..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[i..i + ticks];
        let after = &rest[i + ticks..];
        let Some(j) = after.find(fence) else { break };
        out.push(after[..j].split_whitespace().collect::<Vec<_>>().join(" "));
        rest = &after[j + ticks..];
    }
}

/// Inline code spans (a span may continue on the paragraph's next line) and code lines
/// (fenced, or indented after a blank line) of a markdown text.
fn code_of(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut paragraph = String::new();
    for line in md.lines() {
        let code_line = line.trim_start().starts_with("```")
            || fenced
            || (line.starts_with("    ") && paragraph.is_empty());
        if code_line || line.trim().is_empty() {
            code_spans(&paragraph, &mut out);
            paragraph.clear();
        }
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if code_line {
            out.push(line.trim().trim_start_matches("$ ").to_string());
        } else if !line.trim().is_empty() {
            paragraph.push_str(line);
            paragraph.push('\n');
        }
    }
    code_spans(&paragraph, &mut out);
    out
}

/// `planc COMMAND --flags...` invocations in a piece of code or text.
fn invocations(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let words: Vec<&str> = code.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        let w = w.trim_start_matches(['`', '(', '"']);
        if w != "planc" {
            continue;
        }
        let Some(cmd) = words.get(i + 1) else {
            continue;
        };
        let cmd: String = cmd.chars().take_while(|c| c.is_ascii_lowercase()).collect();
        if cmd.is_empty() {
            continue;
        }
        let flags = words[i + 2..]
            .iter()
            .take_while(|w| **w != "planc" && !w.starts_with('#') && **w != "|" && **w != "&&")
            .map(|w| w.trim_matches(|c: char| "[]()`\"',;.".contains(c)))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.split(['=', '[', '|']).next().unwrap().to_string())
            .collect();
        out.push((cmd, flags));
    }
    out
}

/// The subcommands `planc --help` lists.
fn commands() -> Vec<String> {
    let help = common::planc(&["--help"]);
    assert_eq!(help.code, 0);
    let list = help
        .stdout
        .split("Commands:\n")
        .nth(1)
        .expect("a command list");
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The code of a plain text (a help text, an explanation): its `code spans` and its
/// indented lines that run planc (a help text's examples).
fn code_of_plain(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    out.extend(
        text.lines()
            .filter(|l| l.starts_with(' '))
            .map(str::trim)
            .filter(|l| l.starts_with("planc "))
            .map(str::to_string),
    );
    out
}

/// Checks the pointers of one text (from `origin`): the repository paths in `paths_from`,
/// and the commands and flags in `code`. Returns what does not resolve.
fn broken_pointers(
    origin: &str,
    paths_from: &[String],
    code: &[String],
    commands: &[String],
    helps: &std::collections::HashMap<String, String>,
) -> Vec<String> {
    let mut broken = Vec::new();
    for p in paths_from.iter().flat_map(|t| paths_in(t)) {
        if !exists(&p) {
            broken.push(format!("{origin}: `{p}` does not exist"));
        }
    }
    for c in code {
        for (cmd, flags) in invocations(c) {
            let Some(help) = helps.get(&cmd) else {
                if !commands.contains(&cmd) {
                    broken.push(format!(
                        "{origin}: `planc {cmd}` is not a command `planc --help` lists ({})",
                        commands.join(", ")
                    ));
                }
                continue;
            };
            for f in flags.iter().filter(|f| !help.contains(f.as_str())) {
                broken.push(format!(
                    "{origin}: `planc {cmd} {f}`: `planc {cmd} --help` has no {f}"
                ));
            }
        }
    }
    broken
}

fn helps(commands: &[String]) -> std::collections::HashMap<String, String> {
    commands
        .iter()
        .filter(|c| *c != "help")
        .map(|c| {
            let run = common::planc(&[c, "--help"]);
            assert_eq!(run.code, 0, "planc {c} --help");
            (c.clone(), run.stdout)
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_file_and_command_the_docs_name_exists() {
    let commands = commands();
    let helps = helps(&commands);
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(common::root().join(&file)).unwrap();
        let code = code_of(&text);
        broken.extend(broken_pointers(&file, &code, &code, &commands, &helps));
        // Markdown links: a file beside this one (and the heading it names).
        let dir = Path::new(&file).parent().unwrap();
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let Some(end) = target.find(')') else {
                continue;
            };
            let target = &target[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                common::root().join(&file)
            } else {
                common::root().join(dir).join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{file}: link ({target}) to a missing file"));
                continue;
            }
            if !anchor.is_empty() {
                let linked = std::fs::read_to_string(&resolved).unwrap_or_default();
                let found = linked
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .any(|l| slug(l.trim_start_matches('#')) == anchor);
                if !found {
                    broken.push(format!("{file}: link ({target}): no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken pointers:\n{}", broken.join("\n"));
}

#[test]
fn every_file_and_command_help_and_explain_name_exists() {
    let commands = commands();
    let helps = helps(&commands);
    let mut broken = Vec::new();
    for (cmd, help) in &helps {
        let origin = format!("planc {cmd} --help");
        let code = code_of_plain(help);
        broken.extend(broken_pointers(
            &origin,
            std::slice::from_ref(help),
            &code,
            &commands,
            &helps,
        ));
    }
    let top = common::planc(&["--help"]).stdout;
    let code = code_of_plain(&top);
    broken.extend(broken_pointers(
        "planc --help",
        std::slice::from_ref(&top),
        &code,
        &commands,
        &helps,
    ));

    let list = common::planc(&["explain"]);
    assert_eq!(list.code, 0);
    let codes: Vec<&str> = list
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| c.starts_with('P'))
        .collect();
    assert!(codes.len() > 50, "{}", list.stdout);
    for code in codes {
        let run = common::planc(&["explain", code]);
        assert_eq!(run.code, 0, "planc explain {code}");
        let origin = format!("planc explain {code}");
        let code = code_of_plain(&run.stdout);
        broken.extend(broken_pointers(
            &origin,
            std::slice::from_ref(&run.stdout),
            &code,
            &commands,
            &helps,
        ));
    }
    assert!(broken.is_empty(), "broken pointers:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_commands_table_is_planc_help() {
    let readme = readme();
    let rows: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `planc "))
        .filter_map(|l| l.split([' ', '`']).next())
        .map(str::to_string)
        .collect();
    let mut listed: Vec<String> = commands().into_iter().filter(|c| c != "help").collect();
    let mut rows_sorted = rows.clone();
    listed.sort();
    rows_sorted.sort();
    assert_eq!(
        rows_sorted, listed,
        "README.md's commands table has a row per command of `planc --help`"
    );
    // Each row names every option its command's --help lists (colours aside), and emit's
    // row every target.
    let mut missing = Vec::new();
    for cmd in &listed {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `planc {cmd}")))
            .unwrap();
        let help = common::planc(&[cmd, "--help"]).stdout;
        for line in help.lines().map(str::trim_start) {
            // `-o, --out <DIR>`: the row may use either spelling.
            let (short, line) = match line.split_once(", ") {
                Some((short, long)) if short.starts_with('-') && !short.starts_with("--") => {
                    (Some(format!("{short} ")), long)
                }
                _ => (None, line),
            };
            let Some(flag) = line.strip_prefix("--") else {
                continue;
            };
            let flag: String = flag
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if ["help", "version", "color"].contains(&flag.as_str()) {
                continue;
            }
            let short_named = short.as_ref().is_some_and(|s| row.contains(s.as_str()));
            if !row.contains(&format!("--{flag}")) && !short_named {
                missing.push(format!("`planc {cmd} --{flag}`"));
            }
        }
    }
    let emit = common::planc(&["emit", "--help"]).stdout;
    let targets = emit
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("-t, --target"))
        .nth(1)
        .unwrap_or_default();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `planc emit"))
        .unwrap();
    for t in targets
        .trim()
        .split([',', ' '])
        .filter(|w| !w.is_empty() && *w != "or")
    {
        if !row.contains(&format!("`{t}`")) {
            missing.push(format!("the target `{t}` in `planc emit`'s row"));
        }
    }
    assert!(
        missing.is_empty(),
        "README.md's commands table does not name: {} (add them to the command's row)",
        missing.join(", ")
    );
}

#[test]
fn nothing_points_at_the_specification_outside_the_repository() {
    // The contracts live in docs/spec/ since they were copied in; the shared folder outside
    // the repository is not in a checkout (docs/spec/'s headers say where they came from).
    let old = ["shared", "spec/"].join("/");
    let mut found = Vec::new();
    let mut dirs = vec![common::root()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "spec" {
                    dirs.push(path);
                }
                continue;
            }
            let kinds = [".rs", ".md", ".j2", ".sh", ".py", ".toml", ".tp", ".snap"];
            if !kinds.iter().any(|k| name.ends_with(k)) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                if line.contains(&old) {
                    let rel = path
                        .strip_prefix(common::root())
                        .unwrap()
                        .display()
                        .to_string();
                    found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "point at docs/spec/ (the repository's copy) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_emitting_guide_has_a_row_for_every_target() {
    let help = common::planc(&["emit", "--help"]).stdout;
    let line = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("-t, --target"))
        .nth(1)
        .expect("emit --help describes --target");
    let targets: Vec<&str> = line
        .trim()
        .split([',', ' '])
        .filter(|w| !w.is_empty() && *w != "or")
        .collect();
    assert!(targets.contains(&"slurm"), "{line}");
    let path = "docs/guide/emitting.md";
    let guide = std::fs::read_to_string(common::root().join(path)).unwrap();
    for t in targets {
        assert!(
            guide.contains(&format!("\n| `{t}` |")),
            "`planc emit --target {t}` has no row in the table of {path}: add \
             \"| `{t}` | <files> | <what is in them> |\""
        );
    }
}

#[test]
fn every_example_has_a_row_in_the_guide() {
    let path = "docs/guide/writing-plans.md";
    let guide = std::fs::read_to_string(common::root().join(path)).unwrap();
    let table = guide
        .split("\n## Examples\n")
        .nth(1)
        .expect("the guide has an Examples section");
    let table = table.split("\n## ").next().unwrap();
    for example in common::plans_in("examples") {
        assert!(
            table.contains(&format!("`{example}`")),
            "{example} has no row in the examples table of {path}: add \
             \"| `{example}` | <what it shows> |\""
        );
    }
}

/// Every `$ planc check FILE` sample in the README and the guide's report page prints what
/// planc prints for that file now: each line shown (the `...` elisions aside) is a line of
/// the real report, so a change to the cost model cannot leave a stale figure on the page
/// a newcomer reads first.
#[test]
fn the_printed_report_samples_are_what_planc_prints() {
    let mut samples = 0;
    for page in ["README.md", "docs/guide/reading-the-report.md"] {
        let text = std::fs::read_to_string(common::root().join(page)).expect(page);
        for block in text.split("```").skip(1).step_by(2) {
            let Some(rest) = block
                .trim_start_matches('\n')
                .strip_prefix("$ planc check ")
            else {
                continue;
            };
            let (file, shown) = rest.split_once('\n').expect("a sample has output");
            let run = common::planc(&["check", file.trim(), "--color", "never"]);
            assert_eq!(run.code, 0, "{page}: {}", run.transcript());
            let printed: Vec<&str> = run.stdout.lines().map(str::trim_end).collect();
            for line in shown.lines().map(str::trim_end) {
                if line.is_empty() || line.trim() == "..." {
                    continue;
                }
                assert!(
                    printed.contains(&line),
                    "{page}'s sample of `planc check {file}` shows a line planc no longer \
                     prints:\n{line}\n--- planc prints\n{}",
                    run.stdout
                );
            }
            samples += 1;
        }
    }
    assert!(samples >= 2, "the README and the guide each show a report");
}
