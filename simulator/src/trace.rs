//! Chrome / Perfetto trace of a simulated step (the JSON "trace event" format): open it at
//! ui.perfetto.dev or chrome://tracing. One process per pipeline rank, one thread per lane.

use serde_json::{json, Value};

use crate::engine::Run;
use crate::graph::{Lane, StepGraph};
use crate::label::{category, label};

pub fn chrome_trace(sg: &StepGraph, run: &Run, rank_names: &[String]) -> Value {
    let g = &sg.graph;
    let mut events = Vec::with_capacity(g.node_count() + 4 * sg.ranks as usize);
    for r in 0..sg.ranks {
        let name = rank_names
            .get(r as usize)
            .cloned()
            .unwrap_or_else(|| format!("rank {r}"));
        events.push(json!({"ph": "M", "name": "process_name", "pid": r, "args": {"name": name}}));
        events.push(
            json!({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}}),
        );
        events.push(json!({"ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}}));
        events.push(json!({"ph": "M", "name": "thread_name", "pid": r, "tid": 1, "args": {"name": "communication"}}));
    }
    for n in g.node_indices() {
        let t = &g[n];
        if !run.finished[n.index()] || t.duration <= 0.0 {
            continue;
        }
        events.push(json!({
            "ph": "X",
            "name": label(&t.kind),
            "cat": category(&t.kind),
            "pid": t.rank,
            "tid": if t.lane == Lane::Compute { 0 } else { 1 },
            "ts": run.start[n.index()] * 1e6,
            "dur": (t.duration - t.comm) * 1e6,
        }));
        if t.comm > 0.0 {
            events.push(json!({
                "ph": "X",
                "name": format!("{} tp/cp/ep comm", label(&t.kind)),
                "cat": "layer-comm",
                "pid": t.rank,
                "tid": 0,
                "ts": (run.end[n.index()] - t.comm) * 1e6,
                "dur": t.comm * 1e6,
            }));
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
