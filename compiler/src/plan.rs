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
enumeration!(
    /// The type of the gradient buffer or of the data-parallel reduction
    /// (`parallel.grad_dtype`, `parallel.reduce_dtype`).
    GradDtype { Fp32 = "fp32", Bf16 = "bf16", Fp16 = "fp16" }
);

impl GradDtype {
    pub fn bytes(self) -> f64 {
        match self {
            GradDtype::Fp32 => 4.0,
            GradDtype::Bf16 | GradDtype::Fp16 => 2.0,
        }
    }
}
enumeration!(
    /// The type of the optimizer's state (`parallel.optimizer_dtype`): fp32 master weights
    /// and moments; fp32 moments with the master weights kept as the 16 bits a bf16 weight
    /// lacks (`fp32_remainders`); or moments in bf16 and no master copy (`bf16`).
    OptimizerDtype { Fp32 = "fp32", Fp32Remainders = "fp32_remainders", Bf16 = "bf16" }
);
enumeration!(
    /// What the launch artifacts run: Megatron-LM, DeepSpeed, a torch script, `planc run`
    /// itself (planc's native runtime, which starts one process per GPU on its own), or
    /// torchtitan (PyTorch's FSDP2 + TP + PP + CP stack; priced as `torch`).
    Framework { Megatron = "megatron", Deepspeed = "deepspeed", Torch = "torch", Planc = "planc", Torchtitan = "torchtitan" }
);
enumeration!(
    /// Which kernels the framework runs a layer with (`job.kernels`): `fused`, the fused
    /// kernels of a site with Transformer Engine and apex (or planc's own); `eager`, the
    /// framework's unfused path, one PyTorch kernel per operation (`cost::eager`).
    Kernels { Fused = "fused", Eager = "eager" }
);
enumeration!(
    /// Whose fused attention kernel the framework runs (`job.attention_kernel`), where the
    /// plan says: FlashAttention-2 (`flash-attn`, PyTorch SDPA's flash backend), cuDNN's
    /// (Transformer Engine on Hopper), or FlashAttention in Triton (e.g. llm-foundry's
    /// `attn_impl: triton`).
    AttentionKernel { Flash2 = "flash2", Cudnn = "cudnn", Triton = "triton" }
);
enumeration!(Scheduler { Slurm = "slurm", K8s = "k8s", None = "none" });
enumeration!(
    /// Which flags `job.entrypoint` takes: planc's (the torchrun and DeepSpeed targets'
    /// contract, `targets/src/args.rs`), or Hugging Face `TrainingArguments`' for scripts built
    /// on its `Trainer` (DeepSpeed's config then as `--deepspeed FILE`).
    EntrypointArgs { Planc = "planc", HfTrainer = "hf_trainer" }
);
enumeration!(Objective { Throughput = "throughput", Memory = "memory", Cost = "cost" });

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
    /// Measured curves for this device (`cluster.profile`), used instead of the constants
    /// below where they cover an operation.
    #[serde(skip)]
    pub profile: Option<std::sync::Arc<crate::profile::Profile>>,
    pub name: String,
    pub memory: f64,
    pub hbm_bandwidth: f64,
    /// Dense peak FLOP/s per precision; a precision absent here is unsupported.
    pub peak: Vec<(Precision, f64)>,
    pub gemm_efficiency: f64,
    pub memory_efficiency: f64,
    pub intra_node: Link,
    /// CUDA compute capability (8.0 for A100); `None` for a plan's own `gpu`, which is
    /// taken to be current.
    pub compute_capability: Option<f64>,
    /// Bus bandwidth (bytes/s) a collective over two GPUs of one node reaches on large
    /// messages, where measured: small NVLink groups fall short of the eight-GPU figure.
    pub pair_bus_bandwidth: Option<f64>,
    /// What the FlashAttention-class kernel the frameworks run reaches on this device at
    /// 16-bit precision, where published: its rates are not a fixed fraction of the
    /// products' (see `catalog/gpus.toml`).
    pub flash_attention: Option<FlashRates>,
    /// What cuDNN's fused flash attention reaches on this device at 16-bit precision, where
    /// measured: the kernel Transformer Engine runs on Hopper and later when both it and
    /// FlashAttention-2 apply (`cudnn_attention_*` in `catalog/gpus.toml`).
    pub cudnn_attention: Option<FlashRates>,
    /// The fraction of its burst rate a compute-bound kernel keeps on this device through
    /// hours of training, at the board's power limit (`sustained_clock` in
    /// `catalog/gpus.toml`, with its measurement); 1 where not measured. Memory-bound
    /// kernels keep theirs: the HBM clock does not drop.
    pub sustained_clock: f64,
    /// fp8 products: the share of the fp8 peak a large product reaches in a burst, and the
    /// share of that it keeps at the power limit, where measured (`fp8_gemm_efficiency`,
    /// `fp8_sustained_clock` in `catalog/gpus.toml`); else the 16-bit figures.
    pub fp8_gemm_efficiency: Option<f64>,
    pub fp8_sustained_clock: Option<f64>,
    /// Bytes per second, one direction, of the GPU's link to its host (PCIe, after line
    /// encoding), where known: offloaded state crosses it (`cost::offload`).
    pub host_link: Option<f64>,
    /// Bytes per second of host memory per GPU (the node's CPU memory bandwidth over its
    /// GPUs), where known: an offloaded optimizer steps at it (`cost::offload`).
    pub host_memory_bandwidth: Option<f64>,
    /// How many GPUs one NVLink (or Infinity Fabric) fabric joins at `intra_node`'s
    /// bandwidth (8 on an HGX board, 72 in a GB200 NVL72 rack), where known.
    pub nvlink_domain: Option<u64>,
    /// How much slower this plan's compute-bound and memory-bound kernels run than the
    /// profile's bursts timed them, at the board's power limit: the profile's power curve
    /// at how hard the plan's step drives the tensor cores (`cost::power::settle`). `None`
    /// until a plan is settled, and where its profile measured no curve.
    #[serde(skip)]
    pub power_slowdown: Option<(f64, f64)>,
}

/// A fused attention kernel's FLOP/s at long sequences (head size 128), counted as
/// FlashAttention's benchmarks count them: the causal forward's half of the square, and a
/// backward of 2.5 times the forward's FLOPs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FlashRates {
    pub forward: f64,
    pub backward: f64,
}

impl Gpu {
    pub fn peak(&self, p: Precision) -> Option<f64> {
        self.peak.iter().find(|(q, _)| *q == p).map(|(_, f)| *f)
    }

    /// Whether fused (flash) attention kernels run on it: FlashAttention and cuDNN's fused
    /// attention need Ampere (compute capability 8.0) or newer.
    pub fn has_fused_attention(&self) -> bool {
        self.compute_capability.is_none_or(|cc| cc >= 8.0)
    }

    /// Before Ampere: NCCL's Volta tuning (lower LL bandwidth cap) applies.
    pub fn is_pre_ampere(&self) -> bool {
        !self.has_fused_attention()
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
    /// What one of its GPUs costs an hour: the group's own `price`, else `cluster.price`.
    pub price: Option<Price>,
}

/// Money per GPU-hour in one currency (`price = 2.49 USD/h`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Price {
    pub per_gpu_hour: f64,
    #[serde(serialize_with = "currency_code")]
    pub currency: planc_lang::units::Currency,
}

fn currency_code<S: serde::Serializer>(
    c: &planc_lang::units::Currency,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.code())
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
    /// `profile = "FILE"` as written, where it was written (loaded by `check`, which knows
    /// the file's folder).
    #[serde(skip)]
    pub profile: Option<(String, planc_lang::span::FileId, planc_lang::span::Span)>,
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

    /// What all its GPUs cost an hour, when every group has a price (resolve keeps them
    /// in one currency).
    pub fn price_per_hour(&self) -> Option<(f64, planc_lang::units::Currency)> {
        let currency = self.groups.first()?.price?.currency;
        self.groups
            .iter()
            .map(|g| g.price.map(|p| p.per_gpu_hour * g.gpus() as f64))
            .sum::<Option<f64>>()
            .map(|total| (total, currency))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    /// The width of one attention head: `hidden / heads` unless the model says otherwise
    /// (`model.head_dim`: Qwen3-32B's 64 heads of 128 on a hidden size of 5120).
    pub head_dim: u64,
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
    /// Inner size of each routed (and shared) expert's MLP; `ffn_hidden` unless the model
    /// gives its experts their own (DeepSeek-V3: 2048 beside a dense 18432).
    pub expert_ffn_hidden: u64,
    /// Experts every token runs besides its routed ones, each of `expert_ffn_hidden`
    /// (DeepSeek-V3: 1); Megatron-Core runs them as one MLP of their summed width.
    pub shared_experts: u64,
    /// The first layers whose MLP is dense (`ffn_hidden`) in an MoE model (DeepSeek-V3: 3).
    pub first_dense_layers: u64,
    /// Expert capacity as a multiple of the balanced load; `None`: dropless routing.
    pub capacity_factor: Option<f64>,
    /// The busiest expert-parallel rank's routed tokens over the mean, where the plan
    /// states a measured figure; `None`: the fluctuation of balanced routing.
    pub moe_imbalance: Option<f64>,
    /// Rope base frequency (`planc run`; the cost model does not depend on it).
    pub rope_theta: f64,
    /// Tokens a query attends in a windowed layer, itself included (Mistral 7B's 4096,
    /// GPT-OSS's 128); `None`: every layer attends the whole causal sequence.
    pub sliding_window: Option<u64>,
    /// With a window, every `N`th layer (the `N`th, `2N`th, ...) attends the whole sequence,
    /// as Megatron-Core's `window_attn_skip_freq` counts them; `None`: every layer is
    /// windowed.
    pub full_attention_every: Option<u64>,
}

impl Model {
    /// The query heads' width together, `heads × head_dim`: the attention's inner size,
    /// which is `hidden` only where a head is `hidden / heads` wide.
    pub fn attention_width(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// The key (or value) heads' width together, `kv_heads × head_dim`.
    pub fn kv_width(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    /// Layers that attend within `sliding_window`: all of them, or all but every
    /// `full_attention_every`-th; none without a window, or where it covers the sequence.
    pub fn windowed_layers(&self) -> u64 {
        match self.sliding_window {
            Some(w) if w < self.seq_len => {
                self.layers
                    - self
                        .full_attention_every
                        .map_or(0, |n| self.layers / n.max(1))
            }
            _ => 0,
        }
    }

    /// Keys a query of a `seq`-token sequence attends, on average over the layers, with the
    /// whole square counted as model FLOPs count it (Korthikanti et al.'s `s` keys a query
    /// in a full layer): `seq` in a full layer, the window in a windowed one.
    pub fn mean_key_span(&self, seq: f64) -> f64 {
        let w = self.sliding_window.map_or(seq, |w| (w as f64).min(seq));
        self.mean_over_layers(seq, w)
    }

    /// The mean over the layers of a figure that is `full` in a layer attending the whole
    /// sequence and `windowed` in a windowed one.
    pub fn mean_over_layers(&self, full: f64, windowed: f64) -> f64 {
        let layers = self.layers.max(1) as f64;
        let w = self.windowed_layers() as f64;
        (full * (layers - w) + windowed * w) / layers
    }

    pub fn is_moe(&self) -> bool {
        self.experts > 1
    }

    /// Layers whose MLP is a mixture of experts.
    pub fn moe_layers(&self) -> u64 {
        if self.is_moe() {
            self.layers.saturating_sub(self.first_dense_layers)
        } else {
            0
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Train {
    pub global_batch: u64,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub tokens: Option<f64>,
    pub attention: Attention,
    /// Attention and hidden dropout probability. Dropout keeps masks (and the dropped
    /// attention probabilities) for backward; without it those tensors do not exist.
    pub dropout: f64,
    /// What the step trains (`train.method`): every weight, or adapters or later layers
    /// beside frozen weights (`cost::method` prices it).
    pub method: TrainMethod,
    /// What `planc run` needs beyond the cost model: data, seed, schedule, optimizer constants.
    pub run: RunSettings,
}

enumeration!(
    /// `train.method`: `full` trains every weight; `lora` freezes every weight of the model
    /// and trains low-rank adapters beside some of the layers' matrices (Hu et al. 2021,
    /// arXiv 2106.09685); `frozen` freezes the embedding, the output layer and the first
    /// `frozen_layers` layers and trains the rest (LLaMA-Factory's `freeze` tuning).
    Method { Full = "full", Lora = "lora", Frozen = "frozen" }
);

enumeration!(
    /// A layer's weight matrix a LoRA adapter can sit beside (`train.lora_targets`): the
    /// attention's query, key, value and output projections, the MLP's gate, up and down
    /// projections (a GELU MLP has `up` and `down` only). Hugging Face's Llama names them
    /// `q_proj` … `down_proj`.
    LoraTarget { Q = "q", K = "k", V = "v", O = "o", Gate = "gate", Up = "up", Down = "down" }
);

/// What a step trains, with the method's own settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum TrainMethod {
    Full,
    Lora(Lora),
    Frozen {
        /// The first layers (from the embedding on) whose weights do not train.
        frozen_layers: u64,
    },
}

/// LoRA's settings: every adapted `in × out` matrix `W` gains `B·A`, `A` of `rank × in`
/// and `B` of `out × rank`, scaled by `alpha / rank`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lora {
    pub rank: u64,
    /// The scale's numerator (`lora_alpha`); priced nowhere, kept for the launch.
    pub alpha: f64,
    /// The adapted matrices of every layer, in [`LoraTarget::ALL`]'s order.
    pub targets: Vec<LoraTarget>,
}

impl TrainMethod {
    pub fn method(&self) -> Method {
        match self {
            TrainMethod::Full => Method::Full,
            TrainMethod::Lora(_) => Method::Lora,
            TrainMethod::Frozen { .. } => Method::Frozen,
        }
    }

    pub fn is_full(&self) -> bool {
        matches!(self, TrainMethod::Full)
    }

    pub fn lora(&self) -> Option<&Lora> {
        match self {
            TrainMethod::Lora(l) => Some(l),
            _ => None,
        }
    }

    /// Whether the embedding (and the output layer, the final norm and every norm of a
    /// frozen layer) train: under full training only. LoRA freezes all of them (PEFT adapts
    /// the named matrices only); `frozen` trains its layers' norms but not the ends
    /// (LLaMA-Factory's freeze tuning trains `freeze_extra_modules` only when named).
    pub fn trains_ends(&self) -> bool {
        self.is_full()
    }
}

enumeration!(LrSchedule { Constant = "constant", Cosine = "cosine" });

/// The training attributes of `docs/spec/run.md`, with its defaults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSettings {
    /// The token file as written, relative to the plan file; `None`: the synthetic corpus.
    pub data: Option<String>,
    pub seed: u64,
    pub steps: u64,
    /// `steps` was written (not the default): the run the report prices when `train.tokens`
    /// is absent.
    pub steps_written: bool,
    pub lr: f64,
    pub min_lr: f64,
    pub lr_schedule: LrSchedule,
    pub warmup_steps: u64,
    pub weight_decay: f64,
    pub grad_clip: f64,
    pub adam_beta1: f64,
    pub adam_beta2: f64,
    pub adam_eps: f64,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            data: None,
            seed: 1234,
            steps: 10,
            steps_written: false,
            lr: 3e-4,
            min_lr: 3e-5,
            lr_schedule: LrSchedule::Cosine,
            warmup_steps: 0,
            weight_decay: 0.1,
            grad_clip: 1.0,
            adam_beta1: 0.9,
            adam_beta2: 0.95,
            adam_eps: 1e-8,
        }
    }
}

/// Whether `planc run` takes the gradients' norm before a step's update: to clip them, and
/// under fp16 to find an overflow of the loss scale (whose step is skipped, not taken).
/// Without either the norm would be a pass over every gradient for nothing but the metrics
/// line (6.4 ms of GPT 6.6B's 195 ms step on an H200), so the step leaves it out, as
/// Megatron-LM does without `--clip-grad`, and the update flags non-finite gradients. The
/// runtime decides by it and the cost model prices planc's norm by it.
pub fn planc_takes_grad_norm(precision: Precision, grad_clip: f64) -> bool {
    grad_clip > 0.0 || precision == Precision::Fp16
}

/// Whether `planc run` applies a GELU MLP's activation inside its products (cuBLASLt's
/// epilogues: GELU and the bias as the up product writes, GELU's gradient as the down
/// product's input gradient is written), so that the activation makes no pass of its own
/// (the up product's bias gradient keeps its column sums). 16-bit training only: fp32
/// keeps planc's kernels (the numerics against `transformers` are pinned to them) and fp8
/// runs its products through its own casts. Only at hidden sizes up to
/// [`GELU_EPILOGUE_MAX_HIDDEN`]: the epilogue products are slower than cuBLAS's plain ones,
/// which pays where the passes saved are large next to the products (their bytes grow with
/// the MLP's width, the products' work with width times hidden). Measured on an H200: GPT-2
/// (hidden 768) 30.6 -> 30.2 ms a step, GPT 6.6B (hidden 4096) 188.2 -> 191.7 ms
/// (docs/measurements.md, 2026-11-29, twelfth session); between them unmeasured. The
/// runtime decides by it (and falls back to the kernels without libcublasLt); the cost
/// model prices planc's MLP by it.
pub fn planc_fuses_gelu(precision: Precision, mlp: Mlp, hidden: u64) -> bool {
    mlp == Mlp::Gelu
        && matches!(precision, Precision::Bf16 | Precision::Fp16)
        && hidden <= GELU_EPILOGUE_MAX_HIDDEN
}

/// The largest hidden size at which [`planc_fuses_gelu`] takes the epilogues: the measured
/// win (768) rounded up to the next power of two, short of the measured loss (4096).
pub const GELU_EPILOGUE_MAX_HIDDEN: u64 = 1024;

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
    /// Extension: transformer layers on the first pipeline stage (Megatron-LM's
    /// `--decoder-first-pipeline-num-layers`); `None` gives it the middle stages' share.
    pub first_stage_layers: Option<u64>,
    /// Extension: transformer layers on the last pipeline stage
    /// (`--decoder-last-pipeline-num-layers`); `None` gives it the middle stages' share.
    pub last_stage_layers: Option<u64>,
    /// Extension: data-parallel gradient reduction (and the distributed optimizer's
    /// parameter gather) overlapped with backward (and forward) passes, bucket by bucket, as
    /// Megatron-LM's `--overlap-grad-reduce`/`--overlap-param-gather` and PyTorch DDP do;
    /// `false`: after the last backward pass, all of it exposed (Megatron-LM before 2023,
    /// DeepSpeed's pipeline engine). Default true.
    pub overlap_grad_reduce: bool,
    /// Extension: pipeline sends and receives overlapped with the next pass (Megatron-LM's
    /// `--overlap-p2p-communication`, interleaved schedule only); `None`: the framework's
    /// default, on with the interleaved schedule and off otherwise. See
    /// [`Parallel::overlaps_p2p`].
    pub overlap_p2p: Option<bool>,
    /// Extension: the column-parallel products' backward collectives (the input's re-gather,
    /// the input gradient's all-reduce or reduce-scatter) run beside their own gradient
    /// products (Megatron-LM since 2021-09, Megatron-Core with Transformer Engine;
    /// `cost::tp_overlap`); `false`: the backward's collectives exposed, as the forward's.
    /// `None`: the framework's default, see [`Parallel::overlaps_tp_backward`].
    pub overlap_tp_backward: Option<bool>,
    /// Extension: each micro-batch's weight-gradient products accumulate straight into the
    /// fp32 gradient buffer (Megatron-LM's `--gradient-accumulation-fusion`, on by default
    /// for every precision since 07916bf245, 2022-09); `false`: they write a 16-bit
    /// gradient that a hook then adds into the buffer, one pass over the local gradients
    /// per micro-batch (Megatron-LM before that commit, unless gradients accumulated in
    /// fp32). Default true.
    pub grad_accumulation_fusion: bool,
    /// Extension: without sequence parallelism, each tensor-parallel rank sends its 1/tp
    /// slice of a pipeline transfer and the receivers all-gather the slices over the node's
    /// links (Megatron-LM's `scatter_gather_tensors_in_pipeline`, its default before
    /// Megatron-core's `p2p_communication.py` dropped it); `false`: every rank sends the
    /// whole activation it holds. Default false.
    pub scatter_gather_p2p: bool,
    /// Extension: the type of the gradient buffer (`parallel.grad_dtype`); `None`: the
    /// framework's default, see [`Plan::grad_bytes`].
    pub grad_dtype: Option<GradDtype>,
    /// Extension: the type the data-parallel reduction runs in (`parallel.reduce_dtype`);
    /// `None`: the gradient buffer's, see [`Plan::reduce_bytes`].
    pub reduce_dtype: Option<GradDtype>,
    /// Extension: the type of the optimizer's state (`parallel.optimizer_dtype`); `None`:
    /// fp32, every framework's default, see [`Plan::optimizer_state_bytes`].
    pub optimizer_dtype: Option<OptimizerDtype>,
}

/// Why `layers` cannot be split over a layout's pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// Even split: pp × vpp does not divide the layers.
    NotDivisible,
    /// `first_stage_layers` or `last_stage_layers` with pp = 1.
    UnevenWithoutPipeline,
    /// `first_stage_layers`/`last_stage_layers` with vpp > 1, and the other stages' share
    /// (`middle` layers each) does not split into `vpp` equal chunks.
    UnevenChunks { middle: u64, vpp: u64 },
    /// The stages not fixed by `first_stage_layers`/`last_stage_layers` (`stages` of them)
    /// cannot share the `rest` layers evenly with at least one each; `rest` is `None` when
    /// the fixed ends alone exceed the model.
    UnevenRest { rest: Option<u64>, stages: u64 },
}

impl Parallel {
    /// One GPU, every option at its default: a base for layouts built field by field and
    /// for rules that do not depend on the layout.
    pub fn neutral() -> Parallel {
        Parallel {
            tp: 1,
            pp: 1,
            dp: 1,
            cp: 1,
            ep: 1,
            vpp: 1,
            micro_batch: 1,
            schedule: Schedule::OneFOneB,
            sequence_parallel: false,
            zero: 0,
            recompute: Recompute::None,
            offload: Offload::None,
            first_stage_layers: None,
            last_stage_layers: None,
            overlap_grad_reduce: true,
            overlap_p2p: None,
            overlap_tp_backward: None,
            grad_accumulation_fusion: true,
            scatter_gather_p2p: false,
            grad_dtype: None,
            reduce_dtype: None,
            optimizer_dtype: None,
        }
    }

    /// Whether pipeline transfers overlap the passes. Megatron-LM overlaps them only in its
    /// interleaved schedule (it turns `overlap_p2p_comm` off otherwise), so `true` with
    /// another schedule has no effect (validate warns, P0324).
    pub fn overlaps_p2p(&self) -> bool {
        self.schedule == Schedule::Interleaved && self.vpp > 1 && self.overlap_p2p.unwrap_or(true)
    }

    /// Whether the column-parallel products' backward collectives run beside their gradient
    /// products: as written, else Megatron-LM's default (its async tensor-parallel
    /// communication, on unless `--no-async-tensor-model-parallel-allreduce`, and
    /// Transformer Engine's layers under Megatron-Core); DeepSpeed's pipeline engine,
    /// PyTorch's tensor parallelism and planc's runtime issue them in order.
    pub fn overlaps_tp_backward(&self, framework: Framework) -> bool {
        self.overlap_tp_backward
            .unwrap_or(framework == Framework::Megatron)
    }

    pub fn grad_accum(&self, global_batch: u64) -> u64 {
        global_batch / (self.dp * self.micro_batch).max(1)
    }

    /// Whether the plan sets the layers of an end stage itself.
    pub fn is_uneven(&self) -> bool {
        self.first_stage_layers.is_some() || self.last_stage_layers.is_some()
    }

    /// Layers of each stage that `first_stage_layers`/`last_stage_layers` do not fix: the
    /// rest shared evenly, as Megatron-LM splits them. Never panics on a split that
    /// [`Parallel::split_error`] refuses: the solver's explanation costs the memory of
    /// layouts before any rule has rejected them.
    pub fn middle_stage_layers(&self, layers: u64) -> u64 {
        if !self.is_uneven() || self.pp <= 1 {
            return layers / self.pp.max(1);
        }
        let fixed = self.first_stage_layers.unwrap_or(0) + self.last_stage_layers.unwrap_or(0);
        let stages = self.pp - self.fixed_ends();
        layers.saturating_sub(fixed) / stages.max(1)
    }

    /// Transformer layers held by pipeline stage `stage` (all its virtual chunks together).
    /// The one place the split is decided: memory, time, the simulator and the launch
    /// flags all ask here.
    pub fn stage_layers(&self, layers: u64, stage: u64) -> u64 {
        if self.pp > 1 {
            if stage == 0 {
                if let Some(f) = self.first_stage_layers {
                    return f;
                }
            }
            if stage == self.pp - 1 {
                if let Some(l) = self.last_stage_layers {
                    return l;
                }
            }
        }
        self.middle_stage_layers(layers)
    }

    /// Transformer layers of model chunk `chunk` (0-based, `vpp` per stage) of stage
    /// `stage`. Evenly split stages give every chunk the same share. An end stage whose
    /// layers do not split evenly into its chunks keeps its lighter chunks outermost, next to
    /// the embedding (first stage, first chunks) or the output layer and loss (last stage,
    /// last chunks), as Llama 3 405B was trained: 7 layers over 8 chunks leave the first
    /// stage's first chunk with the embedding alone. Megatron-LM runs such a split through
    /// `--pipeline-model-parallel-layout`.
    pub fn chunk_layers(&self, layers: u64, stage: u64, chunk: u64) -> u64 {
        let vpp = self.vpp.max(1);
        let total = self.stage_layers(layers, stage);
        let (base, rem) = (total / vpp, total % vpp);
        let heavy = if stage == 0 && self.pp > 1 {
            // The last `rem` chunks take one more.
            chunk >= vpp - rem
        } else {
            chunk < rem
        };
        base + u64::from(heavy)
    }

    /// How many of the two end stages have their layers fixed by the plan.
    fn fixed_ends(&self) -> u64 {
        u64::from(self.first_stage_layers.is_some()) + u64::from(self.last_stage_layers.is_some())
    }

    /// Why `layers` do not split over the stages (and virtual chunks), if they do not.
    /// `validate` and the solver's rule both ask here, so they agree.
    pub fn split_error(&self, layers: u64) -> Option<SplitError> {
        if !self.is_uneven() {
            let chunks = self.pp * self.vpp;
            return (!layers.is_multiple_of(chunks.max(1))).then_some(SplitError::NotDivisible);
        }
        if self.pp <= 1 {
            return Some(SplitError::UnevenWithoutPipeline);
        }
        let fixed = self.first_stage_layers.unwrap_or(0) + self.last_stage_layers.unwrap_or(0);
        let stages = self.pp - self.fixed_ends();
        let rest = layers.checked_sub(fixed);
        let fits = match rest {
            None => false,
            Some(r) if stages == 0 => r == 0,
            Some(r) => r >= stages && r.is_multiple_of(stages),
        };
        if !fits {
            return Some(SplitError::UnevenRest { rest, stages });
        }
        // Interleaved: the ends split into chunks as they can (see `chunk_layers`), the
        // middle stages into equal chunks, as Megatron-LM requires of them.
        let middle = self.middle_stage_layers(layers);
        (self.vpp > 1 && stages > 0 && !middle.is_multiple_of(self.vpp)).then_some(
            SplitError::UnevenChunks {
                middle,
                vpp: self.vpp,
            },
        )
    }
}

/// First and last stage layer counts that split `layers` over `pp` stages when pp does not
/// divide them. The middle stages get ⌈layers / pp⌉ each and the two ends share the rest,
/// so the ends, which also hold the embedding and the output layer, are the lighter ones:
/// Llama 3 405B's 126 layers over 16 stages become 7 + 14 × 8 + 7, as Meta trained it.
/// When that leaves an end empty, the middle stages get ⌊layers / pp⌋ and the ends more.
/// `None` when pp divides the layers (nothing to fix) or exceeds them.
pub fn suggest_uneven(layers: u64, pp: u64) -> Option<(u64, u64)> {
    if pp < 2 || layers < pp || layers.is_multiple_of(pp) {
        return None;
    }
    [layers.div_ceil(pp), layers / pp]
        .into_iter()
        .filter_map(|middle| {
            let ends = layers.checked_sub(middle * (pp - 2))?;
            let first = ends / 2;
            (first >= 1).then_some((first, ends - first))
        })
        .next()
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
    /// As written (`None`: absent, or `auto`); the solver keeps a written count.
    pub first_stage_layers: Option<u64>,
    pub last_stage_layers: Option<u64>,
    /// `first_stage_layers = auto` / `last_stage_layers = auto`: the solver picks the count
    /// that evens the stages' work (`solve::balance`).
    pub auto_first_stage_layers: bool,
    pub auto_last_stage_layers: bool,
    /// Never holes: what the framework overlaps is a fact about it, not a layout choice.
    pub overlap_grad_reduce: bool,
    pub overlap_p2p: Option<bool>,
    pub overlap_tp_backward: Option<bool>,
    pub grad_accumulation_fusion: bool,
    pub scatter_gather_p2p: bool,
    pub grad_dtype: Option<GradDtype>,
    pub reduce_dtype: Option<GradDtype>,
    pub optimizer_dtype: Option<OptimizerDtype>,
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
    /// Extension: the flags the entrypoint takes.
    pub entrypoint_args: EntrypointArgs,
    /// Extension: a persistent volume (a Kubernetes PersistentVolumeClaim's name) mounted at
    /// `checkpoint_dir`.
    pub volume: Option<String>,
    /// Extension: the kernel path as written; `None` takes the framework's
    /// ([`PlanSpec::kernels`]).
    pub kernels: Option<Kernels>,
    /// Extension: the fused attention kernel as written; `None` takes the framework's.
    pub attention_kernel: Option<AttentionKernel>,
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

    /// Records where `block.attr` was written, replacing an earlier place (an override's
    /// block header replaces the imported one's).
    pub fn replace(&mut self, block: &str, attr: &str, file: FileId, span: Span) {
        self.map
            .insert((block.to_string(), attr.to_string()), (file, span));
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
    /// `cluster.nodes = [2, 4, 8]`: the cluster sizes `solve` chooses among, smallest first
    /// (empty: the cluster is as written). Until a layout is chosen `cluster` has the
    /// largest.
    pub node_candidates: Vec<u64>,
}

impl PlanSpec {
    /// The same plan on `nodes` nodes, its size no longer a hole.
    pub fn with_nodes(&self, nodes: u64) -> PlanSpec {
        let mut s = self.clone();
        if let Some(g) = s.cluster.groups.first_mut() {
            g.nodes = nodes;
        }
        s.node_candidates.clear();
        s
    }

    /// The cluster a layout runs on: with `nodes` a list, as many nodes as its
    /// tp × pp × cp × dp GPUs fill; else the cluster as written.
    pub fn cluster_for(&self, p: &Parallel) -> Cluster {
        let mut c = self.cluster.clone();
        if let (false, Some(g)) = (self.node_candidates.is_empty(), c.groups.first_mut()) {
            let world =
                p.tp.saturating_mul(p.pp)
                    .saturating_mul(p.cp)
                    .saturating_mul(p.dp);
            let gpn = g.gpus_per_node.max(1);
            if world.is_multiple_of(gpn) && self.node_candidates.contains(&(world / gpn)) {
                g.nodes = world / gpn;
            }
        }
        c
    }

    /// `job.framework`, Megatron-LM without a job block.
    pub fn framework(&self) -> Framework {
        self.job
            .as_ref()
            .map_or(Framework::Megatron, |j| j.framework)
    }

    /// The plan this spec describes with layout `parallel` (its holes filled): the one place
    /// a [`Plan`] takes the spec's job-level settings (framework, kernels, launch blocking).
    pub fn plan_with(&self, parallel: Parallel) -> Plan {
        Plan {
            cluster: self.cluster.clone(),
            model: self.model.clone(),
            train: self.train.clone(),
            kernels: self.kernels_for(&parallel),
            parallel,
            framework: self.framework(),
            launch_blocking: self.launch_blocking(),
            attention_kernel: self.job.as_ref().and_then(|j| j.attention_kernel),
        }
    }

    /// Whether `job.env` sets `CUDA_LAUNCH_BLOCKING` to anything but `0` (CUDA reads any
    /// other value as on); a value taken from the node's environment (`$NAME`) is not known
    /// here and counts as off.
    pub fn launch_blocking(&self) -> bool {
        self.job.as_ref().is_some_and(|j| {
            j.env
                .iter()
                .any(|(k, v)| k == LAUNCH_BLOCKING && launch_blocking_value(v))
        })
    }

    /// `job.kernels`, else what the framework runs as planc launches it with layout `p`:
    /// its own kernels under `planc`; Transformer Engine's under `megatron` (a site without
    /// it writes `eager`); under `torch` and `deepspeed` the eager path where planc writes
    /// the training script (no `job.entrypoint`) and that script runs the layout
    /// (transformers' modules uncompiled; data parallelism only), fused otherwise (a script
    /// of the job's own); eager under `torchtitan` (planc writes `compile.enable = false`).
    /// planc's runtime has one path: `eager` there is ignored (P0332).
    pub fn kernels_for(&self, p: &Parallel) -> Kernels {
        let Some(job) = self.job.as_ref() else {
            return Kernels::Fused;
        };
        if job.framework == Framework::Planc {
            return Kernels::Fused;
        }
        job.kernels.unwrap_or(match job.framework {
            // The script splits data only and has no experts (`targets/src/script.rs`).
            Framework::Torch | Framework::Deepspeed
                if job.entrypoint.is_none()
                    && [p.tp, p.pp, p.cp, p.ep] == [1; 4]
                    && self.model.experts <= 1 =>
            {
                Kernels::Eager
            }
            Framework::Torchtitan => Kernels::Eager,
            _ => Kernels::Fused,
        })
    }
}

/// A plan with a chosen layout: what the cost model takes.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub cluster: Cluster,
    pub model: Model,
    pub train: Train,
    pub parallel: Parallel,
    /// The framework that runs the plan (`job.framework`; Megatron-LM without a job
    /// block): where frameworks implement the same step differently, the cost differs.
    #[serde(skip)]
    pub framework: Framework,
    /// The kernels it runs a layer with ([`PlanSpec::kernels`]).
    #[serde(skip)]
    pub kernels: Kernels,
    /// Whether the job exports `CUDA_LAUNCH_BLOCKING` ([`PlanSpec::launch_blocking`]): every
    /// kernel launch then waits for its kernel (`cost::launch_blocking`).
    #[serde(skip)]
    pub launch_blocking: bool,
    /// The fused attention kernel the job states (`job.attention_kernel`); `None`: the
    /// framework's (`cost::ops::fused_kernel`).
    #[serde(skip)]
    pub attention_kernel: Option<AttentionKernel>,
}

/// The variable that makes every CUDA kernel launch synchronous.
pub const LAUNCH_BLOCKING: &str = "CUDA_LAUNCH_BLOCKING";

/// Whether a literal `CUDA_LAUNCH_BLOCKING` value turns it on: anything but `0` or nothing
/// (a `$` reference is the node's, unknown here).
pub fn launch_blocking_value(v: &str) -> bool {
    let v = v.trim();
    !(v.is_empty() || v == "0" || v.contains('$'))
}

impl Plan {
    pub fn framework(&self) -> Framework {
        self.framework
    }

    /// Whether the data-parallel reduction overlaps the backward passes: as the plan says,
    /// unless every launch blocks (`CUDA_LAUNCH_BLOCKING`), when the host waits for each
    /// collective before it launches the next product.
    pub fn overlaps_grad_reduce(&self) -> bool {
        self.parallel.overlap_grad_reduce && !self.launch_blocking
    }

    /// Whether the framework runs its unfused path (`job.kernels = eager`).
    pub fn eager(&self) -> bool {
        self.kernels == Kernels::Eager
    }

    /// Transformer layers on pipeline stage `stage` (see [`Parallel::stage_layers`]).
    pub fn stage_layers(&self, stage: u64) -> u64 {
        self.parallel.stage_layers(self.model.layers, stage)
    }

    /// Of the layers of model chunk `chunk` of stage `stage`, those with a dense MLP in an
    /// MoE model (`model.first_dense_layers`): the model's first layers, which fill the
    /// virtual stages in order (chunk 0 of stages 0, 1, …, then chunk 1 of each).
    pub fn chunk_dense_layers(&self, stage: u64, chunk: u64) -> u64 {
        if !self.model.is_moe() {
            return 0;
        }
        self.chunk_prefix(stage, chunk, self.model.first_dense_layers)
    }

    /// The model's index of the first layer of chunk `chunk` of stage `stage`, and the
    /// chunk's layer count: the chunks take the layers in order (chunk 0 of stages 0, 1, …,
    /// then chunk 1 of each).
    pub fn chunk_range(&self, stage: u64, chunk: u64) -> (u64, u64) {
        let (m, p) = (&self.model, &self.parallel);
        let mut start = 0;
        for c in 0..p.vpp.max(1) {
            for s in 0..p.pp.max(1) {
                let n = p.chunk_layers(m.layers, s, c);
                if (s, c) == (stage, chunk) {
                    return (start, n);
                }
                start += n;
            }
        }
        (start, 0)
    }

    /// Of chunk `chunk` of stage `stage`, the layers among the model's first `prefix`.
    pub fn chunk_prefix(&self, stage: u64, chunk: u64, prefix: u64) -> u64 {
        let (start, n) = self.chunk_range(stage, chunk);
        prefix.saturating_sub(start).min(n)
    }

    /// The first layers whose weights do not train (`train.method = frozen`); 0 otherwise.
    pub fn frozen_prefix(&self) -> u64 {
        match self.train.method {
            TrainMethod::Frozen { frozen_layers } => frozen_layers.min(self.model.layers),
            _ => 0,
        }
    }

    /// Of chunk `chunk` of stage `stage`, the frozen prefix's layers, as (MoE, dense).
    pub fn chunk_frozen_layers(&self, stage: u64, chunk: u64) -> (u64, u64) {
        let frozen = self.chunk_prefix(stage, chunk, self.frozen_prefix());
        let dense = if self.model.is_moe() {
            let both = self.frozen_prefix().min(self.model.first_dense_layers);
            self.chunk_prefix(stage, chunk, both)
        } else {
            frozen
        };
        (frozen - dense, dense)
    }

    /// Of stage `stage`'s layers, the frozen prefix's, as (MoE, dense).
    pub fn stage_frozen_layers(&self, stage: u64) -> (u64, u64) {
        (0..self.parallel.vpp.max(1))
            .map(|c| self.chunk_frozen_layers(stage, c))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Of stage `stage`'s layers, those with a dense MLP ([`Plan::chunk_dense_layers`]).
    pub fn stage_dense_layers(&self, stage: u64) -> u64 {
        (0..self.parallel.vpp.max(1))
            .map(|c| self.chunk_dense_layers(stage, c))
            .sum()
    }

    /// Of stage `stage`'s layers, those whose MLP is a mixture of experts.
    pub fn stage_moe_layers(&self, stage: u64) -> u64 {
        if self.model.is_moe() {
            self.stage_layers(stage) - self.stage_dense_layers(stage)
        } else {
            0
        }
    }

    /// Bytes of one gradient as the framework holds it between the backward passes and
    /// the optimizer: `parallel.grad_dtype` where written, else fp32 in every framework
    /// planc prices. Megatron-LM accumulates 16-bit training's gradients in an fp32
    /// `main_grad` buffer unless told `--grad-reduce-in-bf16` (`arguments.py`: bf16 sets
    /// `accumulate_allreduce_grads_in_fp32`; Megatron-Core's DDP sizes its buffer in that
    /// type); PyTorch's DDP and FSDP2 give a parameter's gradient its parameter's type, and
    /// under mixed precision the (sharded) parameters they update are fp32 (FSDP2's
    /// `MixedPrecisionPolicy` casts only the gathered copy); DeepSpeed's bf16 optimizer
    /// accumulates in fp32; planc's runtime keeps one flat fp32 buffer. NeMo's distributed
    /// fused Adam (`grad_sync_dtype: bf16` in its large recipes) is the common exception:
    /// such a plan writes `grad_dtype = bf16`.
    /// Bytes per parameter of the optimizer's state before sharding, as (master weights,
    /// moments): `parallel.optimizer_dtype`, fp32 unless written.
    ///
    /// - fp32: an fp32 master copy of 16-bit weights (none when the weights are fp32) and
    ///   fp32 moments (two for Adam, one for SGD), Megatron-LM's 12 bytes for Adam;
    /// - `fp32_remainders`: with bf16 weights, the master copy kept as the 16 bits a bf16
    ///   weight lacks, which the update joins to the weight (NeMo's distributed fused Adam
    ///   over bf16 models with an fp32 optimizer: `store_param_remainders`, set in NeMo's
    ///   `MegatronBaseModel.setup_optimization`, `megatron_base_model.py` at 8e3d65dc, which
    ///   its 2024 recipes used): 2 + 8 bytes;
    /// - `bf16`: moments in bf16 and no master copy, the update stepping the bf16 weights
    ///   themselves (NeMo's distributed fused Adam with `optim.dtype: bf16`, where
    ///   `store_params` is off because the optimizer's type equals the model's, ibid.;
    ///   Nemotron-4 340B's pre-training recipe, NeMo-Framework-Launcher 7c842fcd,
    ///   `conf/training/nemotron/nemotron_340b.yaml`): 0 + 4 bytes.
    pub fn optimizer_state_bytes(&self) -> (f64, f64) {
        let moments_fp32 = match self.train.optimizer {
            Optimizer::Adam | Optimizer::Adamw => 8.0,
            Optimizer::Sgd => 4.0,
        };
        let sixteen_bit = self.train.precision != Precision::Fp32;
        match self
            .parallel
            .optimizer_dtype
            .unwrap_or(OptimizerDtype::Fp32)
        {
            OptimizerDtype::Bf16 => (0.0, moments_fp32 / 2.0),
            OptimizerDtype::Fp32Remainders if self.train.precision == Precision::Bf16 => {
                (2.0, moments_fp32)
            }
            _ => (if sixteen_bit { 4.0 } else { 0.0 }, moments_fp32),
        }
    }

    pub fn grad_bytes(&self) -> f64 {
        match self.parallel.grad_dtype {
            Some(d) => d.bytes(),
            None => 4.0,
        }
    }

    /// Bytes of one gradient on the data-parallel link: `parallel.reduce_dtype` where
    /// written, else the buffer's type (Megatron-Core reduces its buffer in place;
    /// torchtitan's default `mixed_precision_reduce = "float32"` and Composer's `DEFAULT`
    /// FSDP mixed precision both reduce fp32 gradients of a bf16 forward).
    pub fn reduce_bytes(&self) -> f64 {
        match self.parallel.reduce_dtype {
            Some(d) => d.bytes(),
            None => self.grad_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clipping_and_fp16_loss_scaling_need_the_norm_before_the_update() {
        assert!(planc_takes_grad_norm(Precision::Bf16, 1.0));
        assert!(!planc_takes_grad_norm(Precision::Bf16, 0.0));
        assert!(!planc_takes_grad_norm(Precision::Fp32, 0.0));
        // fp16 finds its overflows by the norm, clipping or not.
        assert!(planc_takes_grad_norm(Precision::Fp16, 0.0));
    }

    fn layout(pp: u64, first: Option<u64>, last: Option<u64>) -> Parallel {
        Parallel {
            pp,
            first_stage_layers: first,
            last_stage_layers: last,
            ..Parallel::neutral()
        }
    }

    fn split(p: &Parallel, layers: u64) -> Vec<u64> {
        (0..p.pp).map(|s| p.stage_layers(layers, s)).collect()
    }

    #[test]
    fn the_even_split_gives_every_stage_the_same_layers() {
        assert_eq!(split(&layout(4, None, None), 32), vec![8; 4]);
        assert_eq!(split(&layout(1, None, None), 126), vec![126]);
        assert_eq!(
            layout(16, None, None).split_error(126),
            Some(SplitError::NotDivisible)
        );
        let interleaved = Parallel {
            vpp: 3,
            ..layout(4, None, None)
        };
        assert_eq!(interleaved.split_error(32), Some(SplitError::NotDivisible));
        assert_eq!(interleaved.split_error(36), None);
    }

    #[test]
    fn uneven_ends_take_their_layers_and_the_middle_shares_the_rest() {
        // Llama 3 405B as Meta trained it: 126 = 7 + 14 × 8 + 7.
        let p = layout(16, Some(7), Some(7));
        assert_eq!(p.split_error(126), None);
        let mut want = vec![8; 16];
        want[0] = 7;
        want[15] = 7;
        assert_eq!(split(&p, 126), want);
        assert_eq!(split(&p, 126).iter().sum::<u64>(), 126);
        // An unset end counts as a middle stage, as in Megatron-LM: (30 − 6) / 3 = 8.
        assert_eq!(split(&layout(4, Some(6), None), 30), vec![6, 8, 8, 8]);
        assert_eq!(split(&layout(4, None, Some(3)), 30), vec![9, 9, 9, 3]);
        // Two stages, both set: nothing in between.
        let two = layout(2, Some(10), Some(15));
        assert_eq!(two.split_error(25), None);
        assert_eq!(split(&two, 25), vec![10, 15]);
    }

    #[test]
    fn splits_that_do_not_add_up_are_refused() {
        let rest = |rest, stages| Some(SplitError::UnevenRest { rest, stages });
        assert_eq!(
            layout(4, Some(7), Some(8)).split_error(30),
            rest(Some(15), 2)
        );
        assert_eq!(
            layout(2, Some(10), Some(10)).split_error(25),
            rest(Some(5), 0)
        );
        assert_eq!(layout(3, Some(20), Some(20)).split_error(30), rest(None, 1));
        // Every other stage needs a layer: 4 left for 6 stages.
        assert_eq!(
            layout(8, Some(13), Some(13)).split_error(30),
            rest(Some(4), 6)
        );
        assert_eq!(
            layout(1, Some(3), None).split_error(30),
            Some(SplitError::UnevenWithoutPipeline)
        );
        // Interleaved: the middle stages' 9 layers do not make 2 equal chunks.
        let interleaved = Parallel {
            vpp: 2,
            schedule: Schedule::Interleaved,
            ..layout(4, Some(6), Some(6))
        };
        assert_eq!(
            interleaved.split_error(30),
            Some(SplitError::UnevenChunks { middle: 9, vpp: 2 })
        );
    }

    #[test]
    fn interleaved_uneven_ends_keep_their_light_chunks_outermost() {
        // Llama 3 405B as Meta trained it: 126 = 7 + 14 × 8 + 7 over 16 stages of 8
        // one-layer chunks; the first chunk of the first stage holds only the embedding, the
        // last chunk of the last stage only the output layer and the loss.
        let p = Parallel {
            vpp: 8,
            schedule: Schedule::Interleaved,
            ..layout(16, Some(7), Some(7))
        };
        assert_eq!(p.split_error(126), None);
        let chunks = |s: u64| {
            (0..8)
                .map(|c| p.chunk_layers(126, s, c))
                .collect::<Vec<_>>()
        };
        assert_eq!(chunks(0), [0, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(chunks(5), [1; 8]);
        assert_eq!(chunks(15), [1, 1, 1, 1, 1, 1, 1, 0]);
        // Ends of 10 layers over 4 chunks, the middle stages 12.
        let q = Parallel {
            vpp: 4,
            schedule: Schedule::Interleaved,
            ..layout(4, Some(10), Some(10))
        };
        assert_eq!(q.split_error(44), None);
        let chunks = |s: u64| (0..4).map(|c| q.chunk_layers(44, s, c)).collect::<Vec<_>>();
        assert_eq!(chunks(0), [2, 2, 3, 3]);
        assert_eq!(chunks(1), [3, 3, 3, 3]);
        assert_eq!(chunks(3), [3, 3, 2, 2]);
        for s in 0..4 {
            assert_eq!(chunks(s).iter().sum::<u64>(), q.stage_layers(44, s));
        }
        // Even splits give every chunk the same share.
        let even = Parallel {
            vpp: 3,
            schedule: Schedule::Interleaved,
            ..layout(4, None, None)
        };
        assert!((0..4).all(|s| (0..3).all(|c| even.chunk_layers(36, s, c) == 3)));
    }

    #[test]
    fn p2p_overlaps_only_under_the_interleaved_schedule() {
        let mut p = Parallel {
            vpp: 2,
            schedule: Schedule::Interleaved,
            ..layout(4, None, None)
        };
        assert!(p.overlaps_p2p());
        p.overlap_p2p = Some(false);
        assert!(!p.overlaps_p2p());
        let mut q = layout(4, None, None);
        assert!(!q.overlaps_p2p());
        q.overlap_p2p = Some(true);
        assert!(
            !q.overlaps_p2p(),
            "Megatron-LM turns it off without interleaving"
        );
    }

    #[test]
    fn stage_layers_never_panic_on_refused_splits() {
        // The solver's explanation costs layouts before rules reject them.
        let p = layout(3, Some(20), Some(20));
        assert_eq!(split(&p, 30), vec![20, 0, 20]);
        assert_eq!(layout(1, Some(3), Some(3)).stage_layers(30, 0), 30);
    }

    #[test]
    fn suggested_uneven_splits_are_valid_with_lighter_ends() {
        assert_eq!(suggest_uneven(126, 16), Some((7, 7)));
        assert_eq!(suggest_uneven(25, 2), Some((12, 13)));
        // ⌈17/16⌉ = 2 leaves nothing for the ends: the middle takes 1 and the ends 1 + 2.
        assert_eq!(suggest_uneven(17, 16), Some((1, 2)));
        assert_eq!(suggest_uneven(128, 16), None);
        assert_eq!(suggest_uneven(10, 16), None);
        assert_eq!(suggest_uneven(10, 1), None);
        for layers in 2..=130 {
            for pp in 2..=layers {
                let suggested = suggest_uneven(layers, pp);
                assert_eq!(
                    suggested.is_some(),
                    !layers.is_multiple_of(pp),
                    "{layers} over {pp}"
                );
                if let Some((f, l)) = suggested {
                    let p = layout(pp, Some(f), Some(l));
                    assert_eq!(p.split_error(layers), None, "{layers} over {pp}");
                }
            }
        }
    }
}
