//! Per-rank programs: what each pipeline rank issues, in order — passes to run, messages
//! to send and receive, collectives to join, the optimizer step.
//!
//! A program is what a runtime would execute and what the deadlock checker reads. Ranks
//! here are pipeline ranks: the tensor-, context- and data-parallel ranks of one stage run
//! the same program (symmetry), so a 1024-GPU plan with pp = 16 has 16 programs.

use serde::Serialize;

use crate::schedule::{order, Pass, ScheduleKind, Work};

pub type Rank = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Payload {
    Activation,
    Gradient,
}

/// A pipeline message, named by what it carries and the virtual stage that consumes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Message {
    pub payload: Payload,
    pub micro_batch: u32,
    pub virtual_stage: u32,
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.payload {
            Payload::Activation => "activation",
            Payload::Gradient => "gradient",
        };
        write!(
            f,
            "{what} of micro-batch {} for virtual stage {}",
            self.micro_batch, self.virtual_stage
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CollectiveOp {
    /// Data-parallel gradient reduction of a chunk, in `buckets` pieces that start as the
    /// backward pass produces them.
    GradReduce { chunk: u32, buckets: u32 },
    /// Data-parallel (ZeRO) parameter gather of a chunk, needed by its next pass, in
    /// `buckets` pieces that the pass consumes in order.
    ParamGather { chunk: u32, buckets: u32 },
    /// The all-reduce of tied embedding gradients between the first and last rank.
    EmbeddingSync,
}

impl std::fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollectiveOp::GradReduce { chunk, .. } => {
                write!(f, "gradient reduction of chunk {chunk}")
            }
            CollectiveOp::ParamGather { chunk, .. } => {
                write!(f, "parameter gather of chunk {chunk}")
            }
            CollectiveOp::EmbeddingSync => f.write_str("embedding gradient all-reduce"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum GroupKind {
    /// The data-parallel group of one pipeline rank (its replicas run the same program).
    DataParallel(Rank),
    /// First and last pipeline rank, which both hold the tied embedding.
    Embedding,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Instr {
    Run(Work),
    Send { to: Rank, message: Message },
    Recv { from: Rank, message: Message },
    Collective { group: GroupKind, op: CollectiveOp },
    Optimizer,
}

#[derive(Clone, Debug, Serialize)]
pub struct Program {
    pub schedule: ScheduleKind,
    pub micro_batches: u32,
    pub ranks: Vec<Vec<Instr>>,
    /// Pipeline sends proceed while the next pass computes (Megatron-LM's
    /// `overlap_p2p_comm`); otherwise a rank waits for its sends before its next pass.
    pub overlap_p2p: bool,
}

impl Program {
    pub fn pipeline_ranks(&self) -> u32 {
        self.ranks.len() as u32
    }

    pub fn chunks(&self) -> u32 {
        self.schedule.chunks()
    }

    pub fn members(&self, group: GroupKind) -> Vec<Rank> {
        match group {
            GroupKind::DataParallel(r) => vec![r],
            GroupKind::Embedding => {
                let last = self.pipeline_ranks() - 1;
                if last == 0 {
                    vec![0]
                } else {
                    vec![0, last]
                }
            }
        }
    }
}

/// How data parallelism and the optimizer show up in the program.
#[derive(Clone, Copy, Debug)]
pub struct StepOptions {
    /// 0–3 as in the plan; 0 means plain all-reduce.
    pub zero: u8,
    /// Data-parallel size > 1 (otherwise no data-parallel collectives).
    pub data_parallel: bool,
    /// Gradient buckets per chunk for the final reduction.
    pub buckets: u32,
    /// The embedding is tied and split between the first and last rank.
    pub tied_embedding: bool,
    /// Gradients are reduced during backward, as each chunk's last backward produces them;
    /// otherwise every chunk's reduction waits for the end of the step's backward passes
    /// (Megatron-LM before `--overlap-grad-reduce`, DeepSpeed's pipeline engine).
    pub overlap_grad_reduce: bool,
    /// See [`Program::overlap_p2p`].
    pub overlap_p2p: bool,
}

impl Default for StepOptions {
    /// No data parallelism; what current Megatron-LM overlaps (gradient reduction, and
    /// nothing of a non-interleaved pipeline's transfers).
    fn default() -> Self {
        StepOptions {
            zero: 0,
            data_parallel: false,
            buckets: 1,
            tied_embedding: false,
            overlap_grad_reduce: true,
            overlap_p2p: false,
        }
    }
}

/// Lowers a schedule into per-rank programs with Megatron's message flow: virtual stage
/// v = chunk · ranks + rank, activations flow to v + 1 and gradients to v − 1.
pub fn build(kind: ScheduleKind, ranks: u32, micro_batches: u32, opts: StepOptions) -> Program {
    let chunks = kind.chunks();
    let stages = ranks * chunks;
    let rank_of = |v: u32| v % ranks;
    let mut programs = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let works = order(kind, ranks, rank, micro_batches);
        let mut out = Vec::with_capacity(works.len() * 3 + 8);
        let dp = GroupKind::DataParallel(rank);
        if opts.data_parallel && opts.zero == 1 {
            // The distributed optimizer gathers updated parameters at the start of the
            // step, overlapped with the first forward passes.
            for chunk in 0..chunks {
                out.push(Instr::Collective {
                    group: dp,
                    op: CollectiveOp::ParamGather {
                        chunk,
                        buckets: opts.buckets.max(1),
                    },
                });
            }
        }
        // The last pass of each chunk that produces weight gradients ends its reduction.
        let grad_pass = if kind.splits_backward() {
            Pass::WeightGrad
        } else {
            Pass::Backward
        };
        let last_grad_work: Vec<Option<usize>> = (0..chunks)
            .map(|c| {
                works
                    .iter()
                    .rposition(|w| w.chunk == c && w.pass == grad_pass)
            })
            .collect();
        for (i, work) in works.iter().enumerate() {
            let v = work.chunk * ranks + rank;
            let mb = work.micro_batch;
            let zero3 = opts.data_parallel && opts.zero >= 3;
            if zero3 && work.pass != Pass::WeightGrad {
                out.push(Instr::Collective {
                    group: dp,
                    op: CollectiveOp::ParamGather {
                        chunk: work.chunk,
                        buckets: opts.buckets.max(1),
                    },
                });
            }
            match work.pass {
                Pass::Forward => {
                    if v > 0 {
                        let message = Message {
                            payload: Payload::Activation,
                            micro_batch: mb,
                            virtual_stage: v,
                        };
                        out.push(Instr::Recv {
                            from: rank_of(v - 1),
                            message,
                        });
                    }
                    out.push(Instr::Run(*work));
                    if v + 1 < stages {
                        let message = Message {
                            payload: Payload::Activation,
                            micro_batch: mb,
                            virtual_stage: v + 1,
                        };
                        out.push(Instr::Send {
                            to: rank_of(v + 1),
                            message,
                        });
                    }
                }
                Pass::Backward => {
                    if v + 1 < stages {
                        let message = Message {
                            payload: Payload::Gradient,
                            micro_batch: mb,
                            virtual_stage: v,
                        };
                        out.push(Instr::Recv {
                            from: rank_of(v + 1),
                            message,
                        });
                    }
                    out.push(Instr::Run(*work));
                    if v > 0 {
                        let message = Message {
                            payload: Payload::Gradient,
                            micro_batch: mb,
                            virtual_stage: v - 1,
                        };
                        out.push(Instr::Send {
                            to: rank_of(v - 1),
                            message,
                        });
                    }
                }
                Pass::WeightGrad => out.push(Instr::Run(*work)),
            }
            if opts.data_parallel && work.pass == grad_pass {
                let per_micro_batch = opts.zero >= 2;
                let overlapped_end =
                    opts.overlap_grad_reduce && last_grad_work[work.chunk as usize] == Some(i);
                if per_micro_batch || overlapped_end {
                    let buckets = opts.buckets.max(1);
                    out.push(Instr::Collective {
                        group: dp,
                        op: CollectiveOp::GradReduce {
                            chunk: work.chunk,
                            buckets,
                        },
                    });
                }
            }
        }
        if opts.data_parallel && opts.zero < 2 && !opts.overlap_grad_reduce {
            // After the last backward pass of the step, chunk by chunk in the order their
            // backward passes finished.
            let mut order: Vec<(usize, u32)> = (0..chunks)
                .filter_map(|c| last_grad_work[c as usize].map(|i| (i, c)))
                .collect();
            order.sort_unstable();
            for (_, chunk) in order {
                out.push(Instr::Collective {
                    group: dp,
                    op: CollectiveOp::GradReduce {
                        chunk,
                        buckets: opts.buckets.max(1),
                    },
                });
            }
        }
        if opts.tied_embedding && ranks > 1 && (rank == 0 || rank == ranks - 1) {
            out.push(Instr::Collective {
                group: GroupKind::Embedding,
                op: CollectiveOp::EmbeddingSync,
            });
        }
        out.push(Instr::Optimizer);
        programs.push(out);
    }
    Program {
        schedule: kind,
        micro_batches,
        ranks: programs,
        overlap_p2p: opts.overlap_p2p,
    }
}

/// Activation sets a rank's program holds at once: a micro-batch's chunk takes one at its
/// forward or at the receive before it (whichever comes first) and gives it back after
/// its backward.
pub fn live_sets(instrs: &[Instr], pp: usize) -> usize {
    let mut live = std::collections::HashSet::new();
    let mut most = 1;
    for i in instrs {
        match i {
            Instr::Recv { message, .. } => {
                live.insert((message.micro_batch, message.virtual_stage as usize / pp));
            }
            Instr::Run(w) if w.pass == Pass::Forward => {
                live.insert((w.micro_batch, w.chunk as usize));
            }
            Instr::Run(w) if w.pass == Pass::Backward => {
                live.remove(&(w.micro_batch, w.chunk as usize));
            }
            _ => {}
        }
        most = most.max(live.len());
    }
    most
}
