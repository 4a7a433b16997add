//! Names and categories of tasks, shared by the trace and the SVG timeline.

use crate::graph::TaskKind;
use crate::program::{CollectiveOp, Payload};
use crate::schedule::Pass;

pub fn label(kind: &TaskKind) -> String {
    match kind {
        TaskKind::Pass(w) => w.to_string(),
        TaskKind::Transfer(m) => {
            let what = if m.payload == Payload::Activation {
                "act"
            } else {
                "grad"
            };
            format!("send {what} {}", m.micro_batch)
        }
        TaskKind::Collective(c) => c.to_string(),
        TaskKind::Optimizer => "optimizer".into(),
    }
}

pub fn category(kind: &TaskKind) -> &'static str {
    match kind {
        TaskKind::Pass(w) => match w.pass {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
            Pass::WeightGrad => "weight-grad",
        },
        TaskKind::Transfer(_) => "p2p",
        TaskKind::Collective(CollectiveOp::ParamGather { .. }) => "param-gather",
        TaskKind::Collective(_) => "grad-reduce",
        TaskKind::Optimizer => "optimizer",
    }
}
