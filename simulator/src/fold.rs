//! Folding a long step for timelines. At hundreds of micro-batches every pass is a pixel
//! wide and the picture is a uniform band; what differs from one step to the next sits at
//! its ends (the pipeline filling and draining, gradient reductions, the optimizer). The
//! steady state between them repeats, so a timeline draws the ends to scale and folds the
//! middle into a band that says how long it is, how many micro-batches it holds and where
//! its time goes on each rank ([`Share`], cut as [`crate::breakdown`] cuts the step).

use std::collections::BTreeSet;

use crate::breakdown::{Piece, Use};
use crate::engine::Run;
use crate::graph::{StepGraph, TaskKind};
use crate::label::category;
use crate::schedule::Pass;

/// Steps of at most this many micro-batches are drawn whole.
pub const FOLD_ABOVE: u32 = 32;
/// The first and the last this many micro-batches are always drawn.
pub const SHOWN: u32 = 4;
/// A stretch shorter than this fraction of the step is not worth a fold.
const MIN_FRACTION: f64 = 0.1;

/// A stretch of the step drawn as one band.
#[derive(Clone, Debug, PartialEq)]
pub struct Fold {
    pub start: f64,
    pub end: f64,
    /// Micro-batches whose forward (or, where no forward falls inside, backward) pass
    /// started inside it on the rank counted, chunk 0.
    pub micro_batches: u32,
}

impl Fold {
    pub fn len(&self) -> f64 {
        self.end - self.start
    }
}

/// Micro-batches in a simulated step (one more than the largest index of a pass).
pub fn micro_batches(sg: &StepGraph) -> u32 {
    sg.graph
        .node_weights()
        .filter_map(|t| match t.kind {
            TaskKind::Pass(w) => Some(w.micro_batch + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The stretches of the step to fold, in time order: those where every task under way, on
/// every rank and lane, belongs to a micro-batch after the first [`SHOWN`] and before the
/// last [`SHOWN`] (collectives and the optimizer are never folded), and which last at
/// least a tenth of the step. None when the step has at most [`FOLD_ABOVE`]
/// micro-batches. `rank` is the rank whose micro-batches are counted.
pub fn folds(sg: &StepGraph, run: &Run, rank: u32) -> Vec<Fold> {
    let m = micro_batches(sg);
    if m <= FOLD_ABOVE {
        return Vec::new();
    }
    let g = &sg.graph;
    let middle = |mb: u32| mb >= SHOWN && mb + SHOWN < m;
    let mut kept: Vec<(f64, f64)> = g
        .node_indices()
        .filter(|n| run.finished[n.index()])
        .filter(|&n| match g[n].kind {
            TaskKind::Pass(w) => !middle(w.micro_batch),
            TaskKind::Transfer(msg) => !middle(msg.micro_batch),
            _ => true,
        })
        .map(|n| (run.start[n.index()], run.end[n.index()]))
        .collect();
    kept.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut stretches = Vec::new();
    let mut reach = 0.0;
    for (start, end) in kept {
        if start > reach {
            stretches.push((reach, start));
        }
        reach = f64::max(reach, end);
    }
    if run.step_s > reach {
        stretches.push((reach, run.step_s));
    }
    stretches
        .into_iter()
        .filter(|(a, b)| b - a >= MIN_FRACTION * run.step_s)
        .map(|(start, end)| Fold {
            start,
            end,
            micro_batches: counted(sg, run, rank, start, end),
        })
        .collect()
}

/// Distinct micro-batches of `rank` whose chunk-0 forward started in `[start, end)`, or
/// their backward where no forward did (the backward half of a gpipe step).
fn counted(sg: &StepGraph, run: &Run, rank: u32, start: f64, end: f64) -> u32 {
    let g = &sg.graph;
    let mut forward = BTreeSet::new();
    let mut backward = BTreeSet::new();
    for n in g.node_indices() {
        let t = &g[n];
        let s = run.start[n.index()];
        if t.rank != rank || s < start || s >= end {
            continue;
        }
        if let TaskKind::Pass(w) = t.kind {
            if w.chunk == 0 {
                match w.pass {
                    Pass::Forward => forward.insert(w.micro_batch),
                    Pass::Backward => backward.insert(w.micro_batch),
                    Pass::WeightGrad => false,
                };
            }
        }
    }
    forward.len().max(backward.len()) as u32
}

/// Where a rank's time inside a fold went: seconds by category (`forward`, `backward`,
/// `weight-grad`, `optimizer`, `layer-comm` for a pass's in-layer collectives,
/// `comm-wait` for waiting on a transfer, `bubble`), in that order, and the transfers'
/// busy time on its communication lane.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Share {
    pub by_category: Vec<(&'static str, f64)>,
    pub comm_lane_busy: f64,
}

/// The categories a [`Share`] lists, in drawing order.
pub const SHARE_ORDER: [&str; 7] = [
    "forward",
    "backward",
    "weight-grad",
    "optimizer",
    "layer-comm",
    "comm-wait",
    "bubble",
];

impl Share {
    /// Compute, exposed communication and bubble, in seconds.
    pub fn split(&self) -> (f64, f64, f64) {
        let mut out = (0.0, 0.0, 0.0);
        for &(c, s) in &self.by_category {
            match c {
                "layer-comm" | "comm-wait" => out.1 += s,
                "bubble" => out.2 += s,
                _ => out.0 += s,
            }
        }
        out
    }
}

/// The category of a piece of a compute stream, as [`Share`] names it.
pub fn piece_category(sg: &StepGraph, p: &Piece) -> &'static str {
    match (p.what, p.task) {
        (Use::Compute, Some(n)) => category(&sg.graph[n].kind),
        (Use::Compute, None) => "forward",
        (Use::Comm, Some(_)) => "layer-comm",
        (Use::Comm, None) => "comm-wait",
        (Use::Bubble, _) => "bubble",
    }
}

/// Seconds of `[start, end]` that `[a, b]` covers.
fn overlap(a: f64, b: f64, start: f64, end: f64) -> f64 {
    (b.min(end) - a.max(start)).max(0.0)
}

/// The share of `[fold.start, fold.end]` on one rank, from its compute stream (see
/// [`crate::breakdown::compute_stream`]).
pub fn share(sg: &StepGraph, run: &Run, rank: u32, stream: &[Piece], fold: &Fold) -> Share {
    let mut by_category: Vec<(&'static str, f64)> = SHARE_ORDER.iter().map(|&c| (c, 0.0)).collect();
    for p in stream {
        let s = overlap(p.start, p.end, fold.start, fold.end);
        if s > 0.0 {
            let c = piece_category(sg, p);
            if let Some(slot) = by_category.iter_mut().find(|(name, _)| *name == c) {
                slot.1 += s;
            }
        }
    }
    // The transfers on the lane, merged: several under way at once count once.
    let g = &sg.graph;
    let mut busy: Vec<(f64, f64)> = g
        .node_indices()
        .filter(|&n| g[n].rank == rank && g[n].is_comm() && run.finished[n.index()])
        .map(|n| (run.start[n.index()], run.end[n.index()]))
        .filter(|&(a, b)| overlap(a, b, fold.start, fold.end) > 0.0)
        .collect();
    busy.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut comm_lane_busy = 0.0;
    let mut reach = fold.start;
    for (a, b) in busy {
        let a = a.max(reach);
        let b = b.min(fold.end);
        if b > a {
            comm_lane_busy += b - a;
            reach = b;
        }
    }
    Share {
        by_category,
        comm_lane_busy,
    }
}

/// A time axis with folds: the stretches outside the folds share the width at one scale,
/// each fold takes `fold_width`.
#[derive(Clone, Debug)]
pub struct Axis {
    /// (start time, end time, start x, end x, folded).
    pub segments: Vec<(f64, f64, f64, f64, bool)>,
}

impl Axis {
    /// `folds` in time order, inside `[0, span]`.
    pub fn new(span: f64, folds: &[Fold], width: f64, fold_width: f64) -> Axis {
        let folded: f64 = folds.iter().map(Fold::len).sum();
        let drawn = (span - folded).max(1e-12);
        let fold_width = fold_width.min(width / (2 * folds.len() + 1) as f64);
        let scale = (width - fold_width * folds.len() as f64) / drawn;
        let mut segments = Vec::new();
        let (mut t, mut x) = (0.0, 0.0);
        for f in folds {
            if f.start > t {
                let w = (f.start - t) * scale;
                segments.push((t, f.start, x, x + w, false));
                x += w;
            }
            segments.push((f.start, f.end, x, x + fold_width, true));
            x += fold_width;
            t = f.end;
        }
        segments.push((t, span.max(t), x, width, false));
        Axis { segments }
    }

    /// The x of time `t` (inside a fold, in proportion across its band).
    pub fn x(&self, t: f64) -> f64 {
        let s = self
            .segments
            .iter()
            .find(|s| t <= s.1)
            .or(self.segments.last())
            .expect("an axis has a segment");
        let (t0, t1, x0, x1, _) = *s;
        if t1 <= t0 {
            return x0;
        }
        x0 + (x1 - x0) * ((t - t0) / (t1 - t0)).clamp(0.0, 1.0)
    }

    /// The drawn (unfolded) parts of `[a, b]`, as x ranges.
    pub fn visible(&self, a: f64, b: f64) -> Vec<(f64, f64)> {
        self.segments
            .iter()
            .filter(|s| !s.4 && b > s.0 && a < s.1)
            .map(|&(t0, t1, x0, x1, _)| {
                let k = if t1 > t0 { (x1 - x0) / (t1 - t0) } else { 0.0 };
                (x0 + (a.max(t0) - t0) * k, x0 + (b.min(t1) - t0) * k)
            })
            .collect()
    }

    /// Seconds per unit of x in the drawn parts.
    pub fn seconds_per_x(&self) -> f64 {
        self.segments
            .iter()
            .find(|s| !s.4 && s.3 > s.2)
            .map_or(0.0, |s| (s.1 - s.0) / (s.3 - s.2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(start: f64, end: f64) -> Fold {
        Fold {
            start,
            end,
            micro_batches: 0,
        }
    }

    #[test]
    fn an_axis_without_folds_is_linear() {
        let a = Axis::new(10.0, &[], 1000.0, 100.0);
        assert_eq!(a.x(0.0), 0.0);
        assert_eq!(a.x(5.0), 500.0);
        assert_eq!(a.x(10.0), 1000.0);
        assert_eq!(a.visible(2.0, 3.0), vec![(200.0, 300.0)]);
    }

    #[test]
    fn a_fold_takes_its_band_and_the_rest_shares_one_scale() {
        // 10 s, of which 2..9 folded into 100 px: 3 s drawn over 900 px.
        let a = Axis::new(10.0, &[fold(2.0, 9.0)], 1000.0, 100.0);
        assert!((a.x(2.0) - 600.0).abs() < 1e-9);
        assert!((a.x(9.0) - 700.0).abs() < 1e-9);
        assert!(
            (a.x(5.5) - 650.0).abs() < 1e-9,
            "inside the band, in proportion"
        );
        assert!((a.x(10.0) - 1000.0).abs() < 1e-9);
        assert!((a.seconds_per_x() - 3.0 / 900.0).abs() < 1e-12);
        // A task across the fold shows its two ends; one inside it shows nothing.
        let v = a.visible(1.0, 9.5);
        assert_eq!(v.len(), 2);
        assert!((v[0].0 - 300.0).abs() < 1e-9 && (v[0].1 - 600.0).abs() < 1e-9);
        assert!((v[1].0 - 700.0).abs() < 1e-9 && (v[1].1 - 850.0).abs() < 1e-9);
        assert!(a.visible(3.0, 8.0).is_empty());
    }

    #[test]
    fn many_folds_leave_room_for_what_is_drawn() {
        let a = Axis::new(10.0, &[fold(1.0, 4.0), fold(5.0, 9.0)], 100.0, 80.0);
        // Each band is at most a fifth of the width (2 folds, 3 drawn stretches).
        let bands: Vec<f64> = a
            .segments
            .iter()
            .filter(|s| s.4)
            .map(|s| s.3 - s.2)
            .collect();
        assert_eq!(bands, vec![20.0, 20.0]);
        assert!((a.x(10.0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_share_splits_into_compute_comm_and_bubble() {
        let s = Share {
            by_category: vec![
                ("forward", 1.0),
                ("backward", 2.0),
                ("layer-comm", 0.5),
                ("comm-wait", 0.25),
                ("bubble", 0.25),
            ],
            comm_lane_busy: 0.0,
        };
        assert_eq!(s.split(), (3.0, 0.75, 0.25));
    }
}
