//! Merged syntax trees to a typed [`PlanSpec`].
//!
//! Owns the rules of the language above syntax: which blocks a plan has (duplicates point
//! at both places), which attributes a block accepts (unknown ones get a did-you-mean),
//! references between attributes (cycles reported), units and types, defaults and model
//! presets. Every problem becomes a diagnostic with a span; lowering goes on past errors
//! so that one run reports as much as it can.
//!
//! Evaluation recurses through brackets and references (`a = b`, `b = c`, ...); both are
//! counted together against [`planc_lang::parser::MAX_NESTING`], so that a generated chain
//! of references is a located error (P0008) rather than a stack overflow. Diagnostics are
//! capped ([`Capped`]) so that a file of a million duplicates stays a readable answer.

use std::collections::{HashMap, HashSet};

use planc_lang::codes::{self, Code};
use planc_lang::diagnostic::{Capped, MAX_DIAGNOSTICS};
use planc_lang::parser::MAX_NESTING;
use planc_lang::syntax::{Attr, BinOp, Block, Expr, ExprKind, Item};
use planc_lang::units::Dimension;
use planc_lang::{Diagnostic, FileId, Span};

use crate::catalog::{Catalog, ModelPreset};
use crate::plan::*;
use crate::schema::{self, did_you_mean, Naming};
use crate::source::SourceMap;
use crate::value::{arith, fmt_num, ArithOp, Value};

mod gpu;

/// The [`Origins`] block under which the *names* of `job.env` variables are recorded (their
/// values are under `job.env`), so that the env lint can point at a misspelt name.
pub const ENV_NAME_ORIGIN: &str = "job.env:name";

struct Node<'a> {
    /// The file of the block's first definition (its header).
    file: FileId,
    block: &'a Block,
    /// `cluster`, `cluster.inter_node`, `gpu.MI300X`: how diagnostics and origins name it.
    path: String,
    /// The file of the last definition merged into it: a later one overrides it only from
    /// a file that imports this one.
    last_file: FileId,
    /// Each attribute as it stands after overrides, with the file it was written in; a
    /// second one in the same block was reported as a duplicate.
    attrs: Vec<(FileId, &'a Attr)>,
    /// Index into `attrs` by name: a `job.env` block may hold thousands.
    by_name: HashMap<&'a str, usize>,
    children: Vec<usize>,
}

pub struct Resolver<'a> {
    map: &'a SourceMap,
    nodes: Vec<Node<'a>>,
    /// The file of the attribute being evaluated: where its expression's spans point.
    cur_file: FileId,
    top: HashMap<String, usize>,
    gpu_blocks: HashMap<String, usize>,
    memo: HashMap<(usize, String), Option<Value>>,
    in_progress: HashSet<(usize, String)>,
    preset: Option<&'static ModelPreset>,
    model_node: Option<usize>,
    /// Brackets and references being evaluated, nested.
    depth: usize,
    /// Whether P0008 was reported: one is enough, the rest of the chain is the same error.
    too_deep: bool,
    pub diagnostics: Capped,
    pub origins: Origins,
    /// `cluster.nodes` written as a list: the sizes `solve` chooses among.
    node_candidates: Vec<u64>,
}

/// Resolves the blocks of the given files (in merge order) into a plan spec. Returns
/// `None` when a required part is missing or invalid; the diagnostics say why.
pub fn resolve(map: &SourceMap, order: &[FileId]) -> (Option<PlanSpec>, Vec<Diagnostic>) {
    resolve_rooted(map, order, order.last().copied().unwrap_or_default())
}

/// [`resolve`] where the root plan is not the last file merged: command-line settings
/// (`--set`) come after it, and a missing block is reported at the root.
pub fn resolve_rooted(
    map: &SourceMap,
    order: &[FileId],
    root: FileId,
) -> (Option<PlanSpec>, Vec<Diagnostic>) {
    let mut r = Resolver {
        map,
        cur_file: FileId::default(),
        nodes: Vec::new(),
        top: HashMap::new(),
        gpu_blocks: HashMap::new(),
        memo: HashMap::new(),
        in_progress: HashSet::new(),
        preset: None,
        model_node: None,
        depth: 0,
        too_deep: false,
        node_candidates: Vec::new(),
        diagnostics: Capped::new(MAX_DIAGNOSTICS),
        origins: Origins::default(),
    };
    for &file in order {
        for item in &map.get(file).syntax.items {
            if let Item::Block(b) = item {
                r.add_top(file, b);
            }
        }
    }
    let spec = r.lower(root);
    (spec, r.diagnostics.into_vec())
}

impl<'a> Resolver<'a> {
    fn report(
        &mut self,
        code: Code,
        msg: impl Into<String>,
        file: FileId,
        span: Span,
        label: impl Into<String>,
    ) -> &mut Diagnostic {
        self.diagnostics
            .push(Diagnostic::new(code, msg).at(file, span, label))
    }

    fn add_top(&mut self, file: FileId, b: &'a Block) {
        let kind = b.kind.text.as_str();
        if !schema::TOP_LEVEL.contains(&kind) {
            let nested = schema::SCHEMAS.iter().any(|s| s.blocks.contains(&kind));
            let d = self.report(
                codes::P0201,
                format!("unknown block `{kind}`"),
                file,
                b.kind.span,
                "not a top-level block",
            );
            d.help = Some(if nested {
                let parent = schema::SCHEMAS
                    .iter()
                    .find(|s| s.blocks.contains(&kind))
                    .map(|s| s.kind)
                    .unwrap_or("?");
                format!("`{kind}` goes inside a `{parent}` block")
            } else if let Some(s) = did_you_mean(kind, schema::TOP_LEVEL.iter().copied()) {
                format!("did you mean `{s}`?")
            } else {
                format!("top-level blocks are {}", schema::TOP_LEVEL.join(", "))
            });
            return;
        }
        if kind == "gpu" {
            let Some(name) = &b.name else {
                self.report(
                    codes::P0217,
                    "a `gpu` block needs a name",
                    file,
                    b.kind.span,
                    "unnamed",
                )
                .with_help(
                    "name it, and use that name as the cluster's `gpu`: `gpu MI300X { ... }`",
                );
                return;
            };
            if let Some(&prev) = self.gpu_blocks.get(&name.text) {
                if self.overrides(file, prev) {
                    self.merge(prev, file, b);
                    return;
                }
                let (pf, ps) = (self.nodes[prev].file, self.nodes[prev].block.header_span());
                let help = self.twice_help("gpu", prev, file);
                self.report(
                    codes::P0202,
                    format!("GPU `{}` is defined twice", name.text),
                    file,
                    b.header_span(),
                    "defined again here",
                )
                .with_help(help)
                .with_also(pf, ps, "first defined here");
                return;
            }
            let id = self.add_node(file, b, format!("gpu.{}", name.text));
            self.gpu_blocks.insert(name.text.clone(), id);
            return;
        }
        if let Some(&prev) = self.top.get(kind) {
            if self.overrides(file, prev) && self.same_name(prev, b) {
                self.merge(prev, file, b);
                return;
            }
            let (pf, ps) = (self.nodes[prev].file, self.nodes[prev].block.header_span());
            let help = self.twice_help(kind, prev, file);
            self.report(
                codes::P0202,
                format!("`{kind}` block is defined twice"),
                file,
                b.header_span(),
                "defined again here",
            )
            .with_help(help)
            .with_also(pf, ps, "first defined here");
            return;
        }
        let id = self.add_node(file, b, kind.to_string());
        self.top.insert(kind.to_string(), id);
    }

    /// Registers a block and its nested blocks, checking names against the schema.
    fn add_node(&mut self, file: FileId, b: &'a Block, path: String) -> usize {
        let schema = schema::lookup(&b.kind.text).expect("caller checked the kind");
        match (schema.naming, &b.name) {
            (Naming::Required, None) => {
                self.report(
                    codes::P0217,
                    format!("a `{}` block needs a name", schema.kind),
                    file,
                    b.kind.span,
                    "unnamed",
                )
                .with_help(format!(
                    "add a name before `{{`: `{} NAME {{ ... }}`",
                    schema.kind
                ));
            }
            (Naming::Forbidden, Some(n)) => {
                self.report(
                    codes::P0217,
                    format!("a `{}` block takes no name", schema.kind),
                    file,
                    n.span,
                    "remove this name",
                );
            }
            _ => {}
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            file,
            block: b,
            path: path.clone(),
            last_file: file,
            attrs: Vec::new(),
            by_name: HashMap::new(),
            children: Vec::new(),
        });
        self.origins.insert(&path, "", file, b.header_span());
        self.add_entries(id, file, b);
        id
    }

    /// Whether a definition of a block in `file` overrides the one of node `prev`: `file`
    /// imports the file of its last definition (directly or not). Two definitions where
    /// neither file imports the other, or in one file, are duplicates.
    fn overrides(&self, file: FileId, prev: usize) -> bool {
        self.map.imports(file, self.nodes[prev].last_file)
    }

    /// An override may repeat the block's name or leave it out; another name is reported
    /// as a second definition.
    fn same_name(&self, prev: usize, b: &Block) -> bool {
        match (&b.name, &self.nodes[prev].block.name) {
            (None, _) => true,
            (Some(new), Some(old)) => new.text == old.text,
            (Some(_), None) => false,
        }
    }

    fn twice_help(&self, kind: &str, prev: usize, file: FileId) -> String {
        let first = self.nodes[prev].last_file;
        if first == file && kind == "gpu" {
            return "give each `gpu` block its own name".into();
        }
        if first == file {
            return format!("a plan has one `{kind}` block; remove one, or move shared settings into an imported file");
        }
        let (a, b) = (&self.map.get(first).display, &self.map.get(file).display);
        if self.map.imports(file, first) {
            let old = self.nodes[prev]
                .block
                .name
                .as_ref()
                .map_or(String::new(), |n| format!(" `{}`", n.text));
            return format!("an override in `{b}` repeats the block's name{old} or leaves it out");
        }
        format!(
            "`{a}` and `{b}` both define it and neither imports the other; a block written again \
             overrides the imported one only in a file that imports it"
        )
    }

    /// Merges a later definition of node `id` (from a file that imports its earlier ones)
    /// attribute by attribute: its attributes replace those of the same name, its nested
    /// blocks merge the same way, the rest stays.
    fn merge(&mut self, id: usize, file: FileId, b: &'a Block) {
        self.nodes[id].last_file = file;
        // A diagnostic about the block as a whole (a layout that does not fit) points at
        // the override, where the plan was changed.
        let path = self.nodes[id].path.clone();
        self.origins.replace(&path, "", file, b.header_span());
        self.add_entries(id, file, b);
    }

    /// Adds the attributes and nested blocks of one definition `b` (in `file`) to node
    /// `id`, checking names against the schema.
    fn add_entries(&mut self, id: usize, file: FileId, b: &'a Block) {
        let schema = schema::lookup(&b.kind.text).expect("caller checked the kind");
        let path = self.nodes[id].path.clone();
        let mut here: HashMap<&str, Span> = HashMap::new();
        for a in b.attrs() {
            if let Some(prev_span) = here.get(a.name.text.as_str()).copied() {
                self.report(
                    codes::P0205,
                    format!("`{}` is set twice in `{}`", a.name.text, path),
                    file,
                    a.name.span,
                    "set again here",
                )
                .with_help("remove one of them; planc does not let the later value silently win")
                .secondary
                .push(planc_lang::Label {
                    file,
                    span: prev_span,
                    message: "first set here".into(),
                });
                continue;
            }
            if !schema.free_attrs && !schema.attrs.contains(&a.name.text.as_str()) {
                let mut d = Diagnostic::new(
                    codes::P0204,
                    format!("unknown attribute `{}` in `{}`", a.name.text, schema.kind),
                )
                .at(file, a.name.span, "unknown attribute");
                d = match did_you_mean(&a.name.text, schema.attrs.iter().copied()) {
                    Some(s) => d.suggest(s),
                    None => d.help(format!(
                        "`{}` accepts: {}",
                        schema.kind,
                        schema.attrs.join(", ")
                    )),
                };
                self.diagnostics.push(d);
                continue;
            }
            here.insert(&a.name.text, a.name.span);
            let node = &mut self.nodes[id];
            match node.by_name.get(a.name.text.as_str()) {
                Some(&i) => node.attrs[i] = (file, a),
                None => {
                    node.by_name.insert(&a.name.text, node.attrs.len());
                    node.attrs.push((file, a));
                }
            }
        }
        let mut seen: HashMap<String, Span> = HashMap::new();
        for child in b.blocks() {
            let kind = child.kind.text.as_str();
            if !schema.blocks.contains(&kind) {
                let mut d = Diagnostic::new(
                    codes::P0201,
                    format!("unknown block `{kind}` in `{}`", schema.kind),
                )
                .at(file, child.kind.span, "not allowed here");
                d = if schema.blocks.is_empty() {
                    d.help(format!("`{}` holds no blocks", schema.kind))
                } else {
                    match did_you_mean(kind, schema.blocks.iter().copied()) {
                        Some(s) => d.suggest(s),
                        None => d.help(format!(
                            "`{}` may hold: {}",
                            schema.kind,
                            schema.blocks.join(", ")
                        )),
                    }
                };
                self.diagnostics.push(d);
                continue;
            }
            let key = match &child.name {
                Some(n) if kind == "group" => format!("group.{}", n.text),
                _ => kind.to_string(),
            };
            if let Some(prev) = seen.get(&key) {
                let prev = *prev;
                self.report(
                    codes::P0202,
                    format!("`{key}` is defined twice in `{path}`"),
                    file,
                    child.header_span(),
                    "defined again here",
                )
                .secondary
                .push(planc_lang::Label {
                    file,
                    span: prev,
                    message: "first defined here".into(),
                });
                continue;
            }
            seen.insert(key.clone(), child.header_span());
            let child_path = format!("{path}.{key}");
            let existing = self.nodes[id]
                .children
                .iter()
                .copied()
                .find(|&c| self.nodes[c].path == child_path);
            match existing {
                Some(c) => self.merge(c, file, child),
                None => {
                    let cid = self.add_node(file, child, child_path);
                    self.nodes[id].children.push(cid);
                }
            }
        }
    }

    // ----- evaluation -------------------------------------------------------------------

    fn find_attr(&self, node: usize, name: &str) -> Option<&'a Attr> {
        self.written(node, name).map(|(_, a)| a)
    }

    /// The attribute as it stands after overrides, with the file it was written in.
    fn written(&self, node: usize, name: &str) -> Option<(FileId, &'a Attr)> {
        let n = &self.nodes[node];
        n.by_name.get(name).map(|&i| n.attrs[i])
    }

    /// The file a diagnostic about attribute `name` of `node` points into: where the
    /// attribute was written (an override's file), else the block's.
    fn file_of(&self, node: usize, name: &str) -> FileId {
        self.written(node, name)
            .map_or(self.nodes[node].file, |(f, _)| f)
    }

    /// The value of an attribute as written (not its default), evaluated once.
    fn eval_attr(&mut self, node: usize, name: &str) -> Option<Value> {
        let key = (node, name.to_string());
        if let Some(v) = self.memo.get(&key) {
            return v.clone();
        }
        let (file, attr) = self.written(node, name)?;
        if !self.in_progress.insert(key.clone()) {
            self.report(
                codes::P0211,
                format!("`{name}` refers to itself through a cycle of references"),
                file,
                attr.span,
                "part of a reference cycle",
            )
            .with_help("give one of the attributes in the cycle a value");
            self.memo.insert(key, None);
            return None;
        }
        let outer = std::mem::replace(&mut self.cur_file, file);
        let v = self.eval_expr(node, &attr.value);
        self.cur_file = outer;
        self.in_progress.remove(&key);
        // A cycle found deeper already stored `None` for this key; keep it.
        self.memo.entry(key).or_insert(v).clone()
    }

    /// Evaluates `e` one level deeper, or reports P0008 where the limit is reached.
    fn eval_expr(&mut self, node: usize, e: &Expr) -> Option<Value> {
        if self.depth >= MAX_NESTING {
            if !self.too_deep {
                self.too_deep = true;
                let file = self.cur_file;
                self.report(
                    codes::P0008,
                    format!("nested too deeply (limit {MAX_NESTING})"),
                    file,
                    e.span,
                    format!("level {} of brackets and references", MAX_NESTING + 1),
                )
                .with_help(format!(
                    "planc follows at most {MAX_NESTING} levels of references (`a = b`, `b = c`, ...) \
                     and brackets; give an attribute along the chain its value directly"
                ));
            }
            return None;
        }
        self.depth += 1;
        let v = self.eval_inner(node, e);
        self.depth -= 1;
        v
    }

    fn eval_inner(&mut self, node: usize, e: &Expr) -> Option<Value> {
        let file = self.cur_file;
        Some(match &e.kind {
            ExprKind::Number(n) => Value::Number(*n),
            ExprKind::Quantity { value, unit } => {
                Value::Quantity(value * unit.to_base, unit.dimension)
            }
            ExprKind::Str(s) => Value::Str(s.clone()),
            ExprKind::Bool(b) => Value::Bool(*b),
            ExprKind::Auto => Value::Auto,
            ExprKind::Error => return None,
            ExprKind::Paren(inner) => return self.eval_expr(node, inner),
            ExprKind::Neg(inner) => {
                let v = self.eval_expr(node, inner)?;
                return self.arith(file, e.span, ArithOp::Mul, &Value::Number(-1.0), &v);
            }
            ExprKind::List(items) => {
                let mut out = Vec::new();
                for i in items {
                    out.push(self.eval_expr(node, i)?);
                }
                Value::List(out)
            }
            ExprKind::Chain { first, rest } => {
                // Only numbers and quantities take part in arithmetic, so a bare name here
                // must be a reference: report it as one rather than as bad arithmetic.
                // Left to right in a loop; an error points from the first operand to the
                // one where it happened, as `(a + b) + c` would.
                let mut acc = self.eval_operand(node, first)?;
                for (op, operand) in rest {
                    let b = self.eval_operand(node, operand)?;
                    let op = match op {
                        BinOp::Add => ArithOp::Add,
                        BinOp::Sub => ArithOp::Sub,
                        BinOp::Mul => ArithOp::Mul,
                        BinOp::Div => ArithOp::Div,
                    };
                    acc = self.arith(file, first.span.to(operand.span), op, &acc, &b)?;
                }
                acc
            }
            ExprKind::Ident(name) => {
                if self.find_attr(node, name).is_some() {
                    return self.eval_attr(node, name);
                }
                if Some(node) == self.model_node {
                    if let Some(v) = self.preset.and_then(|p| preset_value(p, name)) {
                        return Some(v);
                    }
                }
                Value::Enum(name.clone())
            }
            ExprKind::Path(parts) => return self.eval_path(parts, e.span),
        })
    }

    fn arith(
        &mut self,
        file: FileId,
        span: Span,
        op: ArithOp,
        a: &Value,
        b: &Value,
    ) -> Option<Value> {
        match arith(op, a, b) {
            Ok(v) => Some(v),
            Err(msg) => {
                self.report(codes::P0216, msg, file, span, "invalid arithmetic")
                    .with_help(
                        "sizes add to sizes and times to times; scale a quantity by a plain number",
                    );
                None
            }
        }
    }

    fn eval_path(&mut self, parts: &[planc_lang::syntax::Ident], span: Span) -> Option<Value> {
        let file = self.cur_file;
        let first = &parts[0].text;
        // By kind, or by the name of a top-level block (`cluster c`: `c.nodes`); not a scan of
        // every node, which a generated file may have by the hundred thousand.
        let start = self.top.get(first).copied().or_else(|| {
            self.top
                .values()
                .copied()
                .filter(|&i| {
                    self.nodes[i]
                        .block
                        .name
                        .as_ref()
                        .is_some_and(|nm| &nm.text == first)
                })
                .min()
        });
        let Some(mut target) = start else {
            let names: Vec<&str> = self.top.keys().map(String::as_str).collect();
            let mut d = Diagnostic::new(
                codes::P0210,
                format!("`{first}` names no block of this plan"),
            )
            .at(file, parts[0].span, "unknown block");
            if let Some(s) = did_you_mean(first, names) {
                d = d.suggest(s);
            }
            self.diagnostics.push(d);
            return None;
        };
        for seg in &parts[1..parts.len() - 1] {
            let next = self.nodes[target].children.iter().copied().find(|&c| {
                self.nodes[c].block.kind.text == seg.text
                    || self.nodes[c]
                        .block
                        .name
                        .as_ref()
                        .is_some_and(|n| n.text == seg.text)
            });
            match next {
                Some(c) => target = c,
                None => {
                    let p = self.nodes[target].path.clone();
                    self.report(
                        codes::P0210,
                        format!("`{p}` has no block `{}`", seg.text),
                        file,
                        seg.span,
                        "unknown block",
                    );
                    return None;
                }
            }
        }
        let last = parts.last().expect("a path has two parts or more");
        if self.find_attr(target, &last.text).is_some() {
            return self.eval_attr(target, &last.text);
        }
        if Some(target) == self.model_node {
            if let Some(v) = self.preset.and_then(|p| preset_value(p, &last.text)) {
                return Some(v);
            }
        }
        let p = self.nodes[target].path.clone();
        self.report(codes::P0210, format!("`{p}` does not set `{}`", last.text), file, span, "nothing to refer to")
            .with_help("a reference can only read an attribute written in the plan (or given by the model preset)");
        None
    }

    // ----- typed access -----------------------------------------------------------------

    /// The attribute's value and the span of its expression, when written and valid.
    fn get(&mut self, node: usize, name: &str) -> Option<(Value, Span)> {
        let (file, attr) = self.written(node, name)?;
        let path = self.nodes[node].path.clone();
        self.origins.insert(&path, name, file, attr.value.span);
        let v = self.eval_attr(node, name)?;
        // A list of node counts is how many nodes to rent, for `solve` to choose.
        let nodes_list = path == "cluster" && name == "nodes" && matches!(v, Value::List(_));
        if !path.starts_with("parallel") && !nodes_list && matches!(v, Value::Auto | Value::List(_))
        {
            self.report(
                codes::P0213,
                format!("`{name}` cannot be a hole"),
                file,
                attr.value.span,
                "only `parallel` attributes (and a list of `cluster.nodes`) may be holes",
            )
            .with_help("give a single value");
            return None;
        }
        Some((v, attr.value.span))
    }

    fn type_error(&mut self, node: usize, span: Span, name: &str, expected: &str, found: &Value) {
        let file = self.file_of(node, name);
        let code = match found {
            Value::Quantity(..) => codes::P0208,
            Value::Number(_) if expected.contains("e.g.") => codes::P0208,
            _ => codes::P0207,
        };
        let d = self.report(
            code,
            format!("`{name}` expects {expected}, found {}", found.describe()),
            file,
            span,
            format!("expected {expected}"),
        );
        d.help = Some(match found {
            Value::Number(n) if expected.contains("e.g.") => {
                format!("add a unit, e.g. `{} {}`", fmt_num(*n), unit_hint(expected))
            }
            Value::Quantity(_, planc_lang::units::Dimension::Bytes)
                if expected.contains("bandwidth") =>
            {
                "a bandwidth is bytes or bits per second: write `GB/s` or `Gb/s`, not a size"
                    .to_string()
            }
            Value::Str(t) if expected.contains("number") => {
                format!("write the number without quotes, not \"{t}\"")
            }
            _ => format!("write {expected}"),
        });
    }

    fn count(&mut self, node: usize, name: &str, min: u64) -> Option<u64> {
        let (v, span) = self.get(node, name)?;
        self.read_count(node, span, name, &v, min)
    }

    fn read_count(
        &mut self,
        node: usize,
        span: Span,
        name: &str,
        v: &Value,
        min: u64,
    ) -> Option<u64> {
        let max = max_count(name);
        match v {
            Value::Number(n) if n.fract() == 0.0 && *n >= min as f64 && *n <= max as f64 => {
                Some(*n as u64)
            }
            Value::Number(n) if n.fract() == 0.0 && *n > max as f64 => {
                let file = self.file_of(node, name);
                self.report(
                    codes::P0212,
                    format!("`{name}` must be at most {max}, found {}", fmt_num(*n)),
                    file,
                    span,
                    "too large",
                )
                .with_help(format!(
                    "planc models `{name}` up to {max}; a larger value is most likely a typo"
                ));
                None
            }
            Value::Number(n) => {
                let file = self.file_of(node, name);
                let what = if n.fract() != 0.0 {
                    "a whole number"
                } else {
                    "large enough"
                };
                self.report(
                    codes::P0212,
                    format!(
                        "`{name}` must be a whole number ≥ {min}, found {}",
                        fmt_num(*n)
                    ),
                    file,
                    span,
                    format!("not {what}"),
                )
                .with_help(format!("set `{name}` to a whole number of at least {min}"));
                None
            }
            other => {
                self.type_error(node, span, name, "a whole number", other);
                None
            }
        }
    }

    fn number(&mut self, node: usize, name: &str, lo: f64, hi: f64) -> Option<f64> {
        let (v, span) = self.get(node, name)?;
        match v {
            Value::Number(n) if n >= lo && n <= hi => Some(n),
            Value::Number(n) => {
                let file = self.file_of(node, name);
                self.report(
                    codes::P0212,
                    format!(
                        "`{name}` must be between {} and {}, found {}",
                        fmt_num(lo),
                        fmt_num(hi),
                        fmt_num(n)
                    ),
                    file,
                    span,
                    "out of range",
                );
                None
            }
            other => {
                self.type_error(node, span, name, "a number", &other);
                None
            }
        }
    }

    fn quantity(&mut self, node: usize, name: &str, dim: Dimension) -> Option<f64> {
        let (v, span) = self.get(node, name)?;
        match v {
            Value::Quantity(x, d) if d == dim && x > 0.0 => Some(x),
            Value::Quantity(_, d) if d == dim => {
                let file = self.file_of(node, name);
                self.report(
                    codes::P0212,
                    format!("`{name}` must be positive"),
                    file,
                    span,
                    "not positive",
                );
                None
            }
            other => {
                self.type_error(node, span, name, dim.describe(), &other);
                None
            }
        }
    }

    fn ratio(&mut self, node: usize, name: &str) -> Option<f64> {
        let (v, span) = self.get(node, name)?;
        match v {
            Value::Quantity(x, Dimension::Ratio) if (0.0..1.0).contains(&x) => Some(x),
            Value::Quantity(_, Dimension::Ratio) => {
                let file = self.file_of(node, name);
                self.report(
                    codes::P0212,
                    format!("`{name}` must be at least 0 % and below 100 %"),
                    file,
                    span,
                    "out of range",
                );
                None
            }
            other => {
                self.type_error(node, span, name, Dimension::Ratio.describe(), &other);
                None
            }
        }
    }

    fn boolean(&mut self, node: usize, name: &str) -> Option<bool> {
        let (v, span) = self.get(node, name)?;
        self.read_bool(node, span, name, &v)
    }

    fn read_bool(&mut self, node: usize, span: Span, name: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.type_error(node, span, name, "`true` or `false`", other);
                None
            }
        }
    }

    fn string(&mut self, node: usize, name: &str) -> Option<String> {
        let (v, span) = self.get(node, name)?;
        match v {
            Value::Str(s) => Some(s),
            other => {
                self.type_error(node, span, name, "a string in double quotes", &other);
                None
            }
        }
    }

    fn enumeration<T: Copy>(
        &mut self,
        node: usize,
        name: &str,
        names: &[&str],
        parse: fn(&str) -> Option<T>,
    ) -> Option<T> {
        let (v, span) = self.get(node, name)?;
        self.read_enum(node, span, name, &v, names, parse)
    }

    fn read_enum<T: Copy>(
        &mut self,
        node: usize,
        span: Span,
        name: &str,
        v: &Value,
        names: &[&str],
        parse: fn(&str) -> Option<T>,
    ) -> Option<T> {
        let text = match v {
            Value::Enum(s) | Value::Str(s) => s.clone(),
            Value::Number(n) => fmt_num(*n),
            other => {
                let expected = format!("one of {}", names.join(", "));
                self.type_error(node, span, name, &expected, other);
                return None;
            }
        };
        if let Some(x) = parse(&text) {
            return Some(x);
        }
        let file = self.file_of(node, name);
        let mut d = Diagnostic::new(codes::P0209, format!("`{text}` is not a valid `{name}`")).at(
            file,
            span,
            format!("expected one of {}", names.join(", ")),
        );
        d = match (
            crate::synonyms::planc_name(name, &text),
            did_you_mean(&text, names.iter().copied()),
        ) {
            (Some((planc, why)), _) => d
                .help(format!("write `{name} = {planc}`: {why}"))
                .fix(planc),
            (None, Some(s)) => d.suggest(s),
            (None, None) => d.help(format!("`{name}` is one of {}", names.join(", "))),
        };
        self.diagnostics.push(d);
        None
    }

    // ----- lowering ---------------------------------------------------------------------

    fn lower(&mut self, root_file: FileId) -> Option<PlanSpec> {
        let mut missing = false;
        for kind in ["cluster", "model", "train", "parallel"] {
            if !self.top.contains_key(kind) {
                self.diagnostics.push(
                    Diagnostic::new(codes::P0203, format!("the plan has no `{kind}` block"))
                        .at(root_file, Span::new(0, 0), format!("`{kind}` missing"))
                        .help(format!(
                            "add a `{kind} {{ ... }}` block, or import a file that has one"
                        )),
                );
                missing = true;
            }
        }
        // Lower every block present even when others are missing, to report all errors.
        let gpus = self.lower_gpu_blocks();
        let cluster = self
            .top
            .get("cluster")
            .copied()
            .and_then(|n| self.lower_cluster(n, &gpus));
        let model = self
            .top
            .get("model")
            .copied()
            .and_then(|n| self.lower_model(n));
        let train = self
            .top
            .get("train")
            .copied()
            .and_then(|n| self.lower_train(n, model.as_ref()));
        let parallel = self
            .top
            .get("parallel")
            .copied()
            .and_then(|n| self.lower_parallel(n));
        let job = self.top.get("job").copied().map(|n| self.lower_job(n));
        let search = match self.top.get("search").copied() {
            Some(n) => self.lower_search(n),
            None => Search::default(),
        };
        if missing {
            return None;
        }
        Some(PlanSpec {
            cluster: cluster?,
            model: model?,
            train: train?,
            parallel: parallel?,
            job: job.flatten(),
            search,
            origins: std::mem::take(&mut self.origins),
            node_candidates: std::mem::take(&mut self.node_candidates),
        })
    }

    /// Reports a missing required attribute at the block header.
    fn require<T>(
        &mut self,
        n: usize,
        name: &str,
        f: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<T> {
        if self.find_attr(n, name).is_none() {
            let (file, span, kind) = (
                self.nodes[n].file,
                self.nodes[n].block.header_span(),
                self.nodes[n].block.kind.text.clone(),
            );
            self.report(
                codes::P0206,
                format!("`{kind}` needs `{name}`"),
                file,
                span,
                format!("`{name}` missing"),
            )
            .with_help(format!("add `{name} = ...` to this block"));
            return None;
        }
        f(self)
    }

    fn child(&self, n: usize, kind: &str) -> Option<usize> {
        self.nodes[n]
            .children
            .iter()
            .copied()
            .find(|&c| self.nodes[c].block.kind.text == kind)
    }

    fn lower_link(&mut self, parent: usize, kind: &str, default: &Link) -> Link {
        let Some(c) = self.child(parent, kind) else {
            return default.clone();
        };
        let k = self
            .enumeration(c, "kind", LinkKind::NAMES, LinkKind::parse)
            .unwrap_or(default.kind);
        let bandwidth = self
            .quantity(c, "bandwidth", Dimension::Bandwidth)
            .unwrap_or(default.bandwidth);
        let latency = self
            .quantity(c, "latency", Dimension::Time)
            .unwrap_or(default.latency);
        Link {
            kind: k,
            bandwidth,
            latency,
        }
    }

    fn eval_operand(&mut self, node: usize, e: &Expr) -> Option<Value> {
        let v = self.eval_expr(node, e)?;
        let Value::Enum(name) = &v else {
            return Some(v);
        };
        let file = self.cur_file;
        let path = self.nodes[node].path.clone();
        let d = Diagnostic::new(
            codes::P0210,
            format!("`{name}` is not an attribute of `{path}`"),
        )
        .at(file, e.span, "unknown reference");
        if self.diagnostics.is_full() {
            // Dropped anyway: no did-you-mean over the block's names for each of a
            // generated file's thousands of errors.
            self.diagnostics.push(d);
            return None;
        }
        let written: Vec<String> = self.nodes[node]
            .attrs
            .iter()
            .map(|(_, a)| a.name.text.clone())
            .take(1000) // as many as `did_you_mean` reads
            .collect();
        let d = match did_you_mean(name, written.iter().map(String::as_str)) {
            // The span is the operand: the name as written.
            Some(s) => d.suggest(s),
            None => d.help("arithmetic reads numbers, quantities and attributes of the same block (or `block.attribute` paths)"),
        };
        self.diagnostics.push(d);
        None
    }

    fn lower_group(
        &mut self,
        n: usize,
        name: String,
        defined: &HashMap<String, Gpu>,
    ) -> Option<NodeGroup> {
        let nodes = self.require(n, "nodes", |r| r.nodes(n));
        let gpus_per_node = self.require(n, "gpus_per_node", |r| r.count(n, "gpus_per_node", 1));
        let gpu = self.require(n, "gpu", |r| r.lookup_gpu(n, defined));
        let gpu = gpu?;
        let intra_node = self.lower_link(n, "intra_node", &gpu.intra_node.clone());
        let group = NodeGroup {
            name,
            nodes: nodes?,
            gpus_per_node: gpus_per_node?,
            gpu,
            intra_node,
            price: None,
        };
        self.node_against_domain(n, &group);
        Some(group)
    }

    /// `nodes`: a count, or in a cluster of one kind of node a list of counts, the sizes
    /// `solve` chooses among (the largest stands for the cluster until it has).
    fn nodes(&mut self, n: usize) -> Option<u64> {
        let (v, span) = self.get(n, "nodes")?;
        let Value::List(items) = v else {
            return self.read_count(n, span, "nodes", &v, 1);
        };
        let mut counts = Vec::new();
        for item in &items {
            counts.push(self.read_count(n, span, "nodes", item, 1)?);
        }
        counts.sort_unstable();
        counts.dedup();
        if counts.len() > 1 {
            self.node_candidates = counts.clone();
        }
        counts.last().copied()
    }

    /// `price` of a cluster or group: money per GPU-hour, zero allowed (a cluster one owns).
    fn price(&mut self, node: usize) -> Option<(Price, Span)> {
        let (v, span) = self.get(node, "price")?;
        match v {
            Value::Quantity(x, Dimension::Price(currency)) if x >= 0.0 && x.is_finite() => Some((
                Price {
                    per_gpu_hour: x,
                    currency,
                },
                span,
            )),
            Value::Quantity(_, Dimension::Price(_)) => {
                let file = self.file_of(node, "price");
                self.report(
                    codes::P0212,
                    "`price` must not be negative",
                    file,
                    span,
                    "negative",
                );
                None
            }
            other => {
                self.type_error(
                    node,
                    span,
                    "price",
                    Dimension::Price(planc_lang::units::Currency::Usd).describe(),
                    &other,
                );
                None
            }
        }
    }

    /// Each group's price (its own, else the cluster's), all in one currency.
    fn lower_prices(&mut self, n: usize, group_ids: &[usize], groups: &mut [NodeGroup]) {
        let cluster_price = self.price(n).map(|(p, _)| p);
        let mut first: Option<Price> = cluster_price;
        for (i, g) in groups.iter_mut().enumerate() {
            let own = group_ids.get(i).and_then(|&id| {
                let (p, span) = self.price(id)?;
                match first {
                    Some(f) if f.currency != p.currency => {
                        let file = self.file_of(id, "price");
                        self.report(
                            codes::P0208,
                            format!(
                                "`price` in {}, where the cluster's other prices are in {}",
                                p.currency, f.currency
                            ),
                            file,
                            span,
                            format!("not {}", f.currency.per_hour()),
                        )
                        .with_help(format!(
                            "write every price in one currency (planc has no exchange rates): `{}`",
                            f.currency.per_hour()
                        ));
                        None
                    }
                    _ => {
                        first.get_or_insert(p);
                        Some(p)
                    }
                }
            });
            g.price = own.or(cluster_price);
        }
    }

    fn lower_cluster(&mut self, n: usize, defined: &HashMap<String, Gpu>) -> Option<Cluster> {
        let name = self.nodes[n]
            .block
            .name
            .as_ref()
            .map(|i| i.text.clone())
            .unwrap_or_else(|| "cluster".into());
        let group_ids: Vec<usize> = self.nodes[n]
            .children
            .iter()
            .copied()
            .filter(|&c| self.nodes[c].block.kind.text == "group")
            .collect();
        let mut groups = Vec::new();
        let mut ok = true;
        if group_ids.is_empty() {
            match self.lower_group(n, name.clone(), defined) {
                Some(g) => groups.push(g),
                None => ok = false,
            }
        } else {
            for attr in ["nodes", "gpus_per_node", "gpu"] {
                if let Some(a) = self.find_attr(n, attr) {
                    let file = self.file_of(n, attr);
                    self.report(codes::P0218, format!("`{attr}` in a cluster made of groups"), file, a.name.span, "belongs in each `group`")
                        .with_help("a cluster either sets nodes, gpus_per_node and gpu, or holds `group` blocks that do");
                    ok = false;
                }
            }
            for &g in &group_ids {
                let gname = self.nodes[g]
                    .block
                    .name
                    .as_ref()
                    .map(|i| i.text.clone())
                    .unwrap_or_default();
                match self.lower_group(g, gname, defined) {
                    Some(gr) => groups.push(gr),
                    None => ok = false,
                }
            }
        }
        let gpus: u128 = groups
            .iter()
            .map(|g| u128::from(g.nodes) * u128::from(g.gpus_per_node))
            .sum();
        if gpus > u128::from(MAX_GPUS) {
            let (file, span) = (self.nodes[n].file, self.nodes[n].block.header_span());
            self.report(
                codes::P0212,
                format!("the cluster has {gpus} GPUs, more than the {MAX_GPUS} planc models"),
                file,
                span,
                "too many GPUs",
            )
            .with_help("check `nodes` and `gpus_per_node`: a larger cluster is most likely a typo");
            return None;
        }
        let inter_node = match self.child(n, "inter_node") {
            Some(c) => {
                let kind = self.require(c, "kind", |r| {
                    r.enumeration(c, "kind", LinkKind::NAMES, LinkKind::parse)
                });
                let bandwidth = self.require(c, "bandwidth", |r| {
                    r.quantity(c, "bandwidth", Dimension::Bandwidth)
                });
                let nics = self.require(c, "nics_per_node", |r| r.count(c, "nics_per_node", 1));
                let default_latency = match kind {
                    Some(LinkKind::Ethernet) => 30e-6,
                    Some(LinkKind::Roce) => 8e-6,
                    _ => 5e-6,
                };
                let latency = self
                    .quantity(c, "latency", Dimension::Time)
                    .unwrap_or(default_latency);
                match (kind, bandwidth, nics) {
                    (Some(kind), Some(bandwidth), Some(nics_per_node)) => Some(InterNode {
                        link: Link {
                            kind,
                            bandwidth,
                            latency,
                        },
                        nics_per_node,
                    }),
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
            None => None,
        };
        let total_nodes: u64 = groups.iter().map(|g| g.nodes).sum();
        if ok && total_nodes > 1 && inter_node.is_none() {
            let (file, span) = (self.nodes[n].file, self.nodes[n].block.header_span());
            self.report(codes::P0219, format!("a cluster of {total_nodes} nodes needs an `inter_node` network"), file, span, "no inter-node network")
                .with_help("add e.g. `inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s }`");
            ok = false;
        }
        if !ok {
            return None;
        }
        self.lower_prices(n, &group_ids, &mut groups);
        let profile = self.string(n, "profile").and_then(|p| {
            self.get(n, "profile")
                .map(|(_, span)| (p, self.file_of(n, "profile"), span))
        });
        Some(Cluster {
            name,
            groups,
            inter_node,
            profile,
        })
    }

    fn lower_model(&mut self, n: usize) -> Option<Model> {
        self.model_node = Some(n);
        if let Some((v, span)) = self.get(n, "preset") {
            let quoted = matches!(v, Value::Str(_));
            match v {
                Value::Str(s) | Value::Enum(s) => match Catalog::builtin().model(&s) {
                    Some(p) => self.preset = Some(p),
                    None => {
                        let file = self.file_of(n, "preset");
                        let names: Vec<&str> = Catalog::builtin()
                            .models
                            .iter()
                            .map(|m| m.name.as_str())
                            .collect();
                        let mut d =
                            Diagnostic::new(codes::P0215, format!("unknown model preset `{s}`"))
                                .at(file, span, "not a built-in model");
                        d = match did_you_mean(&s, names.iter().copied()) {
                            // The span holds the quotes of a string.
                            Some(x) if quoted => d
                                .help(format!("did you mean `{x}`?"))
                                .fix(format!("\"{x}\"")),
                            Some(x) => d.suggest(x),
                            None => d.help(format!("presets: {}", names.join(", "))),
                        };
                        self.diagnostics.push(d);
                        return None;
                    }
                },
                other => {
                    self.type_error(
                        n,
                        span,
                        "preset",
                        "a preset name in quotes, e.g. \"llama3-70b\"",
                        &other,
                    );
                    return None;
                }
            }
        }
        let p = self.preset;
        let name = self.nodes[n]
            .block
            .name
            .as_ref()
            .map(|i| i.text.clone())
            .or_else(|| p.map(|p| p.name.clone()))
            .unwrap_or_else(|| "model".into());
        let req = |r: &mut Self, attr: &str, from_preset: Option<u64>| -> Option<u64> {
            match (r.find_attr(n, attr), from_preset) {
                (None, Some(v)) => Some(v),
                _ => r.require(n, attr, |r| r.count(n, attr, 1)),
            }
        };
        let layers = req(self, "layers", p.map(|p| p.layers));
        let hidden = req(self, "hidden", p.map(|p| p.hidden));
        let heads = req(self, "heads", p.map(|p| p.heads));
        let vocab = req(self, "vocab", p.map(|p| p.vocab));
        let seq_len = req(self, "seq_len", p.map(|p| p.seq_len));
        let kv_heads = self
            .count(n, "kv_heads", 1)
            .or(p.and_then(|p| p.kv_heads))
            .or(heads);
        let head_dim = self.lower_head_dim(n, hidden, heads);
        let ffn_hidden = self
            .count(n, "ffn_hidden", 1)
            .or(p.and_then(|p| p.ffn_hidden))
            .or(hidden.map(|h| 4 * h));
        let mlp = self
            .enumeration(n, "mlp", Mlp::NAMES, Mlp::parse)
            .or(p.and_then(|p| Mlp::parse(&p.mlp)))
            .unwrap_or(Mlp::Gelu);
        let norm = self
            .enumeration(n, "norm", Norm::NAMES, Norm::parse)
            .or(p.and_then(|p| Norm::parse(&p.norm)))
            .unwrap_or(Norm::Layernorm);
        let position = self
            .enumeration(n, "position", Position::NAMES, Position::parse)
            .or(p.and_then(|p| Position::parse(&p.position)))
            .unwrap_or(Position::Learned);
        let bias = self
            .boolean(n, "bias")
            .or(p.map(|p| p.bias))
            .unwrap_or(true);
        let tied_embeddings = self
            .boolean(n, "tied_embeddings")
            .or(p.map(|p| p.tied_embeddings))
            .unwrap_or(true);
        let experts = self
            .count(n, "experts", 1)
            .or(p.and_then(|p| p.experts))
            .unwrap_or(1);
        let top_k = self
            .count(n, "top_k", 1)
            .or(p.and_then(|p| p.top_k))
            .unwrap_or(1);
        let expert_ffn_hidden = self.count(n, "expert_ffn_hidden", 1).or(ffn_hidden);
        let shared_experts = self.count(n, "shared_experts", 0).unwrap_or(0);
        let first_dense_layers = self.count(n, "first_dense_layers", 0).unwrap_or(0);
        let capacity_factor = self.number(n, "capacity_factor", 0.01, 1000.0);
        let moe_imbalance = self.number(n, "moe_imbalance", 1.0, 1000.0);
        let rope_theta = self
            .number(n, "rope_theta", 1.0, 1e12)
            .or(p.and_then(|p| p.rope_theta))
            .unwrap_or(10000.0);
        let sliding_window = self
            .count(n, "sliding_window", 1)
            .or(p.and_then(|p| p.sliding_window));
        let full_attention_every = self
            .count(n, "full_attention_every", 1)
            .or(p.and_then(|p| p.full_attention_every));
        if sliding_window.is_none() {
            if let Some((file, a)) = self.written(n, "full_attention_every") {
                self.report(
                    codes::P0227,
                    "`full_attention_every` without `sliding_window`: every layer attends the whole sequence",
                    file,
                    a.name.span,
                    "changes nothing without a window",
                )
                .with_help("write the window the other layers attend (`sliding_window = 4096`), or remove `full_attention_every`");
            }
        }
        Some(Model {
            name,
            layers: layers?,
            hidden: hidden?,
            heads: heads?,
            kv_heads: kv_heads?,
            head_dim: head_dim?,
            ffn_hidden: ffn_hidden?,
            vocab: vocab?,
            seq_len: seq_len?,
            mlp,
            norm,
            position,
            bias,
            tied_embeddings,
            experts,
            top_k,
            expert_ffn_hidden: expert_ffn_hidden?,
            shared_experts,
            first_dense_layers,
            capacity_factor,
            moe_imbalance,
            rope_theta,
            sliding_window,
            full_attention_every,
        })
    }

    /// `model.head_dim`: as written, else the preset's own, else `hidden / heads`, which
    /// must then be whole (a truncated head would misprice every attention product).
    fn lower_head_dim(&mut self, n: usize, hidden: Option<u64>, heads: Option<u64>) -> Option<u64> {
        if self.find_attr(n, "head_dim").is_some() {
            return self.count(n, "head_dim", 1);
        }
        // A preset's own head size holds only for its own hidden size and heads.
        let preset_shape =
            self.find_attr(n, "hidden").is_none() && self.find_attr(n, "heads").is_none();
        if let Some(d) = self
            .preset
            .and_then(|p| p.head_dim)
            .filter(|_| preset_shape)
        {
            return Some(d);
        }
        let (hidden, heads) = (hidden?, heads?);
        if hidden.is_multiple_of(heads) {
            return Some(hidden / heads);
        }
        let span = self
            .find_attr(n, "heads")
            .map(|a| a.value.span)
            .unwrap_or_else(|| self.nodes[n].block.header_span());
        let file = self.file_of(n, "heads");
        self.report(
            codes::P0206,
            format!(
                "heads = {heads} does not divide hidden = {hidden}: the head size is not implied"
            ),
            file,
            span,
            "no whole head size",
        )
        .with_help(format!(
            "write the model's `head_dim` (a config.json's `head_dim`), or heads dividing {hidden}"
        ));
        None
    }

    fn lower_train(&mut self, n: usize, model: Option<&Model>) -> Option<Train> {
        let global_batch = self.require(n, "global_batch", |r| r.count(n, "global_batch", 1));
        let precision = self
            .enumeration(n, "precision", Precision::NAMES, Precision::parse)
            .unwrap_or(Precision::Bf16);
        let optimizer = self
            .enumeration(n, "optimizer", Optimizer::NAMES, Optimizer::parse)
            .unwrap_or(Optimizer::Adam);
        let tokens = self.number(n, "tokens", 1.0, 1e18);
        let attention = self
            .enumeration(n, "attention", Attention::NAMES, Attention::parse)
            .unwrap_or(Attention::Flash);
        let dropout = self.number(n, "dropout", 0.0, 0.99).unwrap_or(0.0);
        let run = self.lower_run_settings(n);
        let method = self.lower_method(n, model);
        Some(Train {
            global_batch: global_batch?,
            precision,
            optimizer,
            tokens,
            attention,
            dropout,
            method: method?,
            run,
        })
    }

    /// `train.method` with its settings. `model`, where it lowered, bounds `frozen_layers`
    /// (a layer must train) and says which matrices a layer has (`gate` is SwiGLU's).
    fn lower_method(&mut self, n: usize, model: Option<&Model>) -> Option<TrainMethod> {
        let method = if self.find_attr(n, "method").is_some() {
            self.enumeration(n, "method", Method::NAMES, Method::parse)?
        } else {
            Method::Full
        };
        // A setting of another method changes nothing: said, not silently dropped.
        for (attr, of) in [
            ("lora_rank", Method::Lora),
            ("lora_alpha", Method::Lora),
            ("lora_targets", Method::Lora),
            ("frozen_layers", Method::Frozen),
        ] {
            if of == method {
                continue;
            }
            if let Some((file, a)) = self.written(n, attr) {
                self.report(
                    codes::P0226,
                    format!("`{attr}` belongs to `method = {of}`, and the plan trains `method = {method}`"),
                    file,
                    a.name.span,
                    format!("changes nothing under `method = {method}`"),
                )
                .with_help(format!("write `method = {of}`, or remove `{attr}`"));
            }
        }
        Some(match method {
            Method::Full => TrainMethod::Full,
            Method::Lora => {
                // LLaMA-Factory's defaults (`FinetuningArguments`): rank 8, alpha twice the
                // rank, every linear layer (`lora_target: all`).
                let rank = match self.find_attr(n, "lora_rank") {
                    Some(_) => self.count(n, "lora_rank", 1),
                    None => Some(8),
                };
                let alpha = match self.find_attr(n, "lora_alpha") {
                    Some(_) => self.number(n, "lora_alpha", 0.0, 1e9),
                    None => rank.map(|r| 2.0 * r as f64),
                };
                let targets = self.lora_targets(n, model);
                TrainMethod::Lora(Lora {
                    rank: rank?,
                    alpha: alpha?,
                    targets: targets?,
                })
            }
            Method::Frozen => {
                let frozen =
                    self.require(n, "frozen_layers", |r| r.count(n, "frozen_layers", 0))?;
                if let Some(m) = model.filter(|m| frozen >= m.layers) {
                    let (file, a) = self.written(n, "frozen_layers")?;
                    self.report(
                        codes::P0212,
                        format!(
                            "frozen_layers = {frozen}, and the model has {} layers",
                            m.layers
                        ),
                        file,
                        a.value.span,
                        "nothing would train",
                    )
                    .with_help(format!("freeze at most {} layers", m.layers - 1));
                    return None;
                }
                TrainMethod::Frozen {
                    frozen_layers: frozen,
                }
            }
        })
    }

    /// `train.lora_targets`: `all` (the default), one matrix, or a list of them, in
    /// [`LoraTarget::ALL`]'s order. A list here is the matrices adapted, not a hole.
    fn lora_targets(&mut self, n: usize, model: Option<&Model>) -> Option<Vec<LoraTarget>> {
        let swiglu = model.is_none_or(|m| m.mlp == Mlp::Swiglu);
        let present = |t: &LoraTarget| swiglu || *t != LoraTarget::Gate;
        let Some((file, attr)) = self.written(n, "lora_targets") else {
            return Some(LoraTarget::ALL.iter().copied().filter(present).collect());
        };
        let path = self.nodes[n].path.clone();
        self.origins
            .insert(&path, "lora_targets", file, attr.value.span);
        let v = self.eval_attr(n, "lora_targets")?;
        let span = attr.value.span;
        let items = match v {
            Value::List(items) => items,
            Value::Enum(ref s) if s == "all" => {
                return Some(LoraTarget::ALL.iter().copied().filter(present).collect())
            }
            other => vec![other],
        };
        let mut names = LoraTarget::NAMES.to_vec();
        names.push("all");
        let mut out = Vec::new();
        let mut ok = true;
        for it in &items {
            match self.read_enum(
                n,
                span,
                "lora_targets",
                it,
                LoraTarget::NAMES,
                LoraTarget::parse,
            ) {
                Some(t) if !present(&t) => {
                    self.report(
                        codes::P0209,
                        "`gate` is a SwiGLU MLP's matrix, and the model's MLP is GELU",
                        file,
                        span,
                        "a GELU MLP has `up` and `down`",
                    )
                    .with_help("adapt `up` and `down`, or write `lora_targets = all`");
                    ok = false;
                }
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        if items.is_empty() {
            self.report(
                codes::P0212,
                "`lora_targets` is empty: no adapter would train",
                file,
                span,
                "no matrices",
            )
            .with_help(format!("name some of {}", names.join(", ")));
            ok = false;
        }
        out.sort();
        out.dedup();
        ok.then_some(out)
    }

    fn lower_run_settings(&mut self, n: usize) -> RunSettings {
        let d = RunSettings::default();
        let lr = self.number(n, "lr", 0.0, 10.0).unwrap_or(d.lr);
        RunSettings {
            data: self.string(n, "data"),
            seed: self.count(n, "seed", 0).unwrap_or(d.seed),
            steps: self.count(n, "steps", 1).unwrap_or(d.steps),
            steps_written: self.find_attr(n, "steps").is_some(),
            lr,
            min_lr: self.number(n, "min_lr", 0.0, 10.0).unwrap_or(lr / 10.0),
            lr_schedule: self
                .enumeration(n, "lr_schedule", LrSchedule::NAMES, LrSchedule::parse)
                .unwrap_or(d.lr_schedule),
            warmup_steps: self.count(n, "warmup_steps", 0).unwrap_or(d.warmup_steps),
            weight_decay: self
                .number(n, "weight_decay", 0.0, 10.0)
                .unwrap_or(d.weight_decay),
            grad_clip: self.number(n, "grad_clip", 0.0, 1e9).unwrap_or(d.grad_clip),
            adam_beta1: self
                .number(n, "adam_beta1", 0.0, 1.0)
                .unwrap_or(d.adam_beta1),
            adam_beta2: self
                .number(n, "adam_beta2", 0.0, 1.0)
                .unwrap_or(d.adam_beta2),
            adam_eps: self.number(n, "adam_eps", 0.0, 1.0).unwrap_or(d.adam_eps),
        }
    }

    fn hole<T: Clone>(
        &mut self,
        n: usize,
        name: &str,
        default: Hole<T>,
        conv: impl Fn(&mut Self, Span, &Value) -> Option<T>,
    ) -> Option<Hole<T>> {
        let Some((v, span)) = self.get(n, name) else {
            // Written but invalid: reported already; fall back to the default so checking
            // goes on, but the plan is not costed.
            return if self.find_attr(n, name).is_some() {
                None
            } else {
                Some(default)
            };
        };
        match v {
            Value::Auto => Some(Hole::Auto),
            Value::List(items) => {
                if items.is_empty() {
                    let file = self.file_of(n, name);
                    self.report(
                        codes::P0212,
                        format!("`{name}` has an empty candidate list"),
                        file,
                        span,
                        "no candidates",
                    )
                    .with_help("list at least one value, or write `auto`");
                    return None;
                }
                let mut out = Vec::new();
                for it in &items {
                    out.push(conv(self, span, it)?);
                }
                Some(Hole::Candidates(out))
            }
            other => conv(self, span, &other).map(Hole::Fixed),
        }
    }

    fn lower_parallel(&mut self, n: usize) -> Option<ParallelSpec> {
        let count = |min: u64, name: &'static str| {
            move |r: &mut Self, span: Span, v: &Value| r.read_count(n, span, name, v, min)
        };
        let tp = self.hole(n, "tp", Hole::Fixed(1), count(1, "tp"));
        let pp = self.hole(n, "pp", Hole::Fixed(1), count(1, "pp"));
        let dp = self.hole(n, "dp", Hole::Auto, count(1, "dp"));
        let cp = self.hole(n, "cp", Hole::Fixed(1), count(1, "cp"));
        let ep = self.hole(n, "ep", Hole::Fixed(1), count(1, "ep"));
        let vpp = self.hole(n, "vpp", Hole::Fixed(1), count(1, "vpp"));
        let micro_batch = self.hole(n, "micro_batch", Hole::Fixed(1), count(1, "micro_batch"));
        let zero = self.hole(n, "zero", Hole::Fixed(0), |r, span, v| {
            let z = r.read_count(n, span, "zero", v, 0)?;
            if z > 3 {
                let file = r.file_of(n, "zero");
                r.report(
                    codes::P0212,
                    format!("`zero` must be 0, 1, 2 or 3, found {z}"),
                    file,
                    span,
                    "no such ZeRO stage",
                );
                return None;
            }
            Some(z)
        });
        let schedule = self.hole(
            n,
            "schedule",
            Hole::Fixed(Schedule::OneFOneB),
            |r, span, v| r.read_enum(n, span, "schedule", v, Schedule::NAMES, Schedule::parse),
        );
        let sequence_parallel =
            self.hole(n, "sequence_parallel", Hole::Fixed(false), |r, span, v| {
                r.read_bool(n, span, "sequence_parallel", v)
            });
        let recompute = self.hole(
            n,
            "recompute",
            Hole::Fixed(Recompute::None),
            |r, span, v| r.read_enum(n, span, "recompute", v, Recompute::NAMES, Recompute::parse),
        );
        let offload = self.hole(n, "offload", Hole::Fixed(Offload::None), |r, span, v| {
            r.read_enum(n, span, "offload", v, Offload::NAMES, Offload::parse)
        });
        let first_stage_layers = self.stage_layers(n, "first_stage_layers");
        let last_stage_layers = self.stage_layers(n, "last_stage_layers");
        let overlap_grad_reduce = self.fixed_bool(n, "overlap_grad_reduce");
        let overlap_p2p = self.fixed_bool(n, "overlap_p2p");
        let overlap_tp_backward = self.fixed_bool(n, "overlap_tp_backward");
        let grad_accumulation_fusion = self.fixed_bool(n, "grad_accumulation_fusion");
        let scatter_gather_p2p = self.fixed_bool(n, "scatter_gather_p2p");
        let grad_dtype = self.grad_dtype(n, "grad_dtype");
        let reduce_dtype = self.grad_dtype(n, "reduce_dtype");
        let optimizer_dtype = self.optimizer_dtype(n);
        Some(ParallelSpec {
            tp: tp?,
            pp: pp?,
            dp: dp?,
            cp: cp?,
            ep: ep?,
            vpp: vpp?,
            micro_batch: micro_batch?,
            schedule: schedule?,
            sequence_parallel: sequence_parallel?,
            zero: zero?,
            recompute: recompute?,
            offload: offload?,
            first_stage_layers: first_stage_layers?.and_then(StageEnd::count),
            last_stage_layers: last_stage_layers?.and_then(StageEnd::count),
            auto_first_stage_layers: first_stage_layers? == Some(StageEnd::Auto),
            auto_last_stage_layers: last_stage_layers? == Some(StageEnd::Auto),
            overlap_grad_reduce: overlap_grad_reduce?.unwrap_or(true),
            overlap_p2p: overlap_p2p?,
            overlap_tp_backward: overlap_tp_backward?,
            grad_accumulation_fusion: grad_accumulation_fusion?.unwrap_or(true),
            scatter_gather_p2p: scatter_gather_p2p?.unwrap_or(false),
            grad_dtype: grad_dtype?,
            reduce_dtype: reduce_dtype?,
            optimizer_dtype: optimizer_dtype?,
        })
    }

    /// `parallel.optimizer_dtype`: the optimizer state's type the framework is configured
    /// with, never a hole; `auto` (or absent) is fp32. `Some(None)` then, `None` when written
    /// wrongly (reported).
    fn optimizer_dtype(&mut self, n: usize) -> Option<Option<OptimizerDtype>> {
        let name = "optimizer_dtype";
        if self.find_attr(n, name).is_none() {
            return Some(None);
        }
        let (v, span) = self.get(n, name)?;
        if matches!(v, Value::Auto) {
            return Some(None);
        }
        self.read_enum(
            n,
            span,
            name,
            &v,
            OptimizerDtype::NAMES,
            OptimizerDtype::parse,
        )
        .map(Some)
    }

    /// `parallel.grad_dtype` / `reduce_dtype`: a type the framework is configured with,
    /// never a hole; `auto` (or absent) is the framework's default. `Some(None)` then,
    /// `None` when written wrongly (reported).
    fn grad_dtype(&mut self, n: usize, name: &str) -> Option<Option<GradDtype>> {
        if self.find_attr(n, name).is_none() {
            return Some(None);
        }
        let (v, span) = self.get(n, name)?;
        if matches!(v, Value::Auto) {
            return Some(None);
        }
        self.read_enum(n, span, name, &v, GradDtype::NAMES, GradDtype::parse)
            .map(Some)
    }

    /// A `parallel` boolean that is never a hole (`overlap_grad_reduce`, `overlap_p2p`,
    /// `grad_accumulation_fusion`, `scatter_gather_p2p`): what a framework overlaps or fuses describes the
    /// framework, so it is written, not searched.
    /// `Some(None)` when absent, `None` when written wrongly (reported).
    fn fixed_bool(&mut self, n: usize, name: &str) -> Option<Option<bool>> {
        if self.find_attr(n, name).is_none() {
            return Some(None);
        }
        let (v, span) = self.get(n, name)?;
        if matches!(v, Value::Auto | Value::List(_)) {
            let file = self.file_of(n, name);
            self.report(
                codes::P0213,
                format!("`{name}` cannot be `auto` or a list"),
                file,
                span,
                "the solver does not choose what the framework overlaps",
            )
            .with_help(format!(
                "write `{name} = true` or `false`, or leave it out for the framework's default"
            ));
            return None;
        }
        self.read_bool(n, span, name, &v).map(Some)
    }

    /// `first_stage_layers` / `last_stage_layers`: a whole number, `auto` (the solver evens
    /// the stages' work, `solve::balance`), or absent (the even split). Not a list: the
    /// counts worth trying follow from the layout, which the solver knows and the plan does
    /// not.
    fn stage_layers(&mut self, n: usize, name: &str) -> Option<Option<StageEnd>> {
        if self.find_attr(n, name).is_none() {
            return Some(None);
        }
        let (v, span) = self.get(n, name)?;
        match v {
            Value::Auto => Some(Some(StageEnd::Auto)),
            Value::List(_) => {
                let file = self.file_of(n, name);
                self.report(
                    codes::P0213,
                    format!("`{name}` cannot be a list"),
                    file,
                    span,
                    "the solver does not take candidate splits",
                )
                .with_help(format!(
                    "write a whole number of layers, `auto` for the split that evens the stages' work, or leave `{name}` out for the even split"
                ));
                None
            }
            v => self
                .read_count(n, span, name, &v, 1)
                .map(|c| Some(StageEnd::Layers(c))),
        }
    }

    fn lower_job(&mut self, n: usize) -> Option<Job> {
        let mut env = Vec::new();
        if let Some(c) = self.child(n, "env") {
            let attrs = self.nodes[c].attrs.clone();
            for (file, a) in attrs {
                self.origins
                    .insert(ENV_NAME_ORIGIN, &a.name.text, file, a.name.span);
                if let Some((v, span)) = self.get(c, &a.name.text) {
                    let text = match v {
                        Value::Str(s) | Value::Enum(s) => s,
                        Value::Number(x) => fmt_num(x),
                        Value::Bool(b) => {
                            if b {
                                "1".into()
                            } else {
                                "0".into()
                            }
                        }
                        other => {
                            self.type_error(c, span, &a.name.text, "a string or a number", &other);
                            continue;
                        }
                    };
                    env.push((a.name.text.clone(), text));
                }
            }
        }
        Some(Job {
            name: self.string(n, "name"),
            framework: self
                .enumeration(n, "framework", Framework::NAMES, Framework::parse)
                .unwrap_or(Framework::Megatron),
            scheduler: self
                .enumeration(n, "scheduler", Scheduler::NAMES, Scheduler::parse)
                .unwrap_or(Scheduler::None),
            partition: self.string(n, "partition"),
            time_limit: self.quantity(n, "time_limit", Dimension::Time),
            image: self.string(n, "image"),
            checkpoint_dir: self.string(n, "checkpoint_dir"),
            retries: self.count(n, "retries", 0).unwrap_or(0),
            entrypoint: self.string(n, "entrypoint"),
            env,
            entrypoint_args: self
                .enumeration(
                    n,
                    "entrypoint_args",
                    EntrypointArgs::NAMES,
                    EntrypointArgs::parse,
                )
                .unwrap_or(EntrypointArgs::Planc),
            volume: self.string(n, "volume"),
            kernels: self.enumeration(n, "kernels", Kernels::NAMES, Kernels::parse),
            attention_kernel: self.enumeration(
                n,
                "attention_kernel",
                AttentionKernel::NAMES,
                AttentionKernel::parse,
            ),
        })
    }

    fn lower_search(&mut self, n: usize) -> Search {
        let d = Search::default();
        Search {
            objective: self
                .enumeration(n, "objective", Objective::NAMES, Objective::parse)
                .unwrap_or(d.objective),
            memory_headroom: self
                .ratio(n, "memory_headroom")
                .unwrap_or(d.memory_headroom),
            top: self.count(n, "top", 1).unwrap_or(d.top),
        }
    }
}

/// The largest value planc accepts for a count: far above any real plan, and low enough
/// that the products the cost model forms of them (tp × pp × cp × dp, vocab × hidden)
/// stay within 64 bits; a generated `tp = 4294967296` is an error, not an overflow.
pub const MAX_COUNT: u64 = 1 << 24;

/// The most GPUs a cluster may have (the sum over its groups).
pub const MAX_GPUS: u64 = 1 << 24;

fn max_count(name: &str) -> u64 {
    match name {
        // Sequences per step, and steps of a run: large, and never multiplied by more than
        // one other count.
        "global_batch" | "steps" | "warmup_steps" => 1 << 40,
        // A label rather than a size (a random seed): any value below 10^18.
        "seed" => 999_999_999_999_999_999,
        _ => MAX_COUNT,
    }
}

fn unit_hint(expected: &str) -> &'static str {
    if expected.contains("bandwidth") {
        "GB/s"
    } else if expected.contains("bytes") {
        "GiB"
    } else if expected.contains("duration") {
        "us"
    } else if expected.contains("compute") {
        "TFLOPS"
    } else if expected.contains("price") {
        "USD/h"
    } else {
        "%"
    }
}

/// A preset's attribute as a value, so that `ffn_hidden = 4 * hidden` works on a preset.
fn preset_value(p: &ModelPreset, name: &str) -> Option<Value> {
    let n = |x: u64| Some(Value::Number(x as f64));
    match name {
        "layers" => n(p.layers),
        "hidden" => n(p.hidden),
        "heads" => n(p.heads),
        "kv_heads" => n(p.kv_heads.unwrap_or(p.heads)),
        "head_dim" => n(p.head_dim.unwrap_or(p.hidden / p.heads)),
        "ffn_hidden" => n(p.ffn_hidden.unwrap_or(4 * p.hidden)),
        "vocab" => n(p.vocab),
        "seq_len" => n(p.seq_len),
        "experts" => n(p.experts.unwrap_or(1)),
        "top_k" => n(p.top_k.unwrap_or(1)),
        _ => None,
    }
}

/// `first_stage_layers` / `last_stage_layers` as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StageEnd {
    Layers(u64),
    Auto,
}

impl StageEnd {
    fn count(self) -> Option<u64> {
        match self {
            StageEnd::Layers(n) => Some(n),
            StageEnd::Auto => None,
        }
    }
}
