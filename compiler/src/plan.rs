//! The resolved plan: every value typed, in base units, defaults applied, holes marked.
//!
//! This is what the cost model, the solver, the emitters and the runtime read. Nothing here
//! refers back to syntax except [`Origins`], which remembers where each value was written so
//! that validation can point at it.

use std::collections::HashMap;

use planc_lang::{FileId, Span};
use serde::Serialize;

macro_rules! enumeration {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub const NAMES: &'static [&'static str] = &[$($text),*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

enumeration!(Precision { Fp32 = "fp32", Fp16 = "fp16", Bf16 = "bf16", Fp8 = "fp8" });
enumeration!(LinkKind { Nvlink = "nvlink", Pcie = "pcie", Infiniband = "infiniband", Roce = "roce", Ethernet = "ethernet" });
enumeration!(Mlp { Gelu = "gelu", Swiglu = "swiglu" });
enumeration!(Norm { Layernorm = "layernorm", Rmsnorm = "rmsnorm" });
enumeration!(Position { Learned = "learned", Rope = "rope" });
enumeration!(Optimizer { Adam = "adam", Adamw = "adamw", Sgd = "sgd" });
enumeration!(
    /// How attention is computed: `flash` fuses softmax into the matrix products and never
    /// stores the s×s scores; `standard` materialises them (Megatron-LM before 2023).
    Attention { Flash = "flash", Standard = "standard" }
);
enumeration!(
    /// `zb_h1` (extension): zero-bubble ZB-H1, 1F1B with weight gradients deferred into the
    /// cool-down (Qi et al. 2023).
    Schedule { Gpipe = "gpipe", OneFOneB = "1f1b", Interleaved = "interleaved", ZeroBubble = "zb_h1" }
);
enumeration!(Recompute { None = "none", Selective = "selective", Full = "full" });
enumeration!(Offload { None = "none", Optimizer = "optimizer", Params = "params" });
enumeration!(Framework { Megatron = "megatron", Deepspeed = "deepspeed", Torch = "torch" });
enumeration!(Scheduler { Slurm = "slurm", K8s = "k8s", None = "none" });
enumeration!(Objective { Throughput = "throughput", Memory = "memory" });

impl Precision {
    /// Bytes of one parameter or activation element stored at this precision. fp8 training
    /// keeps bf16 weights and activations and casts on the fly.
    pub fn bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Fp16 | Precision::Bf16 | Precision::Fp8 => 2.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Link {
    pub kind: LinkKind,
    /// Bytes per second, one direction: per GPU inside a node, per NIC across nodes.
    pub bandwidth: f64,
    /// Seconds.
    pub latency: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gpu {
    pub name: String,
    pub memory: f64,
    pub hbm_bandwidth: f64,
    /// Dense peak FLOP/s per precision; a precision absent here is unsupported.
    pub peak: Vec<(Precision, f64)>,
    pub gemm_efficiency: f64,
    pub memory_efficiency: f64,
    pub intra_node: Link,
}

impl Gpu {
    pub fn peak(&self, p: Precision) -> Option<f64> {
        self.peak.iter().find(|(q, _)| *q == p).map(|(_, f)| *f)
    }
}

/// Nodes of one kind. A uniform cluster has one group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeGroup {
    pub name: String,
    pub nodes: u64,
    pub gpus_per_node: u64,
    pub gpu: Gpu,
    pub intra_node: Link,
}

impl NodeGroup {
    pub fn gpus(&self) -> u64 {
        self.nodes * self.gpus_per_node
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InterNode {
    pub link: Link,
    pub nics_per_node: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    pub name: String,
    pub groups: Vec<NodeGroup>,
    pub inter_node: Option<InterNode>,
}

impl Cluster {
    pub fn world_size(&self) -> u64 {
        self.groups.iter().map(NodeGroup::gpus).sum()
    }

    pub fn nodes(&self) -> u64 {
        self.groups.iter().map(|g| g.nodes).sum()
    }

    /// GPUs per node where every group agrees (the usual case), else the smallest.
    pub fn gpus_per_node(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.gpus_per_node)
            .min()
            .unwrap_or(1)
    }

    pub fn is_mixed(&self) -> bool {
        self.groups.len() > 1
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn_hidden: u64,
    pub vocab: u64,
    pub seq_len: u64,
    pub mlp: Mlp,
    pub norm: Norm,
    pub position: Position,
    pub bias: bool,
    pub tied_embeddings: bool,
    pub experts: u64,
    pub top_k: u64,
}

impl Model {
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads.max(1)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Train {
    pub global_batch: u64,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub tokens: Option<f64>,
    pub attention: Attention,
}

/// One fully chosen parallel layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Parallel {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub cp: u64,
    pub ep: u64,
    pub vpp: u64,
    pub micro_batch: u64,
    pub schedule: Schedule,
    pub sequence_parallel: bool,
    pub zero: u64,
    pub recompute: Recompute,
    pub offload: Offload,
}

impl Parallel {
    pub fn grad_accum(&self, global_batch: u64) -> u64 {
        global_batch / (self.dp * self.micro_batch).max(1)
    }
}

/// A `parallel` attribute as written: a value, `auto`, or candidates for `solve`.
#[derive(Clone, Debug, PartialEq)]
pub enum Hole<T> {
    Fixed(T),
    Auto,
    Candidates(Vec<T>),
}

impl<T: Clone> Hole<T> {
    pub fn fixed(&self) -> Option<T> {
        match self {
            Hole::Fixed(v) => Some(v.clone()),
            _ => None,
        }
    }

    pub fn is_hole(&self) -> bool {
        !matches!(self, Hole::Fixed(_))
    }
}

/// The `parallel` block with its holes, before a layout is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct ParallelSpec {
    pub tp: Hole<u64>,
    pub pp: Hole<u64>,
    pub dp: Hole<u64>,
    pub cp: Hole<u64>,
    pub ep: Hole<u64>,
    pub vpp: Hole<u64>,
    pub micro_batch: Hole<u64>,
    pub schedule: Hole<Schedule>,
    pub sequence_parallel: Hole<bool>,
    pub zero: Hole<u64>,
    pub recompute: Hole<Recompute>,
    pub offload: Hole<Offload>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Job {
    pub name: Option<String>,
    pub framework: Framework,
    pub scheduler: Scheduler,
    pub partition: Option<String>,
    pub time_limit: Option<f64>,
    pub image: Option<String>,
    pub checkpoint_dir: Option<String>,
    pub retries: u64,
    pub entrypoint: Option<String>,
    pub env: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Search {
    pub objective: Objective,
    /// Fraction of device memory kept free.
    pub memory_headroom: f64,
    pub top: u64,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            objective: Objective::Throughput,
            memory_headroom: 0.10,
            top: 5,
        }
    }
}

/// Where each value of the plan was written, for diagnostics. Keys are
/// `("parallel", "tp")`; a block's own header is under its kind with attribute `""`.
#[derive(Clone, Debug, Default)]
pub struct Origins {
    map: HashMap<(String, String), (FileId, Span)>,
}

impl Origins {
    pub fn insert(&mut self, block: &str, attr: &str, file: FileId, span: Span) {
        self.map
            .entry((block.to_string(), attr.to_string()))
            .or_insert((file, span));
    }

    /// The attribute's value if written, else the block's header, else nothing.
    pub fn of(&self, block: &str, attr: &str) -> Option<(FileId, Span)> {
        self.map
            .get(&(block.to_string(), attr.to_string()))
            .or_else(|| self.map.get(&(block.to_string(), String::new())))
            .copied()
    }

    /// Whether the user wrote this attribute (rather than it taking its default).
    pub fn written(&self, block: &str, attr: &str) -> bool {
        self.map
            .contains_key(&(block.to_string(), attr.to_string()))
    }
}

/// A plan whose blocks resolved; `parallel` may still have holes.
#[derive(Clone, Debug)]
pub struct PlanSpec {
    pub cluster: Cluster,
    pub model: Model,
    pub train: Train,
    pub parallel: ParallelSpec,
    pub job: Option<Job>,
    pub search: Search,
    pub origins: Origins,
}

/// A plan with a chosen layout: what the cost model takes.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub cluster: Cluster,
    pub model: Model,
    pub train: Train,
    pub parallel: Parallel,
}
