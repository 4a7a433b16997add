//! Where this rank sits in the plan's layout, and the communicators it joins.
//!
//! Ranks are placed as `planc check` places them: tensor-parallel innermost, then data,
//! then pipeline. Every rank creates every group's communicator in one order (NCCL's
//! creation is collective), and keeps the one of each kind it is in.

use std::sync::Arc;

use planc_compiler::plan::Plan;

use super::model::Stage;
use super::stop;
use crate::device::dist::{self, Comm, World};
use crate::error::RunError;

/// This rank's coordinates in the layout.
#[derive(Clone, Copy, Debug)]
pub struct Ranks {
    pub tp: usize,
    pub dp: usize,
    pub pp: usize,
    pub tp_rank: usize,
    pub dp_rank: usize,
    pub pp_rank: usize,
    /// Sequence parallelism over the tensor-parallel group (only with tp > 1).
    pub sp: bool,
}

impl Ranks {
    pub fn of(plan: &Plan, world: &World) -> Ranks {
        let (tp, dp) = (plan.parallel.tp as usize, plan.parallel.dp as usize);
        let pp = plan.parallel.pp.max(1) as usize;
        Ranks {
            tp,
            dp,
            pp,
            tp_rank: world.rank % tp,
            dp_rank: (world.rank / tp) % dp,
            pp_rank: world.rank / (tp * dp),
            sp: plan.parallel.sequence_parallel && tp > 1,
        }
    }
}

/// The communicators of this rank: every one it joined (for the watchdog), and the one of
/// each kind it is in.
pub struct Comms {
    pub all: Vec<Arc<Comm>>,
    pub tp: Option<Arc<Comm>>,
    pub dp: Option<Arc<Comm>>,
    pub pp: Option<Arc<Comm>>,
    /// The first and last stage's, which both hold a tied embedding.
    pub emb: Option<Arc<Comm>>,
}

impl Comms {
    /// Joins the layout's groups; `fingerprint` is what must be the same on every rank for
    /// their programs to match. One rank joins none.
    pub fn open(
        world: &World,
        r: &Ranks,
        tied: bool,
        stage: &Stage,
        fingerprint: &str,
    ) -> Result<Comms, RunError> {
        let (tp, dp, pp) = (r.tp, r.dp, r.pp);
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        if tp > 1 {
            for g in dist::tensor_parallel_groups(world.size, tp) {
                groups.push(("tensor-parallel", g));
            }
        }
        if dp > 1 {
            for g in dist::data_parallel_groups(world.size, tp, dp) {
                groups.push(("data-parallel", g));
            }
        }
        let pipeline_groups = dist::pipeline_groups(world.size, tp, dp);
        if pp > 1 {
            for g in &pipeline_groups {
                groups.push(("pipeline", g.clone()));
            }
            if tied {
                // The first and last stage both hold the tied embedding.
                for g in &pipeline_groups {
                    groups.push(("embedding", vec![g[0], g[pp - 1]]));
                }
            }
        }
        let all: Vec<Arc<Comm>> = if world.size > 1 {
            dist::communicators(world, &groups, fingerprint)?
                .into_iter()
                .map(Arc::new)
                .collect()
        } else {
            Vec::new()
        };
        // One communicator of each kind this rank is in, in the order of `groups`.
        let mut kinds = all.iter().cloned();
        let tpc = if tp > 1 { kinds.next() } else { None };
        let dpc = if dp > 1 { kinds.next() } else { None };
        let ppc = if pp > 1 { kinds.next() } else { None };
        let emb = if pp > 1 && tied && (stage.first || stage.last) {
            kinds.next()
        } else {
            None
        };
        Ok(Comms {
            all,
            tp: tpc,
            dp: dpc,
            pp: ppc,
            emb,
        })
    }

    /// The communicator of a summed axis (`stop::scalar_sums` names only axes whose group
    /// exists).
    pub fn of_axis(&self, axis: stop::Axis) -> &Comm {
        match axis {
            stop::Axis::Tensor => &self.tp,
            stop::Axis::Pipeline => &self.pp,
            stop::Axis::Data => &self.dp,
        }
        .as_deref()
        .expect("a group for every summed axis")
    }
}
