//! The rows `planc diff` sets side by side: the layout, memory per stage, the step's split,
//! throughput, the time and GPU-hours to train, and the price, each from the report of
//! `planc check` (`docs/spec/report.md`), so `diff` says nothing `check` does not.

use planc_compiler::report::Report;
use serde::Serialize;
use serde_json::{json, Value};

/// How a row's values read and compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Compared for equality only.
    Text,
    Count,
    Bytes,
    Seconds,
    /// Per second (tokens, samples) or TFLOP/s.
    Rate,
    /// A fraction (MFU, a share of the step): changes in percentage points.
    Share,
    /// GPU-hours or money: three significant digits, thousands separated.
    Amount,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub section: &'static str,
    pub name: String,
    /// In the report's units (bytes, seconds, per second, a fraction), a string, or null
    /// where that plan has no such value.
    pub a: Value,
    pub b: Value,
    /// `b − a`, for numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// `b / a − 1`, for numbers with `a` ≠ 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative: Option<f64>,
    #[serde(skip)]
    pub kind: Kind,
    /// Shown after the value in the human table (a share of the step, of capacity).
    #[serde(skip)]
    pub notes: (String, String),
}

impl Row {
    fn new(section: &'static str, name: impl Into<String>, kind: Kind, a: Value, b: Value) -> Row {
        let (delta, relative) = match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) if kind != Kind::Text => {
                (Some(y - x), (x != 0.0).then(|| y / x - 1.0))
            }
            _ => (None, None),
        };
        Row {
            section,
            name: name.into(),
            a,
            b,
            delta,
            relative,
            kind,
            notes: (String::new(), String::new()),
        }
    }

    fn noted(mut self, a: String, b: String) -> Row {
        self.notes = (a, b);
        self
    }

    pub fn same(&self) -> bool {
        self.a == self.b
    }
}

/// The rows of two reports. A section a report lacks (a plan that did not resolve) gives
/// null values.
pub fn rows(a: &Report, b: &Report) -> Vec<Row> {
    let mut out = layout(a, b);
    out.extend(memory(a, b));
    out.extend(time(a, b));
    out.extend(speed(a, b));
    out
}

fn pair<T>(a: &Report, b: &Report, f: impl Fn(&Report) -> Option<T>) -> (Option<T>, Option<T>) {
    (f(a), f(b))
}

fn val<T: Serialize>(v: Option<T>) -> Value {
    v.map_or(Value::Null, |v| json!(v))
}

fn layout(a: &Report, b: &Report) -> Vec<Row> {
    let text = |name: &str, f: &dyn Fn(&Report) -> Option<String>| {
        let (x, y) = pair(a, b, f);
        Row::new("layout", name, Kind::Text, val(x), val(y))
    };
    let count = |name: &str, f: &dyn Fn(&Report) -> Option<u64>| {
        let (x, y) = pair(a, b, f);
        Row::new("layout", name, Kind::Count, val(x), val(y))
    };
    vec![
        text("GPUs", &|r| {
            let gpus = r.memory.as_ref().map(|m| {
                let mut names: Vec<&str> = m.stages.iter().map(|s| s.gpu.as_str()).collect();
                names.dedup();
                names.join(" + ")
            })?;
            Some(format!("{}×{gpus}", r.plan.as_ref()?.world_size))
        }),
        text("model", &|r| {
            let m = r.model.as_ref()?;
            Some(format!("{} ({:.2} B)", m.name, m.params as f64 / 1e9))
        }),
        // What trains (`train.method`): a LoRA job against its full fine-tune is the
        // comparison people make.
        text("method", &|r| {
            let m = r.model.as_ref()?;
            Some(match &m.method {
                None => "full".to_string(),
                Some(x) => {
                    let what = match (x.lora_rank, x.frozen_layers) {
                        (Some(rank), _) => format!("{} r{rank}", x.name),
                        (_, Some(layers)) => format!("{} {layers} layers", x.name),
                        _ => x.name.to_string(),
                    };
                    format!("{what} ({:.2} B trained)", x.trained_params as f64 / 1e9)
                }
            })
        }),
        count("tp", &|r| r.plan.as_ref().map(|p| p.tp)),
        count("pp", &|r| r.plan.as_ref().map(|p| p.pp)),
        count("dp", &|r| r.plan.as_ref().map(|p| p.dp)),
        count("cp", &|r| r.plan.as_ref().map(|p| p.cp)),
        count("ep", &|r| r.plan.as_ref().map(|p| p.ep)),
        count("vpp", &|r| r.plan.as_ref().map(|p| p.vpp)),
        text("schedule", &|r| r.plan.as_ref().map(|p| p.schedule.into())),
        count("micro_batch", &|r| r.plan.as_ref().map(|p| p.micro_batch)),
        count("micro-batches", &|r| r.plan.as_ref().map(|p| p.grad_accum)),
        count("global_batch", &|r| r.plan.as_ref().map(|p| p.global_batch)),
        count("zero", &|r| r.plan.as_ref().map(|p| p.zero)),
        text("recompute", &|r| {
            r.plan.as_ref().map(|p| p.recompute.into())
        }),
        text("sequence_parallel", &|r| {
            r.plan.as_ref().map(|p| p.sequence_parallel.to_string())
        }),
        text("offload", &|r| r.plan.as_ref().map(|p| p.offload.into())),
        text("precision", &|r| {
            r.plan.as_ref().map(|p| p.precision.into())
        }),
    ]
}

/// The stages shown: all of them up to eight, else the first two, the last and each
/// side's peak.
fn stages_shown(a: &Report, b: &Report) -> Vec<usize> {
    let n = |r: &Report| r.memory.as_ref().map_or(0, |m| m.stages.len());
    let most = n(a).max(n(b));
    if most <= 8 {
        return (0..most).collect();
    }
    let peak = |r: &Report| {
        r.memory
            .as_ref()
            .and_then(|m| m.stages.iter().position(|s| s.total_bytes == m.peak_bytes))
    };
    let mut v = vec![0, 1, n(a).saturating_sub(1), n(b).saturating_sub(1)];
    v.extend(peak(a));
    v.extend(peak(b));
    v.sort_unstable();
    v.dedup();
    v
}

fn memory(a: &Report, b: &Report) -> Vec<Row> {
    let share = |r: &Report, bytes: Option<u64>, cap: Option<u64>| match (bytes, cap) {
        (Some(x), Some(c)) if c > 0 => format!("({:.0} %)", x as f64 / c as f64 * 100.0),
        _ => {
            let _ = r;
            String::new()
        }
    };
    let peak = |r: &Report| r.memory.as_ref().map(|m| (m.peak_bytes, m.capacity_bytes));
    let (pa, pb) = (peak(a), peak(b));
    let mut out = vec![Row::new(
        "memory",
        "peak",
        Kind::Bytes,
        val(pa.map(|p| p.0)),
        val(pb.map(|p| p.0)),
    )
    .noted(
        share(a, pa.map(|p| p.0), pa.map(|p| p.1)),
        share(b, pb.map(|p| p.0), pb.map(|p| p.1)),
    )];
    for i in stages_shown(a, b) {
        let stage = |r: &Report| {
            r.memory
                .as_ref()
                .and_then(|m| m.stages.get(i))
                .map(|s| (s.total_bytes, s.capacity_bytes))
        };
        let (x, y) = (stage(a), stage(b));
        out.push(
            Row::new(
                "memory",
                format!("stage {i}"),
                Kind::Bytes,
                val(x.map(|s| s.0)),
                val(y.map(|s| s.0)),
            )
            .noted(
                share(a, x.map(|s| s.0), x.map(|s| s.1)),
                share(b, y.map(|s| s.0), y.map(|s| s.1)),
            ),
        );
    }
    out
}

fn time(a: &Report, b: &Report) -> Vec<Row> {
    let part = |name: &str, f: &dyn Fn(&planc_compiler::report::TimeSection) -> f64| {
        let get = |r: &Report| r.time.as_ref().map(|t| (f(t), t.step_s));
        let (x, y) = (get(a), get(b));
        let of_step = |v: Option<(f64, f64)>| {
            v.filter(|(_, s)| *s > 0.0)
                .map_or(String::new(), |(x, s)| format!("({:.0} %)", x / s * 100.0))
        };
        Row::new(
            "time",
            name,
            Kind::Seconds,
            val(x.map(|v| v.0)),
            val(y.map(|v| v.0)),
        )
        .noted(of_step(x), of_step(y))
    };
    let mut out = vec![
        part("step", &|t| t.step_s),
        part("compute", &|t| t.compute_s),
        part("optimizer", &|t| t.optimizer_s),
        part("exposed comm", &|t| t.exposed_comm_s),
        part("bubble", &|t| t.bubble_s),
    ];
    // The step line is the whole: no share of itself.
    out[0].notes = (String::new(), String::new());
    out
}

fn speed(a: &Report, b: &Report) -> Vec<Row> {
    let row = |section, name: &str, kind, f: &dyn Fn(&Report) -> Option<f64>| {
        let (x, y) = pair(a, b, f);
        Row::new(section, name, kind, val(x), val(y))
    };
    let mut out = vec![
        row("speed", "tokens/s", Kind::Rate, &|r| {
            r.throughput.as_ref().map(|t| t.tokens_per_s)
        }),
        row("speed", "TFLOP/s per GPU", Kind::Rate, &|r| {
            r.throughput.as_ref().map(|t| t.model_tflops_per_gpu)
        }),
        row("speed", "MFU", Kind::Share, &|r| {
            r.throughput.as_ref().map(|t| t.mfu)
        }),
    ];
    out.extend(cost(a, b));
    out
}

/// GPU-hours, the training run, and money where both plans price in one currency (or one
/// has no price).
fn cost(a: &Report, b: &Report) -> Vec<Row> {
    let row = |section, name: &str, kind, f: &dyn Fn(&Report) -> Option<f64>| {
        let (x, y) = pair(a, b, f);
        Row::new(section, name, kind, val(x), val(y))
    };
    let has = |f: &dyn Fn(&Report) -> Option<f64>| f(a).is_some() || f(b).is_some();
    let currency = |r: &Report| r.cost.as_ref().and_then(|c| c.currency);
    let code = match (currency(a), currency(b)) {
        (Some(x), Some(y)) if x != y => None,
        (x, y) => x.or(y),
    };
    let mut out = vec![
        row("cost", "GPU-hours a step", Kind::Amount, &|r| {
            r.cost.as_ref().map(|c| c.gpu_hours_per_step)
        }),
        row("cost", "GPU-hours per M tokens", Kind::Amount, &|r| {
            r.cost.as_ref().map(|c| c.gpu_hours_per_million_tokens)
        }),
    ];
    if let Some(code) = code {
        out.push(row(
            "cost",
            &format!("{code} per M tokens"),
            Kind::Amount,
            &|r| r.cost.as_ref().and_then(|c| c.cost_per_million_tokens),
        ));
    }
    let trains = |r: &Report| r.time.as_ref().and_then(|t| t.time_to_train_s);
    if has(&trains) {
        out.push(row("train", "time to train", Kind::Seconds, &trains));
    }
    let to_train = |r: &Report| r.cost.as_ref().and_then(|c| c.gpu_hours_to_train);
    if has(&to_train) {
        out.push(row("train", "GPU-hours to train", Kind::Amount, &to_train));
    }
    let money_to_train = |r: &Report| r.cost.as_ref().and_then(|c| c.cost_to_train);
    if let (Some(code), true) = (code, has(&money_to_train)) {
        out.push(row(
            "train",
            &format!("{code} to train"),
            Kind::Amount,
            &money_to_train,
        ));
    }
    out
}
