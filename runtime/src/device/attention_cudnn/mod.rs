//! cuDNN's fused flash attention for `train.attention = flash`: on GPUs and shapes cuDNN
//! takes (bf16 or fp16, head sizes a multiple of 8 up to 256, Ampere or newer, libcudnn 9
//! loadable) the forward and backward run as cuDNN operation graphs (`graph`) planned and
//! executed through its backend API (`backend`) on planc's stream; everywhere else, and
//! when `PLANC_CUDNN_ATTENTION=off`, planc's own kernels (`attention`) run, after a
//! one-line note saying why.
//!
//! The graphs read planc's buffers where they are: q, k, v as the qkv split leaves them
//! ([b, h, t, d], a grouped key/value head read once, at its group's first query head,
//! through strides that skip the others), o and dO in the merged [b, t, h·d] layout,
//! dq/dk/dv where `Grads` says (a group's whole dk and dv at its first query head; the
//! other heads are neither written nor cleared, and the merge reads only the first),
//! forward's logsumexp in the `lse` buffer and backward's D_i in
//! `Grads::dd`. Backward is deterministic by default (cuDNN's dP-workspace backward:
//! engines noted non-deterministic are refused); `PLANC_CUDNN_ATTENTION=nondeterministic`
//! takes the fp32-accumulator backward instead, whose dq sums in a varying order.

pub mod backend;
pub mod graph;

use std::sync::Arc;

use cudarc::driver::{sys as dsys, CudaContext};
use planc_compiler::plan::Precision;

use super::cuda::{Buf, Gpu};
use super::heads::{Grads, Heads};
use crate::error::RunError;
use graph::{uid, Dtype, Flavor, Graph, Layout, Shape, Uid};

/// What `PLANC_CUDNN_ATTENTION` asks (a comma list): `auto` (the default: cuDNN where it
/// runs, else planc's kernels after a note), `off` (planc's kernels), `require` (an error
/// where cuDNN cannot run), `nondeterministic` (cuDNN's faster-to-plan fp32-accumulator
/// backward, whose results vary in the last bits from run to run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub mode: Mode,
    pub deterministic: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    Auto,
    Require,
}

pub const ENV: &str = "PLANC_CUDNN_ATTENTION";

impl Choice {
    pub fn parse(s: &str) -> Result<Choice, String> {
        let mut c = Choice {
            mode: Mode::Auto,
            deterministic: true,
        };
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "auto" | "on" => c.mode = Mode::Auto,
                "off" => c.mode = Mode::Off,
                "require" => c.mode = Mode::Require,
                "nondeterministic" => c.deterministic = false,
                "deterministic" => c.deterministic = true,
                other => {
                    return Err(format!(
                        "{ENV}={s}: `{other}` is not one of auto, off, require, \
                         deterministic, nondeterministic"
                    ))
                }
            }
        }
        Ok(c)
    }

    pub fn from_env() -> Result<Choice, RunError> {
        Choice::parse(&std::env::var(ENV).unwrap_or_default()).map_err(RunError::Usage)
    }
}

/// The storage type as the graphs name it; None for fp32, which cuDNN's fused attention
/// does not take.
pub fn dtype_of(p: Precision) -> Option<Dtype> {
    match p {
        Precision::Bf16 | Precision::Fp8 => Some(Dtype::Bf16),
        Precision::Fp16 => Some(Dtype::F16),
        Precision::Fp32 => None,
    }
}

/// Why cuDNN's fused attention does not take this shape on a GPU of compute capability
/// `cc` (major, minor), before asking cuDNN; None where it may (the compiler's rule, which
/// also decides where the memory plan counts cuDNN's workspace).
pub fn refusal(s: &Shape, cc: (i32, i32)) -> Option<String> {
    planc_compiler::cost::buffers::launch::cudnn_attention_refusal(
        s.h as usize,
        s.g as usize,
        s.d as usize,
        cc,
    )
}

fn round_up(n: usize) -> usize {
    n.div_ceil(256) * 256
}

/// A graph and cuDNN's plan for it.
type Planned = (Graph, backend::Plan);

/// Both graphs in one spelling, checked and planned.
fn plan_both(
    handle: &backend::Handle,
    shape: &Shape,
    layout: &Layout,
    deterministic: bool,
    flavor: Flavor,
) -> Result<(Planned, Planned), String> {
    let fg = graph::forward(shape, layout, flavor);
    let bg = graph::backward(shape, layout, deterministic, flavor);
    fg.check().map_err(|e| format!("forward graph: {e}"))?;
    bg.check().map_err(|e| format!("backward graph: {e}"))?;
    let fwd = backend::plan(handle, &fg, deterministic).map_err(|e| format!("forward: {e}"))?;
    let bwd = backend::plan(handle, &bg, deterministic).map_err(|e| format!("backward: {e}"))?;
    Ok(((fg, fwd), (bg, bwd)))
}

/// cuDNN's forward and backward plans for one shape and layout, with their workspace.
pub struct Sdpa {
    // Plans before the handle they were built on: fields drop in order.
    fwd: backend::Plan,
    bwd: backend::Plan,
    /// The tensors each graph reads and writes in memory or by value, by unique id.
    fwd_uids: Vec<Uid>,
    bwd_uids: Vec<Uid>,
    handle: backend::Handle,
    pub shape: Shape,
    pub layout: Layout,
    grads: (i64, i64, i64),
    pub deterministic: bool,
    /// The spelling of the graphs cuDNN took, and why it refused the ones before it.
    pub flavor: Flavor,
    pub refusals: Vec<String>,
    workspace: Buf,
    /// Bytes at the workspace's start that hold backward's fp32 dq accumulator (0 when
    /// deterministic); cuDNN's own workspace follows.
    accum: usize,
    scale: f32,
    neg_inf: f32,
    pub version: usize,
    _ctx: Arc<CudaContext>,
}

impl Sdpa {
    /// Device bytes this attention holds beside the engine's buffers: cuDNN's workspace
    /// (the largest of forward's and backward's plans) and the non-deterministic backward's
    /// dq accumulator.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.bytes
    }
}

impl Sdpa {
    /// Plans forward and backward for `shape` with dq, dk, dv at the (batch, head, row)
    /// strides `grads` (a [`Grads`]'), and allocates the workspace on `gpu`.
    pub fn new(
        gpu: &mut Gpu,
        shape: Shape,
        grads: (i64, i64, i64),
        deterministic: bool,
    ) -> Result<Sdpa, String> {
        let lib = backend::lib()?;
        gpu.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        let handle = backend::Handle::new(lib, gpu)?;
        let layout = Layout::planc(&shape, grads);
        let mut refusals = Vec::new();
        let mut planned = None;
        for flavor in Flavor::ALL {
            match plan_both(&handle, &shape, &layout, deterministic, flavor) {
                Ok(p) => {
                    planned = Some((flavor, p));
                    break;
                }
                Err(e) => refusals.push(format!("{flavor:?} spelling: {e}")),
            }
        }
        let Some((flavor, ((fg, fwd), (bg, bwd)))) = planned else {
            return Err(refusals.join("; "));
        };
        let (b, h, t, d) = (
            shape.b as usize,
            shape.h as usize,
            shape.t as usize,
            shape.d as usize,
        );
        let accum = if deterministic {
            0
        } else {
            round_up(b * h * t * d * 4)
        };
        let bytes = accum + round_up(fwd.report.workspace.max(bwd.report.workspace));
        let workspace = gpu.alloc(bytes).map_err(|e| e.to_string())?;
        Ok(Sdpa {
            flavor,
            refusals,
            fwd,
            bwd,
            fwd_uids: fg.supplied(),
            bwd_uids: bg.supplied(),
            handle,
            shape,
            layout,
            grads,
            deterministic,
            workspace,
            accum,
            scale: 1.0 / (shape.d as f32).sqrt(),
            // Older cuDNN wants the lowest finite value for masked scores (the frontend's
            // choice before 9.10).
            neg_inf: if lib.version < 91000 {
                f32::MIN
            } else {
                f32::NEG_INFINITY
            },
            version: lib.version,
            _ctx: gpu.ctx.clone(),
        })
    }

    /// Device bytes this holds (its workspace), counted in the memory plan's scratch.
    pub fn bytes(&self) -> usize {
        self.workspace.bytes
    }

    /// Frees the workspace (the probes of `planc calibrate`; a run keeps it to the end).
    pub fn release(self, gpu: &mut Gpu) -> Result<(), RunError> {
        let ws = self.workspace;
        drop(self);
        gpu.free(ws)
    }

    /// One line for logs: cuDNN's version, the engines taken, the workspace.
    pub fn describe(&self) -> String {
        let refused = if self.refusals.is_empty() {
            String::new()
        } else {
            format!(" (refused first: {})", self.refusals.join("; "))
        };
        format!(
            "cuDNN {} ({}) {}, {:?} spelling{refused}; forward: {}; backward: {}",
            backend::version_string(self.version),
            backend::lib().map(|l| l.path.as_str()).unwrap_or("?"),
            if self.deterministic {
                "deterministic"
            } else {
                "non-deterministic"
            },
            self.flavor,
            self.fwd.report,
            self.bwd.report
        )
    }

    fn check_heads(&self, hd: &Heads) -> Result<(), RunError> {
        let s = &self.shape;
        if (hd.b, hd.h, hd.t, hd.d) != (s.b as usize, s.h as usize, s.t as usize, s.d as usize) {
            return Err(RunError::Cuda(format!(
                "cuDNN attention planned for {s:?} was called with {hd:?}"
            )));
        }
        Ok(())
    }

    /// Runs a plan with the graph's supplied tensors at `at(uid)`.
    fn run(
        &self,
        plan: &backend::Plan,
        uids: &[Uid],
        at: impl Fn(Uid) -> backend::Pointer,
        ws: u64,
    ) -> Result<(), RunError> {
        let ptrs: Vec<backend::Pointer> = uids.iter().map(|&u| at(u)).collect();
        plan.execute(&self.handle, uids, &ptrs, ws as backend::Pointer)
            .map_err(|e| RunError::Cuda(format!("cuDNN attention: {e}")))
    }

    fn host(&self, u: Uid) -> backend::Pointer {
        let one = &1.0f32;
        let p: *const f32 = match u {
            uid::SCALE => &self.scale,
            uid::NEG_INF => &self.neg_inf,
            _ => one,
        };
        p as backend::Pointer
    }

    /// o = softmax(QKᵀ/√d, causal)·V into `o` [b, t, h·d] and each row's logsumexp into
    /// `lse` (fp32 [b·h·t]).
    pub fn forward(
        &self,
        hd: Heads,
        o: Buf,
        lse: Buf,
        (q, k, v): (Buf, Buf, Buf),
    ) -> Result<(), RunError> {
        self.check_heads(&hd)?;
        let dev = |b: Buf| b.ptr as backend::Pointer;
        self.run(
            &self.fwd,
            &self.fwd_uids,
            |u| match u {
                uid::Q => dev(q),
                uid::K => dev(k),
                uid::V => dev(v),
                uid::O => dev(o),
                uid::STATS => dev(lse),
                other => self.host(other),
            },
            self.workspace.ptr + self.accum as u64,
        )
    }

    /// dq, dk, dv into `gr` from the output `o` and its gradient `d_o` ([b, t, h·d]).
    pub fn backward(
        &self,
        gpu: &Gpu,
        hd: Heads,
        gr: &Grads,
        (q, k, v): (Buf, Buf, Buf),
        lse: Buf,
        (o, d_o): (Buf, Buf),
    ) -> Result<(), RunError> {
        self.check_heads(&hd)?;
        if gr.strides() != self.grads {
            return Err(RunError::Cuda(format!(
                "cuDNN attention planned for gradient strides {:?}, called with {:?}",
                self.grads,
                gr.strides()
            )));
        }
        if self.accum > 0 && self.version < 90600 {
            // cuDNN before 9.6 expects the accumulator zeroed by its caller.
            gpu.zero(Buf {
                ptr: self.workspace.ptr,
                bytes: self.accum,
            })?;
        }
        let dev = |b: Buf| b.ptr as backend::Pointer;
        self.run(
            &self.bwd,
            &self.bwd_uids,
            |u| match u {
                uid::Q => dev(q),
                uid::K => dev(k),
                uid::V => dev(v),
                uid::O => dev(o),
                uid::D_O => dev(d_o),
                uid::STATS => dev(lse),
                uid::DQ => dev(gr.dq),
                uid::DK => dev(gr.dk),
                uid::DV => dev(gr.dv),
                uid::SOFTMAX_SUM => dev(gr.dd),
                uid::DQ_ACCUM => dev(self.workspace),
                other => self.host(other),
            },
            self.workspace.ptr + self.accum as u64,
        )
    }
}

/// The GPU's compute capability.
pub fn compute_capability(gpu: &Gpu) -> (i32, i32) {
    use dsys::CUdevice_attribute as At;
    let get = |a| gpu.ctx.attribute(a).unwrap_or(0);
    (
        get(At::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        get(At::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    )
}

/// cuDNN's attention for `shape` as `choice` asks, or None where planc's kernels run: the
/// reason is returned for the caller's one-line note. An error only under `require`.
pub fn plan_for(
    gpu: &mut Gpu,
    precision: Precision,
    shape: (usize, usize, usize, usize, usize),
    grads: &Grads,
    choice: Choice,
) -> Result<Result<Sdpa, String>, RunError> {
    let (b, h, g, t, d) = shape;
    let mut attempt = || -> Result<Sdpa, String> {
        if choice.mode == Mode::Off {
            return Err(format!("{ENV}=off"));
        }
        let x = dtype_of(precision).ok_or(
            "fp32 attention runs planc's kernels (cuDNN's fused attention takes bf16 and fp16)",
        )?;
        let s = Shape {
            b: b as i64,
            h: h as i64,
            g: g as i64,
            t: t as i64,
            d: d as i64,
            x,
        };
        if let Some(why) = refusal(&s, compute_capability(gpu)) {
            return Err(format!("cuDNN's fused attention does not run here: {why}"));
        }
        Sdpa::new(gpu, s, grads.strides(), choice.deterministic)
            .map_err(|e| format!("cuDNN's fused attention is not available: {e}"))
    };
    let got = attempt();
    match (&got, choice.mode) {
        (Err(why), Mode::Require) => Err(RunError::Usage(format!("{ENV}=require: {why}"))),
        _ => Ok(got),
    }
}

/// Whether the note that planc's kernels run instead was printed by this process.
static NOTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// cuDNN's attention for `shape` (batch, query heads, key/value heads, sequence, head size)
/// as `PLANC_CUDNN_ATTENTION` asks, or None where planc's kernels run: quietly for fp32
/// (by design) and under `off`, else after a one-line note on stderr (once a process, and
/// only where `note`). An error only under `require`.
pub fn choose(
    gpu: &mut Gpu,
    precision: Precision,
    shape: (usize, usize, usize, usize, usize),
    grads: &Grads,
    note: bool,
) -> Result<Option<Sdpa>, RunError> {
    let choice = Choice::from_env()?;
    if choice.mode == Mode::Off || (dtype_of(precision).is_none() && choice.mode != Mode::Require) {
        return Ok(None);
    }
    match plan_for(gpu, precision, shape, grads, choice)? {
        Ok(sdpa) => Ok(Some(sdpa)),
        Err(why) => {
            if note && !NOTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprintln!("note: attention runs planc's kernels: {why}");
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_reads_comma_lists_and_refuses_unknown_words() {
        let c = Choice::parse("").unwrap();
        assert_eq!((c.mode, c.deterministic), (Mode::Auto, true));
        let c = Choice::parse("require, nondeterministic").unwrap();
        assert_eq!((c.mode, c.deterministic), (Mode::Require, false));
        assert_eq!(Choice::parse("off").unwrap().mode, Mode::Off);
        let e = Choice::parse("fast").unwrap_err();
        assert!(
            e.contains("`fast`") && e.contains("nondeterministic"),
            "{e}"
        );
    }

    #[test]
    fn shapes_cudnn_cannot_take_are_refused_with_the_reason() {
        let s = Shape {
            b: 1,
            h: 8,
            g: 2,
            t: 64,
            d: 128,
            x: Dtype::Bf16,
        };
        assert_eq!(refusal(&s, (9, 0)), None);
        assert!(refusal(&s, (7, 5)).unwrap().contains("7.5"));
        assert!(refusal(&Shape { d: 100, ..s }, (9, 0))
            .unwrap()
            .contains("100"));
        assert!(refusal(&Shape { d: 512, ..s }, (9, 0)).is_some());
        assert!(refusal(&Shape { g: 3, ..s }, (9, 0))
            .unwrap()
            .contains("evenly"));
        assert_eq!(dtype_of(Precision::Fp32), None);
        assert_eq!(dtype_of(Precision::Bf16), Some(Dtype::Bf16));
    }

    #[test]
    fn versions_read_as_cudnn_numbers_them() {
        assert_eq!(backend::version_string(91000), "9.10.0");
        assert_eq!(backend::version_string(90602), "9.6.2");
        assert_eq!(backend::version_string(8907), "8.9.7");
    }
}
