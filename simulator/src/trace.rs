//! Chrome / Perfetto trace of a simulated step (the JSON "trace event" format): open it at
//! ui.perfetto.dev or chrome://tracing. One process per pipeline rank, one thread per lane
//! (the communication lane as many as it has transfers under way at once).

use serde_json::{json, Value};

use crate::engine::Run;
use crate::graph::{Lane, StepGraph};
use crate::label::{category, label};

pub fn chrome_trace(sg: &StepGraph, run: &Run, rank_names: &[String]) -> Value {
    let g = &sg.graph;
    let mut events = Vec::with_capacity(g.node_count() + 4 * sg.ranks as usize);
    // Transfers that share a link run at once (the engine splits its bandwidth), so the
    // communication lane takes as many rows as it has transfers under way at one time: a
    // row of a trace shows one span at a time.
    let mut comm_rows: Vec<Vec<f64>> = vec![Vec::new(); sg.ranks as usize];
    let mut spans: Vec<_> = g
        .node_indices()
        .filter(|n| run.finished[n.index()] && g[*n].duration > 0.0)
        .collect();
    spans.sort_by(|a, b| run.start[a.index()].total_cmp(&run.start[b.index()]));
    for n in spans {
        let t = &g[n];
        let (start, end) = (run.start[n.index()], run.end[n.index()]);
        let tid = if t.lane == Lane::Compute {
            0
        } else {
            let rows = &mut comm_rows[t.rank as usize];
            let free = rows.iter().position(|&busy_until| busy_until <= start);
            let row = free.unwrap_or_else(|| {
                rows.push(0.0);
                rows.len() - 1
            });
            rows[row] = end;
            1 + row
        };
        events.push(json!({
            "ph": "X",
            "name": label(&t.kind),
            "cat": category(&t.kind),
            "pid": t.rank,
            "tid": tid,
            "ts": start * 1e6,
            "dur": (end - start - t.comm) * 1e6,
        }));
        if t.comm > 0.0 {
            events.push(json!({
                "ph": "X",
                "name": format!("{} tp/cp/ep comm", label(&t.kind)),
                "cat": "layer-comm",
                "pid": t.rank,
                "tid": 0,
                "ts": (end - t.comm) * 1e6,
                "dur": t.comm * 1e6,
            }));
        }
    }
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
        let rows = comm_rows[r as usize].len().max(1);
        for row in 0..rows {
            let name = if row == 0 {
                "communication".to_string()
            } else {
                format!("communication {}", row + 1)
            };
            events.push(json!({"ph": "M", "name": "thread_name", "pid": r, "tid": 1 + row, "args": {"name": name}}));
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
