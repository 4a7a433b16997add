//! One step's program executed on the engine: the passes in the program's order, each
//! micro-batch's chunk in an activation set from its forward (or the receive before it)
//! to its backward, the pipeline's sends and receives (consecutive ones as one NCCL group),
//! the data-parallel reduction of each layer's gradients as soon as the last backward has
//! produced them, and the tied embedding's gradient sum.

use std::collections::HashMap;

use planc_simulator::program::{CollectiveOp, Instr, Message, Payload};
use planc_simulator::schedule::Pass;

use super::data;
use super::engine::{Dir, Engine, HostBatch, Input};
use super::model::Tensor;
use super::program::Program;
use super::ranks::Comms;
use crate::device::cuda::Buf;
use crate::device::dist::{self};
use crate::device::trail;
use crate::error::RunError;
use planc_compiler::cost::kinds::WorkKind;

/// The micro-batches of the run, read and prepared on the host; the next step's first one
/// (all of them when it is replayed from a CUDA graph, which stages them all before it
/// starts) is prepared (`ahead`) while the GPU still runs the step before it.
pub struct Batches {
    pub source: data::Source,
    pub global_batch: usize,
    pub dp: usize,
    pub dp_rank: usize,
    pub micro_batch: usize,
    pub seq_len: usize,
    pub ahead: Vec<((u64, usize, usize), HostBatch)>,
}

impl Batches {
    fn prepare(&self, eng: &Engine, step: u64, j: usize, chunk: usize) -> HostBatch {
        let (inp, tgt) = self.source.micro_batch(
            step,
            self.global_batch,
            self.dp,
            self.dp_rank,
            self.micro_batch,
            j,
            self.seq_len,
        );
        eng.host_batch(chunk, &inp, &tgt)
    }

    /// Micro-batch `j` of `step` for chunk `chunk`: the one prepared ahead, if it is.
    fn take(&mut self, eng: &Engine, step: u64, j: usize, chunk: usize) -> HostBatch {
        self.ahead.retain(|(at, _)| at.0 >= step);
        match self
            .ahead
            .iter()
            .position(|(at, _)| *at == (step, j, chunk))
        {
            Some(i) => self.ahead.swap_remove(i).1,
            None => self.prepare(eng, step, j, chunk),
        }
    }

    /// Prepares micro-batch `j` of `step` for chunk `chunk` ahead, unless it is.
    fn ahead_of(&mut self, eng: &Engine, step: u64, j: usize, chunk: usize) {
        let at = (step, j, chunk);
        if !self.ahead.iter().any(|(a, _)| *a == at) {
            let b = self.prepare(eng, step, j, chunk);
            self.ahead.push((at, b));
        }
    }

    /// Prepares every micro-batch of `step` now, while the GPU runs the step before (a
    /// replayed step stages them all before it starts).
    pub fn prepare_step_ahead(&mut self, eng: &Engine, prog: &Program, step: u64) {
        for (j, chunk) in forwards(prog) {
            self.ahead_of(eng, step, j, chunk);
        }
    }

    /// Copies every micro-batch of `step` into the engine's device memory (`Engine::stage`),
    /// for a step whose program reads them there (`Inputs::Staged`).
    pub fn stage(&mut self, eng: &mut Engine, prog: &Program, step: u64) -> Result<(), RunError> {
        let all: Vec<(usize, HostBatch)> = forwards(prog)
            .map(|(j, chunk)| (j, self.take(eng, step, j, chunk)))
            .collect();
        eng.stage(&all)
    }

    /// Prepares `step`'s first micro-batch now, while the GPU is busy.
    pub fn prepare_ahead(&mut self, eng: &Engine, step: u64, first: Option<(usize, usize)>) {
        if let Some((j, chunk)) = first {
            self.ahead_of(eng, step, j, chunk);
        }
    }
}

/// The (micro-batch, chunk) of each forward pass of `prog`, in its order.
fn forwards(prog: &Program) -> impl Iterator<Item = (usize, usize)> + '_ {
    prog.instrs.iter().filter_map(|ins| match ins {
        Instr::Run(w) if w.pass == Pass::Forward => {
            Some((w.micro_batch as usize, w.chunk as usize))
        }
        _ => None,
    })
}

/// One pipeline operation waiting for its group: (send, peer, buffer, count, what).
type P2p = (bool, usize, Buf, usize, String);

/// The activation set of each (micro-batch, chunk) between its forward (or the receive
/// before it) and its backward.
struct Sets {
    of: HashMap<(usize, usize), usize>,
    free: Vec<usize>,
}

impl Sets {
    fn take(&mut self, key: (usize, usize)) -> usize {
        let free = &mut self.free;
        *self.of.entry(key).or_insert_with(|| {
            free.pop()
                .expect("the program keeps within its in-flight count")
        })
    }
}

/// What a step's program needs besides the engine.
pub struct StepIo<'a> {
    pub comms: &'a Comms,
    pub pp: usize,
    pub zero: u64,
    /// The step, counted from 0.
    pub step: u64,
    /// The loss gradient's scale: 1 / (tokens of the step), times the fp16 loss scale.
    pub dscale: f32,
}

/// Where the step's forward passes take their micro-batches from.
pub enum Inputs<'a> {
    /// Read and uploaded as each forward is queued.
    Host(&'a mut Batches),
    /// Already in the engine's device memory (`Batches::stage`), one copy per micro-batch
    /// (one chunk each: a rank without a pipeline).
    Staged,
}

/// Runs `prog` on `eng` from zeroed gradients and loss sums; returns the gradient ranges
/// already reduced over the data-parallel group (by layer, on the communication stream).
pub fn run(
    eng: &mut Engine,
    prog: &Program,
    io: &StepIo,
    mut inputs: Inputs,
) -> Result<Vec<(usize, usize)>, RunError> {
    eng.mark_step(WorkKind::Optimizer, "zero gradients")?;
    eng.zero_grads()?;
    eng.gpu.zero(eng.loss_sums)?;
    let mut sets = Sets {
        of: HashMap::new(),
        free: (0..prog.in_flight).rev().collect(),
    };
    let chunks = eng.shape.stage.chunks.len();
    let mut backwards = vec![0usize; chunks];
    let mut reduced = Vec::new();
    // Consecutive sends and receives go to NCCL as one group: a stage that sends its
    // activation and receives a gradient, facing one that does the reverse, must not wait
    // for the other's receive first.
    let mut p2p: Vec<P2p> = Vec::new();
    for ins in &prog.instrs {
        match ins {
            Instr::Send { to, message } => {
                p2p.push(send(eng, &sets, io.pp, *to as usize, message));
                continue;
            }
            Instr::Recv { from, message } => {
                p2p.push(recv(eng, &mut sets, io.pp, *from as usize, message));
                continue;
            }
            _ => flush(&mut p2p, eng, io)?,
        }
        match ins {
            Instr::Run(w) => {
                let (j, chunk) = (w.micro_batch as usize, w.chunk as usize);
                match w.pass {
                    Pass::Forward => {
                        let set = sets.take((j, chunk));
                        match &mut inputs {
                            Inputs::Host(batches) => {
                                let batch = batches.take(eng, io.step, j, chunk);
                                eng.forward(set, j, chunk, Input::Host(&batch), io.dscale)?;
                            }
                            Inputs::Staged => {
                                eng.forward(set, j, chunk, Input::Staged, io.dscale)?
                            }
                        }
                    }
                    Pass::Backward | Pass::WeightGrad => {
                        let set = sets
                            .of
                            .remove(&(j, chunk))
                            .expect("a backward pass follows its forward");
                        backwards[chunk] += 1;
                        let last = backwards[chunk] == prog.micro_batches;
                        backward(eng, io, (set, j, chunk), last, &mut reduced)?;
                        sets.free.push(set);
                    }
                }
            }
            Instr::Collective {
                op: CollectiveOp::EmbeddingSync,
                ..
            } => embedding_sum(eng, io)?,
            // The data-parallel reductions run in the backward's hook and after the
            // program; the optimizer after the program.
            _ => {}
        }
    }
    flush(&mut p2p, eng, io)?;
    Ok(reduced)
}

/// A send of `message` to `to`, from its set (or the engine's scratch).
fn send(eng: &Engine, sets: &Sets, pp: usize, to: usize, message: &Message) -> P2p {
    // The sender's virtual stage: before the consumer (activations) or after it
    // (gradients).
    let act = message.payload == Payload::Activation;
    let v = message.virtual_stage as usize;
    let mine = if act { v - 1 } else { v + 1 };
    let (j, chunk) = (message.micro_batch as usize, mine / pp);
    let set = match sets.of.get(&(j, chunk)) {
        Some(&s) => s,
        // A gradient leaves from the engine's scratch after its set is free.
        None => usize::MAX,
    };
    let (buf, count) = eng.p2p_buf(set, Dir::Send, message.payload, chunk);
    (true, to, buf, count, format!("the send of the {message}"))
}

/// A receive of `message` from `from`, into its set (taken here if its forward is yet to
/// come).
fn recv(eng: &Engine, sets: &mut Sets, pp: usize, from: usize, message: &Message) -> P2p {
    let (j, chunk) = (
        message.micro_batch as usize,
        message.virtual_stage as usize / pp,
    );
    let set = sets.take((j, chunk));
    let (buf, count) = eng.p2p_buf(set, Dir::Recv, message.payload, chunk);
    (
        false,
        from,
        buf,
        count,
        format!("the receive of the {message}"),
    )
}

/// Issues the waiting sends and receives as one NCCL group.
fn flush(p2p: &mut Vec<P2p>, eng: &mut Engine, io: &StepIo) -> Result<(), RunError> {
    if p2p.is_empty() {
        return Ok(());
    }
    // A span of its own: the stage's wait for its neighbour lands here, not in the
    // operation before it.
    eng.mark_step(WorkKind::PipelineWait, "pipeline transfer")?;
    if trail::is_on() {
        let names: Vec<&str> = p2p.iter().map(|m| m.4.as_str()).collect();
        trail::doing(format!("step {}: {}", io.step + 1, names.join(" and ")));
    }
    let c = io
        .comms
        .pp
        .as_ref()
        .expect("pipeline messages need the pipeline group");
    let ty = eng.activation_type();
    let stream = eng.gpu.stream as u64;
    dist::grouped(|| {
        for &(send, peer, buf, count, _) in p2p.iter() {
            if send {
                c.send(buf, count, ty, peer, stream)?;
            } else {
                c.recv(buf, count, ty, peer, stream)?;
            }
        }
        Ok(())
    })?;
    p2p.clear();
    Ok(())
}

/// The backward of (set, micro-batch, chunk). Without ZeRO, after the chunk's `last`
/// backward each layer's gradients are all-reduced as soon as they are produced, on the
/// communication stream, while backward goes on; their ranges join `reduced`.
fn backward(
    eng: &mut Engine,
    io: &StepIo,
    (set, j, chunk): (usize, usize, usize),
    last: bool,
    reduced: &mut Vec<(usize, usize)>,
) -> Result<(), RunError> {
    let comm_stream = eng.gpu.comm as u64;
    let mut hook = |e: &Engine, l: usize| -> Result<(), RunError> {
        if let (Some(c), true, 0) = (&io.comms.dp, last, io.zero) {
            let (lo, hi) = e.layer_range(l);
            trail::doing(format!(
                "step {}: the data-parallel reduction of layer {l}'s gradients",
                io.step + 1
            ));
            e.gpu.comm_after_compute()?;
            c.all_reduce_sum(e.grad.at(lo, 4), hi - lo, comm_stream)?;
            reduced.push((lo, hi));
        }
        Ok(())
    };
    eng.backward(set, j, chunk, &mut hook)
}

/// The tied embedding's gradient: the first stage's (input) and the last stage's (output
/// layer) summed, so both copies take the same update.
fn embedding_sum(eng: &mut Engine, io: &StepIo) -> Result<(), RunError> {
    let wte = eng.params.of(Tensor::Wte).map(|p| (p.offset, p.numel()));
    if let (Some(c), Some((offset, n))) = (&io.comms.emb, wte) {
        eng.mark_step(WorkKind::Communication, "embedding gradient sum")?;
        trail::doing(format!(
            "step {}: the tied embedding's gradient sum",
            io.step + 1
        ));
        c.all_reduce_sum(eng.grad.at(offset, 4), n, eng.gpu.stream as u64)?;
    }
    Ok(())
}
