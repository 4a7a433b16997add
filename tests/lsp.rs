//! `planc lsp` driven over stdio by a small JSON-RPC client, the way an editor drives it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
    /// Notifications received while waiting for a response.
    notifications: Vec<Value>,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_planc"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = Client {
            child,
            stdin,
            stdout,
            next_id: 0,
            notifications: Vec::new(),
        };
        let init = c.request(
            "initialize",
            json!({ "processId": null, "rootUri": null, "capabilities": {} }),
        );
        let caps = &init["capabilities"];
        assert_eq!(caps["hoverProvider"], true, "{init}");
        assert_eq!(caps["documentFormattingProvider"], true, "{init}");
        assert!(caps["completionProvider"].is_object(), "{init}");
        assert_eq!(caps["codeActionProvider"], true, "{init}");
        c.notify("initialized", json!({}));
        c
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn receive(&mut self) -> Value {
        let mut length = 0;
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed"
            );
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(n) = line.strip_prefix("Content-Length: ") {
                length = n.parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.stdout.read_exact(&mut body).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let m = self.receive();
            if m["id"] == id {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
            self.notifications.push(m);
        }
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// The next diagnostics published for `uri`.
    fn diagnostics_for(&mut self, uri: &str) -> Vec<Value> {
        loop {
            let pos = self.notifications.iter().position(|n| {
                n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri
            });
            if let Some(i) = pos {
                let n = self.notifications.remove(i);
                return n["params"]["diagnostics"].as_array().unwrap().clone();
            }
            let m = self.receive();
            self.notifications.push(m);
        }
    }

    /// The diagnostics for `uri` as of now: a request makes the server finish what it was
    /// sent before, then the newest publication wins.
    fn latest_diagnostics_for(&mut self, uri: &str) -> Vec<Value> {
        self.request("textDocument/hover", at(uri, 0, 0));
        let latest = self
            .notifications
            .iter()
            .rposition(|n| {
                n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri
            })
            .expect("diagnostics were published");
        let n = self.notifications.remove(latest);
        n["params"]["diagnostics"].as_array().unwrap().clone()
    }

    fn shutdown(mut self) {
        self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

const PLAN: &str = "cluster c {
    nodes = 1
    gpus_per_node = 8
    gpu = H100_SXM_80GB
}
model m { layers = 8, hidden = 1024, heads = 16, vocab = 32000, seq_len = 2048 }
train { global_batch = 64, precision = bf16, optimizer = adamw }
parallel {
    tp = 2
    dp = auto
    micro_batch = 1
}
";

fn open(c: &mut Client, uri: &str, text: &str) {
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "planc", "version": 1, "text": text } }),
    );
}

fn change(c: &mut Client, uri: &str, version: i32, text: &str) {
    c.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [{ "text": text }] }),
    );
}

fn at(uri: &str, line: u32, character: u32) -> Value {
    json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } })
}

#[test]
fn diagnostics_follow_the_edits() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let broken = PLAN.replace("micro_batch = 1", "micro_bach = 1");
    open(&mut c, &u, &broken);
    let ds = c.diagnostics_for(&u);
    let unknown = ds
        .iter()
        .find(|d| d["code"] == "P0204")
        .unwrap_or_else(|| panic!("no P0204 in {ds:#?}"));
    assert_eq!(unknown["severity"], 1);
    assert_eq!(
        unknown["range"]["start"],
        json!({ "line": 10, "character": 4 })
    );
    assert!(unknown["message"].as_str().unwrap().contains("micro_batch"));

    change(&mut c, &u, 2, PLAN);
    let ds = c.diagnostics_for(&u);
    assert!(
        ds.iter().all(|d| d["severity"] != 1),
        "errors remain: {ds:#?}"
    );
    c.shutdown();
}

#[test]
fn an_error_in_an_import_is_shown_in_the_imported_file() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("cluster.tp");
    std::fs::write(
        &shared,
        "cluster c { nodes = 1, gpus_per_node = 8, gpu = H101 }\n",
    )
    .unwrap();
    let main = dir.path().join("plan.tp");
    let text = format!(
        "import \"cluster.tp\"\n{}",
        PLAN.split_once("}\n").unwrap().1
    );
    let mut c = Client::start();
    open(&mut c, &uri(&main), &text);
    let ds = c.diagnostics_for(&uri(&shared));
    assert!(
        ds.iter()
            .any(|d| d["message"].as_str().unwrap().contains("H101")),
        "{ds:#?}"
    );
    c.shutdown();
}

#[test]
fn hover_explains_codes_and_shows_the_checked_plan() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    open(&mut c, &u, PLAN);
    c.diagnostics_for(&u);

    // `dp` on line 9: what `auto` became.
    let h = c.request("textDocument/hover", at(&u, 9, 5));
    let text = h["contents"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("in the checked plan: `dp = 4`"), "{text}");
    assert!(text.contains("data-parallel replicas"), "{text}");
    // On `auto` itself: the note that says so, explained.
    let h = c.request("textDocument/hover", at(&u, 9, 10));
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.starts_with("**P0501**"), "{text}");
    // The `parallel` header: the prediction.
    let h = c.request("textDocument/hover", at(&u, 7, 2));
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("step") && text.contains("MFU"), "{text}");
    c.shutdown();
}

#[test]
fn completion_offers_what_the_block_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let text = PLAN.replace("    micro_batch = 1\n", "    micro_batch = 1\n    sch\n");
    open(&mut c, &u, &text);
    let items = c.request("textDocument/completion", at(&u, 11, 7));
    let labels: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap())
        .collect();
    assert!(labels.contains(&"schedule"), "{labels:?}");
    assert!(!labels.contains(&"tp"), "tp is already written: {labels:?}");
    assert!(
        !labels.contains(&"nodes"),
        "a cluster attribute: {labels:?}"
    );

    let items = c.request("textDocument/completion", at(&u, 3, 10));
    let labels: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap())
        .collect();
    assert!(labels.contains(&"H100_SXM_80GB"), "{labels:?}");
    c.shutdown();
}

#[test]
fn a_gpu_blocks_preset_completes_to_built_in_gpus_and_hovers_with_their_figures() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let text = format!(
        "gpu mine {{\n    preset = H\n}}\n{}",
        PLAN.replace("gpu = H100_SXM_80GB", "gpu = mine")
    );
    open(&mut c, &u, &text);
    // `preset = H|` in a `gpu` block: GPUs, not model presets.
    let items = c.request("textDocument/completion", at(&u, 1, 14));
    let labels: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap())
        .collect();
    assert!(labels.contains(&"H800_SXM_80GB"), "{labels:?}");
    assert!(!labels.contains(&"llama3-70b"), "{labels:?}");

    // Hover on a preset that names one: the figures the block inherits.
    change(
        &mut c,
        &u,
        2,
        &text.replace("preset = H\n", "preset = H800_SXM_80GB\n"),
    );
    c.diagnostics_for(&u);
    let h = c.request("textDocument/hover", at(&u, 1, 6));
    let shown = h["contents"]["value"].as_str().unwrap_or_default();
    assert!(shown.contains("every attribute not written"), "{shown}");
    assert!(
        shown.contains("`H800_SXM_80GB`: 79.6 GiB") && shown.contains("200 GB/s NVLink"),
        "{shown}"
    );
    c.shutdown();
}

#[test]
fn a_misspelt_name_offers_its_fix_and_other_diagnostics_none() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let broken = PLAN
        .replace("micro_batch = 1", "micro_bach = 1")
        .replace("precision = bf16", "precision = bfloat16");
    open(&mut c, &u, &broken);
    let ds = c.diagnostics_for(&u);
    let actions = c.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": u },
            "range": { "start": { "line": 0, "character": 0 }, "end": { "line": 12, "character": 0 } },
            "context": { "diagnostics": ds },
        }),
    );
    let mut titles: Vec<&str> = actions
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    titles.sort();
    assert_eq!(
        titles,
        ["Replace with `bf16`", "Replace with `micro_batch`"],
        "{actions:#}"
    );
    let fix = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "Replace with `micro_batch`")
        .unwrap();
    assert_eq!(fix["kind"], "quickfix");
    let edit = &fix["edit"]["changes"][&u][0];
    assert_eq!(edit["newText"], "micro_batch");
    assert_eq!(
        edit["range"],
        json!({ "start": { "line": 10, "character": 4 }, "end": { "line": 10, "character": 14 } })
    );
    // A diagnostic without a replacement (none here but these two) offers nothing.
    let none = c.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": u },
            "range": { "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } },
            "context": { "diagnostics": [{ "range": edit["range"], "message": "x" }] },
        }),
    );
    assert_eq!(none, json!([]));
    c.shutdown();
}

#[test]
fn the_outline_lists_blocks_and_attributes_and_inlay_hints_show_what_auto_became() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    open(&mut c, &u, PLAN);
    let _ = c.diagnostics_for(&u);
    let symbols = c.request(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": u } }),
    );
    let names: Vec<&str> = symbols
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["cluster c", "model m", "train", "parallel"],
        "{symbols:#}"
    );
    let parallel = &symbols[3];
    assert_eq!(
        parallel["selectionRange"]["start"],
        json!({ "line": 7, "character": 0 })
    );
    let fields: Vec<(&str, &str)> = parallel["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["detail"].as_str().unwrap()))
        .collect();
    assert_eq!(fields, [("tp", "2"), ("dp", "auto"), ("micro_batch", "1")]);

    // `dp = auto` on 8 GPUs at tp 2: the hint says 4, after the value; nothing beside the
    // values written as they are.
    let hints = c.request(
        "textDocument/inlayHint",
        json!({
            "textDocument": { "uri": u },
            "range": { "start": { "line": 0, "character": 0 }, "end": { "line": 12, "character": 0 } },
        }),
    );
    assert_eq!(hints.as_array().unwrap().len(), 1, "{hints:#}");
    assert_eq!(hints[0]["label"], "= 4");
    assert_eq!(hints[0]["position"], json!({ "line": 9, "character": 13 }));

    // A code action writes it in: on dp's line, `Write `dp = 4``, replacing `auto`.
    let actions = c.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": u },
            "range": { "start": { "line": 9, "character": 4 }, "end": { "line": 9, "character": 4 } },
            "context": { "diagnostics": [] },
        }),
    );
    let pin = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "Write `dp = 4` (what the check decided)")
        .unwrap_or_else(|| panic!("{actions:#}"));
    assert_eq!(pin["kind"], "refactor.rewrite");
    let edit = &pin["edit"]["changes"][&u][0];
    assert_eq!(edit["newText"], "4");
    assert_eq!(
        edit["range"],
        json!({ "start": { "line": 9, "character": 9 }, "end": { "line": 9, "character": 13 } })
    );
    // Elsewhere in the file, no such action.
    let actions = c.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": u },
            "range": { "start": { "line": 1, "character": 0 }, "end": { "line": 1, "character": 0 } },
            "context": { "diagnostics": [] },
        }),
    );
    assert_eq!(actions, json!([]), "{actions:#}");

    // A broken file still has an outline, of what parses.
    change(&mut c, &u, 2, "cluster c { nodes = 1\nmodel m { layers = ");
    let symbols = c.request(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": u } }),
    );
    assert_eq!(symbols[0]["name"], "cluster c", "{symbols:#}");
    c.shutdown();
}

#[test]
fn formatting_is_planc_fmt() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    open(&mut c, &u, "train{global_batch=8}\n");
    let edits = c.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": u }, "options": { "tabSize": 4, "insertSpaces": true } }),
    );
    assert_eq!(edits[0]["newText"], "train { global_batch = 8 }\n");
    // A broken file gets no edits rather than a mangled text.
    change(&mut c, &u, 2, "train { global_batch = }\n");
    let edits = c.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": u }, "options": { "tabSize": 4, "insertSpaces": true } }),
    );
    assert!(edits.is_null(), "{edits}");
    c.shutdown();
}

#[test]
fn definition_follows_imports_and_references() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("model.tp");
    std::fs::write(
        &shared,
        "model m {\n    layers = 8\n    hidden = 1024\n    ffn_hidden = 4 * hidden\n    heads = 16, vocab = 32000, seq_len = 2048\n}\n",
    )
    .unwrap();
    let main = dir.path().join("plan.tp");
    let text = "import \"model.tp\"\n\
                cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }\n\
                train { global_batch = 64, precision = bf16, optimizer = adamw }\n\
                parallel { tp = 2, dp = auto, micro_batch = model.layers / 8 }\n";
    let (u, su) = (uri(&main), uri(&shared));
    let mut c = Client::start();
    open(&mut c, &u, text);
    c.diagnostics_for(&u);

    // On the import's path: the imported file.
    let d = c.request("textDocument/definition", at(&u, 0, 10));
    assert_eq!(d["uri"], su, "{d}");
    // On `model.layers` in plan.tp: the attribute in model.tp.
    let col = text.lines().nth(3).unwrap().find("model.layers").unwrap() as u32 + 7;
    let d = c.request("textDocument/definition", at(&u, 3, col));
    assert_eq!(d["uri"], su, "{d}");
    assert_eq!(
        d["range"]["start"],
        json!({ "line": 1, "character": 4 }),
        "{d}"
    );

    // Inside model.tp: `hidden` in `4 * hidden` is the attribute two lines up.
    open(&mut c, &su, &std::fs::read_to_string(&shared).unwrap());
    // Checked as part of the plan that imports it, not alone (alone it has no cluster).
    let ds = c.latest_diagnostics_for(&su);
    assert!(ds.iter().all(|d| d["code"] != "P0203"), "{ds:#?}");
    let d = c.request("textDocument/definition", at(&su, 3, 22));
    assert_eq!(
        d["range"]["start"],
        json!({ "line": 2, "character": 4 }),
        "{d}"
    );
    // On a plain number: nowhere.
    let d = c.request("textDocument/definition", at(&su, 1, 14));
    assert!(d.is_null(), "{d}");
    c.shutdown();
}

#[test]
fn completion_after_a_comma_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let text = PLAN.replace(
        "parallel {\n    tp = 2\n    dp = auto\n    micro_batch = 1\n}",
        "parallel { tp = 8,  }",
    );
    open(&mut c, &u, &text);
    let line = text
        .lines()
        .position(|l| l.starts_with("parallel"))
        .unwrap() as u32;
    let labels = |items: Value| -> Vec<String> {
        items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["label"].as_str().unwrap().to_string())
            .collect()
    };
    // `parallel { tp = 8, |}`: the block's unset attributes, as on an empty line.
    let got = labels(c.request("textDocument/completion", at(&u, line, 19)));
    assert!(got.contains(&"pp".to_string()), "{got:?}");
    assert!(got.contains(&"micro_batch".to_string()), "{got:?}");
    assert!(!got.contains(&"tp".to_string()), "tp is set: {got:?}");
    // After `{` too, and a partial name after the comma.
    let text2 = text.replace("parallel { tp = 8,  }", "parallel { tp = 8, mi }");
    change(&mut c, &u, 2, &text2);
    let got = labels(c.request("textDocument/completion", at(&u, line, 21)));
    assert!(got.contains(&"micro_batch".to_string()), "{got:?}");
    // Inside a list the comma separates values, not entries: no attribute names.
    let text3 = text.replace("parallel { tp = 8,  }", "parallel { pp = [2, 4, ] }");
    change(&mut c, &u, 3, &text3);
    let got = labels(c.request("textDocument/completion", at(&u, line, 23)));
    assert!(!got.contains(&"micro_batch".to_string()), "{got:?}");
    // In a comment, nothing.
    let text4 = text.replace("parallel { tp = 8,  }", "parallel { tp = 8 } # a, b");
    change(&mut c, &u, 4, &text4);
    let got = labels(c.request("textDocument/completion", at(&u, line, 26)));
    assert!(got.is_empty(), "{got:?}");
    c.shutdown();
}

#[test]
fn hostile_documents_get_answers_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&dir.path().join("plan.tp"));
    let mut c = Client::start();
    let deep = |open: &str, close: &str, n: usize| {
        PLAN.replace(
            "micro_batch = 1",
            &format!("micro_batch = {}1{}", open.repeat(n), close.repeat(n)),
        )
    };
    let docs = [
        (deep("(", ")", 100_000), Some("P0008")),
        (deep("[", "]", 20_000), Some("P0008")),
        (deep("-", "", 100_000), Some("P0008")),
        (
            format!(
                "{PLAN}job {}{}",
                "{ env ".repeat(20_000),
                "}".repeat(20_000)
            ),
            Some("P0008"),
        ),
        (
            PLAN.replace(
                "micro_batch = 1",
                &format!("micro_batch = 1{}", " + 1 - 1".repeat(20_000)),
            ),
            None,
        ),
        (PLAN.replace("tp = 2", "tp = 2\0\0"), Some("P0001")),
        (format!("\u{feff}{}", PLAN.replace('\n', "\r\n")), None),
        (
            PLAN.replace(
                "micro_batch = 1",
                &format!("micro_batch = 1, {}", "foo = 1, ".repeat(60_000)),
            ),
            Some("P0204"),
        ),
    ];
    for (version, (text, code)) in docs.iter().enumerate() {
        if version == 0 {
            open(&mut c, &u, text);
        } else {
            change(&mut c, &u, version as i32 + 1, text);
        }
        let ds = c.latest_diagnostics_for(&u);
        match code {
            Some(code) => assert!(ds.iter().any(|d| d["code"] == *code), "{version}: {ds:#?}"),
            None => assert!(ds.iter().all(|d| d["severity"] != 1), "{version}: {ds:#?}"),
        }
        // Every feature, at the start, in the hostile part and at the end of the document.
        let line = text
            .lines()
            .position(|l| l.contains("micro_batch"))
            .unwrap_or(0) as u32;
        let last = text.lines().count() as u32;
        for (l, ch) in [(line, 20), (line, 60_000), (last + 5, 3)] {
            c.request("textDocument/hover", at(&u, l, ch));
            c.request("textDocument/completion", at(&u, l, ch));
            c.request("textDocument/definition", at(&u, l, ch));
        }
        c.request(
            "textDocument/formatting",
            json!({ "textDocument": { "uri": u }, "options": { "tabSize": 4, "insertSpaces": true } }),
        );
    }
    c.shutdown();
}

#[test]
fn an_import_that_is_not_utf8_is_a_located_error_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("cluster.tp");
    let mut bytes = b"# r".to_vec();
    bytes.push(0xe9); // `é` in Latin-1
    bytes.extend_from_slice(
        b"glages\ncluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }\n",
    );
    std::fs::write(&shared, bytes).unwrap();
    let main = dir.path().join("plan.tp");
    let text = format!(
        "import \"cluster.tp\"\n{}",
        PLAN.split_once("}\n").unwrap().1
    );
    let mut c = Client::start();
    open(&mut c, &uri(&main), &text);
    let ds = c.diagnostics_for(&uri(&shared));
    let d = ds
        .iter()
        .find(|d| d["code"] == "P0103")
        .unwrap_or_else(|| panic!("{ds:#?}"));
    assert_eq!(d["range"]["start"], json!({ "line": 0, "character": 3 }));
    assert_eq!(d["severity"], 1);
    c.shutdown();
}
