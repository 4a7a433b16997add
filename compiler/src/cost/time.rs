//! Step time: operations timed on their device, summed per stage and micro-batch, and
//! composed by the pipeline schedule.
//!
//! Compute uses a roofline per kernel (FLOPs at the device's achievable matrix rate, or
//! bytes at its achievable memory bandwidth, whichever is slower, never faster than a
//! kernel launch). Tensor-, context- and expert-parallel collectives sit on the critical
//! path as Megatron-LM issues them; data-parallel gradient reduction overlaps the last
//! micro-batch's backward pass (`parallel.overlap_grad_reduce`, the default) or follows it.

use serde::Serialize;

use super::comm::{collective_time, p2p_time, Collective, Fabric, GroupShape};
use super::eager::Passes;
use super::memory::{shard_groups, stage_expert_params, stage_layer_params, stage_params};
use super::method::{layer_held_params, layer_trained_params, trains_weight};
use super::ops::{
    dense_layer_forward, embedding_forward, head_backward, head_forward, layer_bias_gradients,
    layer_forward, Group, Op, OpId, OpKind,
};
use super::params::embedding_params;
use super::standard_attention::{self, Core, Pass};
use crate::plan::{
    Attention, Framework, Gpu, LinkKind, Mlp, NodeGroup, Offload, OptimizerDtype, Plan, Precision,
    Recompute, Schedule,
};

/// A GPU cannot finish kernels faster than the host launches them.
const KERNEL_FLOOR_S: f64 = 4e-6;
/// A streaming kernel does not move bytes at the bandwidth of a large copy from its first
/// microsecond to its last: its blocks launch, the first DRAM round trips fill the memory
/// pipeline, and the last wave drains it. About 2 µs on Hopper, from `planc run` on an
/// H100: the 12.6 MB norms of GPT-3 175B at tp 8 took ~1.5× their bytes at the copy rate,
/// the 100 MB and larger kernels 1.1×.
const KERNEL_RAMP_S: f64 = 2e-6;
/// Matrix products are computed in 128×128 output tiles; ragged edges waste a tile.
const TILE: f64 = 128.0;
/// Per output tile, a product's pipelined main loop over k is preceded by filling its
/// shared-memory stages and followed by writing the tile: work that does not depend on k,
/// about as long as 64 of its k steps (a 3-4 stage pipeline of 16-32 wide k slices). Thin
/// products (k = hidden / tp, head_dim) lose that fraction: 4 % at k = 1536, 33 % at 128.
const TILE_K_OVERHEAD: f64 = 64.0;
/// Fused attention kernels reach this fraction of the device's matrix-product rate where
/// the catalog has no published rate of the kernel on the device (`Gpu::flash_attention`):
/// FlashAttention-2 on the Ampere parts it was written for.
const FLASH_EFFICIENCY: f64 = 0.75;
/// The fused backward's work relative to its forward: the scores recomputed (1) and four
/// products where forward ran two, with the softmax's backward between (1.5).
const FLASH_BACKWARD_WORK: f64 = 2.5;
/// Gradients are reduced in buckets of this many parameters (Megatron/DDP default ~40M).
pub const BUCKET_PARAMS: f64 = 40e6;
/// How much faster an E4M3 product runs with fast accumulation than with the split
/// accumulator, which promotes partial sums to fp32 as it goes: each alone (the fastest of
/// three), 1.074× and 1.072× at 8192 × 4096 × 4096 and 8192 × 28672 × 4096 in one run,
/// 1.064× and 1.078× in another, on the lent H200 (`runtime/tests/gpu/sm_share.py --fp8`,
/// torch 2.11's `_scaled_mm`, 2026-11-29; `runtime/tests/gpu/measured/sm_share_fp8.*`).
/// Transformer Engine, torchao and planc's runtime run the forward products fast and the
/// gradients' split (`_2X_ACC_FPROP` off, `_2X_ACC_DGRAD` and `_2X_ACC_WGRAD` on).
pub const FP8_FAST_ACCUMULATION: f64 = 1.07;

pub struct Device<'a> {
    pub gpu: &'a Gpu,
    pub precision: Precision,
}

/// Whose fused attention kernel a plan's attention runs: planc's own (timed by
/// `planc calibrate`), the frameworks' FlashAttention-2 (published rates), FlashAttention in
/// Triton where the job says so (`job.attention_kernel`), or cuDNN's fused flash attention,
/// which Transformer Engine prefers on Hopper and later when both apply
/// (NVIDIA/NeMo#9188, `docs/source/performance/memory_optimizations.rst`: "Transformer
/// Engine prefers cuDNN flash attention on Hopper+ architectures, and Tri Dao flash
/// attention on pre-Hopper").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FusedKernel {
    Planc,
    FlashAttention2,
    Cudnn,
    /// FlashAttention in Triton: priced as FlashAttention-2 on the padded head, over
    /// [`TRITON_FLASH_SLOWDOWN`] ([`Device::flash`]); never reaches the rate lookups.
    Triton,
}

/// How much longer FlashAttention in Triton takes than FlashAttention-2, forward and
/// backward: FlashAttention-2 ran 1.3-1.5x faster forward (1.4 taken) and about 2x faster
/// backward than the Triton kernel on an A100 80GB (Dao 2023, "FlashAttention-2", arXiv
/// 2307.08691, section 4.1, sequences 512 to 16k, heads of 64 and 128). The Triton kernel is
/// FlashAttention's first algorithm; no Hopper measurement of it is cited, so the A100's
/// ratio is carried to later GPUs.
pub const TRITON_FLASH_SLOWDOWN: (f64, f64) = (1.4, 2.0);

/// The work the Triton kernel does for a head of `head_dim`: it tiles the head to the next
/// power of two (`BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16)`, flash_attn_triton.py,
/// which llm-foundry copied at 061f2c7), so a head of 112 runs as 128: the FLOPs scaled by
/// the padding, at the padded head's rate.
fn triton_tile(flops: f64, head_dim: f64) -> (f64, f64) {
    if head_dim <= 0.0 {
        return (flops, head_dim);
    }
    let tile = (head_dim.max(16.0) as u64).next_power_of_two() as f64;
    (flops * tile / head_dim, tile)
}

impl<'a> Device<'a> {
    /// The device as the 16-bit kernels of an fp8 plan see it: under `precision = fp8` only
    /// the linear layers' products run in fp8 (`cost::fp8`); attention, the output layer and
    /// every memory-bound pass keep bf16 (and a bf16 profile prices them).
    pub fn sixteen_bit(&self) -> Device<'a> {
        Device {
            gpu: self.gpu,
            precision: if self.precision == Precision::Fp8 {
                Precision::Bf16
            } else {
                self.precision
            },
        }
    }

    /// The device that runs the layer operation `id`: fp8 for the products that run in
    /// fp8, 16-bit for the rest.
    pub(crate) fn for_op(&self, id: OpId) -> Device<'a> {
        if super::fp8::runs_in_fp8(id) {
            Device {
                gpu: self.gpu,
                precision: self.precision,
            }
        } else {
            self.sixteen_bit()
        }
    }

    fn peak(&self) -> f64 {
        self.gpu
            .peak(self.precision)
            .or(self.gpu.peak(Precision::Fp32))
            .unwrap_or(1e12)
    }

    fn matrix_rate(&self) -> f64 {
        self.peak() * self.gemm_efficiency() * self.sustained()
    }

    /// The share of the peak a large product reaches in a burst at this precision: fp8's
    /// where the catalog measured it (an 8192³ E4M3 product reached 0.68 of the fp8 peak on
    /// the lent H200, bf16's 0.79 of its own), else the 16-bit figure.
    fn gemm_efficiency(&self) -> f64 {
        match (self.precision, self.gpu.fp8_gemm_efficiency) {
            (Precision::Fp8, Some(e)) => e,
            _ => self.gpu.gemm_efficiency,
        }
    }

    /// What a compute-bound kernel keeps of its burst rate through a training run: the
    /// catalog's product efficiency and the published attention rates were timed in bursts,
    /// at the boost clock, where a GPU training for hours sits at its power limit (an H100
    /// measured here: 790 TFLOP/s in a burst, 662 after a minute of products at 1320 MHz
    /// and 680 W; `runtime/tests/gpu/sustained.py`). On a profiled device the profile's
    /// power curve says it for this plan's step instead ([`Self::power`]), also for what the
    /// profile did not time (fp8 products without their curve, other frameworks' attention).
    fn sustained(&self) -> f64 {
        if self.gpu.profile.is_some() {
            1.0 / self.power().0
        } else {
            match (self.precision, self.gpu.fp8_sustained_clock) {
                (Precision::Fp8, Some(c)) => c,
                _ => self.gpu.sustained_clock,
            }
        }
    }

    fn memory_rate(&self) -> f64 {
        self.gpu.hbm_bandwidth * self.gpu.memory_efficiency
    }

    /// How much slower than the profile's bursts this plan's compute-bound and memory-bound
    /// kernels run at the board's power limit (`cost::power`), at every precision: the limit
    /// is the board's. None without a profile, whose constants were given their sustained
    /// rate ([`Self::sustained`]).
    fn power(&self) -> (f64, f64) {
        match self.gpu.profile {
            Some(_) => self.gpu.power_slowdown.unwrap_or((1.0, 1.0)),
            None => (1.0, 1.0),
        }
    }

    /// A profiled product's time at the board's power limit, from its burst time. The limit
    /// caps the tensor cores' throughput: at the share of the burst rate this plan's step
    /// drives, the calibration's square product ran at its burst rate over the curve's
    /// slowdown, and that rate is the cap. A product whose burst ran above it runs at the
    /// cap; one that ran below it (thin or small shapes) keeps its burst time. Measured on
    /// the lent H200 (`runtime/tests/gpu/fp8_gemm.py`, 2026-11-28): after a minute of
    /// products an 8192³ bf16 product fell from 785 to 661 TFLOP/s, Llama 3 8B's shapes from
    /// 646-692 to 603-670 (0.93-0.98 of their bursts, not 0.84); and planc's runs held
    /// their products at their burst times where their shapes ran under the cap (Llama 3.2
    /// 1B at 1575 MHz: 1.02x) and slowed where they ran over it (GPT 6.6B: 1.15x). fp8
    /// products keep the whole slowdown: the curve measured 16-bit products.
    fn product_at_power(&self, flops: f64, burst_s: f64) -> f64 {
        let slow = self.power().0;
        let curve = self.gpu.profile.as_deref().and_then(|p| p.power.as_ref());
        match curve {
            Some(c) if self.precision != Precision::Fp8 && c.product_tflops > 0.0 => {
                burst_s.max(flops * slow / (c.product_tflops * 1e12))
            }
            _ => burst_s * slow,
        }
    }

    /// The device profile, where it was measured at this precision (or prices it:
    /// `profile::prices`).
    fn profile(&self) -> Option<&crate::profile::Profile> {
        self.gpu
            .profile
            .as_deref()
            .filter(|p| crate::profile::prices(&p.provenance.precision, self.precision.as_str()))
    }

    /// `gemm_efficiency` is what a large, square product reaches (8192³, k overhead
    /// included): the k overhead is measured relative to that. A profile's measured
    /// efficiency replaces both (it holds the tile, wave and thin-shape losses). An fp8
    /// product at the accumulation its source measured: see [`Self::product`].
    pub fn gemm(&self, m: f64, n: f64, k: f64) -> f64 {
        self.gemm_times(m, n, k, 1.0, 1.0)
    }

    /// A layer's product in forward (`forward`) or in one of its gradients. fp8 products
    /// accumulate fast in forward and split in the gradients' products
    /// ([`FP8_FAST_ACCUMULATION`]): the catalog's fp8 efficiency was measured split, so its
    /// forward math runs faster; `planc calibrate`'s fp8 curve times planc's forward product,
    /// fast, so the gradients' math runs slower. 16-bit products are [`Self::gemm`].
    pub fn product(&self, m: f64, n: f64, k: f64, forward: bool) -> f64 {
        if self.precision != Precision::Fp8 {
            return self.gemm(m, n, k);
        }
        let (profiled, catalog) = if forward {
            (1.0, 1.0 / FP8_FAST_ACCUMULATION)
        } else {
            (FP8_FAST_ACCUMULATION, 1.0)
        };
        self.gemm_times(m, n, k, profiled, catalog)
    }

    /// [`Self::gemm`] with its math (not the memory or launch floors under it) `profiled`
    /// times as long where the profile measured the shape, `catalog` times where the
    /// catalog prices it.
    fn gemm_times(&self, m: f64, n: f64, k: f64, profiled: f64, catalog: f64) -> f64 {
        if let Some(e) = self.profile_gemm_efficiency(m, n, k) {
            let flops = 2.0 * m * n * k;
            return (profiled * self.product_at_power(flops, flops / (self.peak() * e)))
                .max(KERNEL_FLOOR_S);
        }
        let bytes = self.precision.bytes() * (m * k + k * n + m * n);
        (catalog * self.catalog_gemm_math(m, n, k))
            .max(bytes / self.memory_rate() + KERNEL_RAMP_S)
            .max(KERNEL_FLOOR_S)
    }

    /// The profile's measured efficiency for an `m×n×k` product at this device's precision.
    /// fp8 products are timed by `planc calibrate` beside the 16-bit ones, into the 16-bit
    /// profile's `fp8_gemm` curve (against the fp8 peak); without that curve they take the
    /// catalog's efficiency.
    fn profile_gemm_efficiency(&self, m: f64, n: f64, k: f64) -> Option<f64> {
        if self.precision == Precision::Fp8 {
            return self
                .sixteen_bit()
                .profile()
                .and_then(|p| p.fp8_gemm_efficiency(m, n, k));
        }
        self.profile().and_then(|p| p.gemm_efficiency(m, n, k))
    }

    /// A product's math alone: at the profile's measured efficiency for its shape, else
    /// as [`Self::catalog_gemm_math`].
    fn gemm_math(&self, m: f64, n: f64, k: f64) -> f64 {
        match self.profile_gemm_efficiency(m, n, k) {
            Some(e) => {
                let flops = 2.0 * m * n * k;
                self.product_at_power(flops, flops / (self.peak() * e))
            }
            None => self.catalog_gemm_math(m, n, k),
        }
    }

    /// A product's math at the catalog's efficiency, with the ragged tiles and the thin-k
    /// overhead.
    fn catalog_gemm_math(&self, m: f64, n: f64, k: f64) -> f64 {
        let padded = |x: f64| (x / TILE).ceil() * TILE;
        let thin = |k: f64| (k + TILE_K_OVERHEAD) / k;
        let k_overhead = thin(k.max(1.0)) / thin(8192.0);
        2.0 * padded(m) * padded(n) * k * k_overhead / self.matrix_rate()
    }

    pub fn memory(&self, bytes: f64) -> f64 {
        // A measured curve by size already holds the ramp of small kernels.
        if let Some(e) = self.profile().and_then(|p| p.memory_efficiency(bytes)) {
            return (bytes / (self.gpu.hbm_bandwidth * e)).max(KERNEL_FLOOR_S);
        }
        (bytes / self.memory_rate() + KERNEL_RAMP_S).max(KERNEL_FLOOR_S)
    }

    /// A norm's forward over rows of `width` (`bytes` read and written): as the profile
    /// measured the kernel where it measured the one that runs (`planc_kernel`), else as
    /// a memory-bound kernel of those bytes.
    pub fn norm(&self, bytes: f64, width: f64, planc_kernel: bool) -> f64 {
        self.measured_norm("forward", bytes, width, planc_kernel)
            .unwrap_or_else(|| self.memory(bytes))
    }

    /// A norm's backward (the input gradient and the weight gradients' sums): twice the
    /// forward's traffic, at the measured backward rate where there is one.
    pub fn norm_backward(&self, bytes: f64, width: f64, planc_kernel: bool) -> f64 {
        self.measured_norm("backward", 2.0 * bytes, width, planc_kernel)
            .unwrap_or_else(|| 2.0 * self.memory(bytes))
    }

    /// The MLP activation's forward over rows of `width` (`bytes` read and written): as
    /// the profile measured `mlp` where it measured the kernel that runs (`planc_kernel`),
    /// else as a memory-bound kernel of those bytes.
    pub fn activation(&self, bytes: f64, width: f64, mlp: Mlp, planc_kernel: bool) -> f64 {
        self.measured(planc_kernel, |p| {
            p.activation_seconds(mlp.as_str(), "forward", width, bytes)
        })
        .map(|s| s * self.power().1)
        .unwrap_or_else(|| self.memory(bytes))
    }

    /// The MLP activation's backward: twice the forward's traffic, at the measured backward
    /// rate where there is one.
    pub fn activation_backward(&self, bytes: f64, width: f64, mlp: Mlp, planc_kernel: bool) -> f64 {
        self.measured(planc_kernel, |p| {
            p.activation_seconds(mlp.as_str(), "backward", width, 2.0 * bytes)
        })
        .map(|s| s * self.power().1)
        .unwrap_or_else(|| 2.0 * self.memory(bytes))
    }

    /// What the profile measured of one of planc's kernels (`seconds`), where the kernel
    /// that runs is planc's (`planc`): other frameworks run other kernels.
    fn measured(
        &self,
        planc: bool,
        seconds: impl FnOnce(&crate::profile::Profile) -> Option<f64>,
    ) -> Option<f64> {
        let s = seconds(self.profile().filter(|_| planc)?)?;
        Some(s.max(KERNEL_FLOOR_S))
    }

    /// A pass of planc's fused attention as the profile measured it (planc's kernel only).
    fn measured_fused(
        &self,
        pass: &str,
        flops: f64,
        seq: f64,
        head_dim: f64,
        planc: bool,
    ) -> Option<f64> {
        self.measured(planc, |p| p.attention_seconds(pass, flops, seq, head_dim))
            .map(|s| s * self.power().0)
    }

    fn measured_norm(&self, pass: &str, bytes: f64, width: f64, planc: bool) -> Option<f64> {
        self.measured(planc, |p| p.norm_seconds(pass, width, bytes))
            .map(|s| s * self.power().1)
    }

    /// The rates of the frameworks' fused attention kernel on this device, measured or
    /// published at 16-bit precision: cuDNN's where it runs and was measured here, else
    /// FlashAttention-2's; with the kernel whose rates they are.
    fn flash_rates(&self, kernel: FusedKernel) -> Option<(crate::plan::FlashRates, FusedKernel)> {
        let sixteen_bit = matches!(self.precision, Precision::Bf16 | Precision::Fp16);
        if !sixteen_bit {
            return None;
        }
        let flash2 = || Some((self.gpu.flash_attention?, FusedKernel::FlashAttention2));
        match kernel {
            FusedKernel::Planc => None,
            FusedKernel::FlashAttention2 | FusedKernel::Triton => flash2(),
            FusedKernel::Cudnn => match self.gpu.cudnn_attention {
                Some(r) => Some((r, FusedKernel::Cudnn)),
                None => flash2(),
            },
        }
    }

    /// The fused attention's forward: at the profile's measured rate for the shape where
    /// the profile measured the kernel that runs (planc's own, which is what `planc
    /// calibrate` times), else at the frameworks' kernel's rate on the device where the
    /// catalog has it ([`Self::flash_rates`]), else a fraction of the product rate.
    pub fn flash(&self, flops: f64, seq: f64, head_dim: f64, kernel: FusedKernel) -> f64 {
        if kernel == FusedKernel::Triton {
            let (flops, head_dim) = triton_tile(flops, head_dim);
            let fa2 = self.flash(flops, seq, head_dim, FusedKernel::FlashAttention2);
            return TRITON_FLASH_SLOWDOWN.0 * fa2;
        }
        self.fused_pass("flash", flops, seq, head_dim, kernel, |r| r.forward, 1.0)
            .unwrap_or_else(|| self.flash_fallback(flops, seq, head_dim, kernel, false))
    }

    /// A fused attention pass on a GPU with no published rate for its kernel: a fraction of
    /// the product rate, FlashAttention-2's best case on Ampere, read at the pass's shape.
    fn flash_fallback(
        &self,
        flops: f64,
        seq: f64,
        head_dim: f64,
        kernel: FusedKernel,
        backward: bool,
    ) -> f64 {
        let work = if backward { FLASH_BACKWARD_WORK } else { 1.0 };
        // The fraction is FlashAttention-2's, whichever framework's kernel would run.
        let published = match kernel {
            FusedKernel::Planc => FusedKernel::Planc,
            _ => FusedKernel::FlashAttention2,
        };
        let shape = super::fused_shape::factor(published, backward, seq, head_dim);
        (work * flops / (self.matrix_rate() * FLASH_EFFICIENCY * shape)).max(KERNEL_FLOOR_S)
    }

    /// A pass of the fused attention (`work` times the forward's FLOPs at the rate `rate`
    /// picks) where it is known: measured for planc's kernel, or at the catalog's rate for
    /// the frameworks' at the sustained clock.
    #[allow(clippy::too_many_arguments)]
    fn fused_pass(
        &self,
        pass: &str,
        flops: f64,
        seq: f64,
        head_dim: f64,
        kernel: FusedKernel,
        rate: fn(&crate::plan::FlashRates) -> f64,
        work: f64,
    ) -> Option<f64> {
        let planc = kernel == FusedKernel::Planc;
        self.measured_fused(pass, flops, seq, head_dim, planc)
            .or_else(|| {
                let (r, published) = self.flash_rates(kernel)?;
                // The published rates are one shape's (16k tokens, heads of 128).
                let shape = super::fused_shape::factor(published, work > 1.0, seq, head_dim);
                Some((work * flops / (rate(&r) * shape * self.sustained())).max(KERNEL_FLOOR_S))
            })
    }

    /// `batch` products `m×k · k×n` in one strided-batched call that writes or reads the
    /// attention's score square (`square` bytes): the math at the efficiency of the
    /// product of `batch · m` rows (the batch fills the GPU as rows do), then the square's
    /// traffic at the memory-bound curve, the two not overlapped. With k (or n) the head
    /// size, an output tile's main loop is a few steps and its epilogue writes the tile of
    /// the square in about as long (the weighted sums stream it through theirs); the
    /// shipped H200 profile's measurements of planc's forward core at heads of 128 are
    /// within 2 % of this sum (0.745 against 0.743 ms at 64 × 2048², 1.470 against 1.501
    /// at 32 × 4096²) where the longer of the two was 1.4× under them.
    pub fn square_product(&self, batch: f64, m: f64, n: f64, k: f64, square: f64) -> f64 {
        (self.gemm_math(batch * m, n, k) + self.memory(square)).max(KERNEL_FLOOR_S)
    }

    /// One kernel of a standard core or an unfused path.
    pub fn pass(&self, p: Pass) -> f64 {
        match p {
            Pass::Product {
                batch,
                m,
                n,
                k,
                square,
            } => self.square_product(batch, m, n, k, square),
            Pass::Memory { bytes } => self.memory(bytes),
            Pass::Slow { bytes, path } => self.memory(bytes) / path.share(),
        }
    }

    fn passes(&self, steps: &[standard_attention::Step]) -> f64 {
        steps.iter().map(|s| self.pass(s.pass)).sum()
    }

    /// What the profile measured of a pass of planc's standard attention core
    /// (`standard`, `standard_backward`) at `core`'s shape.
    fn measured_standard(&self, pass: &str, core: &Core) -> Option<f64> {
        self.measured(core.planc, |p| {
            p.attention_seconds(pass, core.causal_flops(), core.seq_full, core.head_dim)
        })
        .map(|s| s * self.power().0)
    }

    /// The standard attention core's forward: as the profile measured planc's kernels
    /// where they run and it did, else its passes one by one
    /// ([`standard_attention::Core::forward`]).
    pub fn standard_attention(&self, core: &Core) -> f64 {
        self.measured_standard("standard", core)
            .unwrap_or_else(|| self.passes(&core.forward()))
    }

    /// The standard attention core's backward (the scores and softmax recomputed first
    /// where the forward did not keep the probabilities): as the profile measured planc's
    /// kernels where it did, else its passes one by one. A profile that measured the
    /// forward but not the backward (those measured before `standard_backward` points)
    /// says how far these kernels fall short of the products' and the passes' curves at
    /// this shape: the backward's passes, the same kinds of kernels over the same
    /// tensors, are taken to fall as short.
    pub fn standard_attention_backward(&self, core: &Core) -> f64 {
        let forward = self.passes(&core.forward());
        let short = self
            .measured_standard("standard", core)
            .map_or(1.0, |m| m / forward.max(f64::MIN_POSITIVE));
        let backward = self
            .measured_standard("standard_backward", core)
            .unwrap_or_else(|| short * self.passes(&core.backward()));
        backward + short * self.passes(&core.recompute())
    }

    /// The fused attention's backward: it recomputes the scores and runs four products
    /// where forward ran two, 2.5× the forward work, unless the profile measured it. Where
    /// the catalog publishes the kernel's backward rate, that work runs at it: the
    /// backward's extra products and its atomic accumulation of the query gradient keep it
    /// below the forward's rate (322 against 370 TFLOP/s without a mask for
    /// FlashAttention-2 on an H100; Shah et al. 2024, Figs. 5-6).
    pub fn flash_backward(&self, flops: f64, seq: f64, head_dim: f64, kernel: FusedKernel) -> f64 {
        if kernel == FusedKernel::Triton {
            let (flops, head_dim) = triton_tile(flops, head_dim);
            let fa2 = self.flash_backward(flops, seq, head_dim, FusedKernel::FlashAttention2);
            return TRITON_FLASH_SLOWDOWN.1 * fa2;
        }
        self.fused_pass(
            "flash_backward",
            flops,
            seq,
            head_dim,
            kernel,
            |r| r.backward,
            FLASH_BACKWARD_WORK,
        )
        .unwrap_or_else(|| {
            // A profile's measured forward with no measured backward: the work ratio.
            match self.measured_fused("flash", flops, seq, head_dim, kernel == FusedKernel::Planc) {
                Some(f) => FLASH_BACKWARD_WORK * f,
                None => self.flash_fallback(flops, seq, head_dim, kernel, true),
            }
        })
    }
}

/// Compute and exposed communication of one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PassTime {
    pub compute: f64,
    pub comm: f64,
    /// FLOPs actually executed (for hardware FLOP/s).
    pub flops: f64,
}

impl PassTime {
    pub fn total(&self) -> f64 {
        self.compute + self.comm
    }

    pub fn add(&mut self, o: PassTime) {
        self.compute += o.compute;
        self.comm += o.comm;
        self.flops += o.flops;
    }

    pub fn scale(self, k: f64) -> PassTime {
        PassTime {
            compute: self.compute * k,
            comm: self.comm * k,
            flops: self.flops * k,
        }
    }
}

/// Where the groups of the plan sit on the cluster (Megatron's rank order: tp fastest,
/// then cp, dp, pp; the expert layers' groups in Megatron-Core's own order, tp fastest,
/// then ep, the expert data-parallel group, pp).
pub struct Placement {
    pub fabric: Fabric,
    pub tp: GroupShape,
    pub cp: GroupShape,
    pub dp: GroupShape,
    pub ep: GroupShape,
    /// The expert data-parallel group: the ranks holding the same experts, over which the
    /// experts' gradients are reduced (dp × cp / ep of them).
    pub edp: GroupShape,
    pub pp_crosses_nodes: bool,
}

pub fn placement(plan: &Plan, group: &NodeGroup) -> Placement {
    let p = &plan.parallel;
    let gpn = group.gpus_per_node;
    let inter = plan.cluster.inter_node.as_ref();
    let inter_per_gpu = inter
        .map(|i| {
            i.link.bandwidth * super::comm::link_efficiency(i.link.kind) * i.nics_per_node as f64
                / gpn as f64
        })
        .unwrap_or(f64::INFINITY);
    let fabric = Fabric {
        intra: group.intra_node.clone(),
        inter: inter.map(|i| i.link.clone()),
        inter_per_gpu,
        // The pair figure was measured on the catalog's own link; a plan that writes
        // another `intra_node` link has no measurement of it.
        pair_bus_bandwidth: group
            .gpu
            .pair_bus_bandwidth
            .filter(|_| group.intra_node == group.gpu.intra_node),
        pre_ampere: group.gpu.is_pre_ampere(),
        profile: group.gpu.profile.clone(),
    };
    let shape = |size: u64, stride: u64| GroupShape {
        size,
        per_node: size.min((gpn / stride.min(gpn)).max(1)),
    };
    Placement {
        tp: GroupShape {
            size: p.tp,
            per_node: p.tp.min(gpn),
        },
        cp: shape(p.cp, p.tp),
        dp: shape(p.dp * p.cp, p.tp),
        // Megatron-Core (0.10 and later, "MoE parallel folding", Liu et al. 2025,
        // arXiv 2504.14960) ranks the expert layers by their own generator,
        // `RankGenerator(tp=etp, ep, dp=edp, pp, order="tp-ep-dp-pp")`, expert tensor
        // parallelism defaulting to tp: ep's ranks are tp apart, the expert data-parallel
        // group's tp × ep apart.
        ep: shape(p.ep, p.tp),
        edp: shape((p.dp * p.cp / p.ep.max(1)).max(1), p.tp * p.ep),
        pp_crosses_nodes: p.tp * p.cp * p.dp >= gpn && plan.cluster.nodes() > 1,
        fabric,
    }
}

pub(crate) fn time_ops(ops: &[Op], dev: &Device, pl: &Placement) -> PassTime {
    let mut t = PassTime::default();
    let mut attention_compute = 0.0;
    let mut ring = 0.0;
    for o in ops {
        let dev = &dev.for_op(o.id);
        match &o.kind {
            OpKind::StandardAttention(core) => {
                t.compute += dev.standard_attention(core);
                t.flops += Core::flops(&core.forward());
            }
            OpKind::Gemm { m, n, k } => {
                t.compute += dev.product(*m, *n, *k, true);
                t.flops += 2.0 * m * n * k;
            }
            OpKind::GroupedGemm { count, m, n, k } => {
                t.compute += count * dev.product(*m, *n, *k, true);
                t.flops += count * 2.0 * m * n * k;
            }
            OpKind::FlashAttention {
                flops,
                seq,
                head_dim,
                kernel,
            } => {
                let x = dev.flash(*flops, *seq, *head_dim, *kernel);
                t.compute += x;
                attention_compute += x;
                t.flops += flops;
            }
            OpKind::Memory { bytes }
            | OpKind::Layout { bytes, .. }
            | OpKind::Epilogue { bytes, .. }
            | OpKind::Cast { bytes, .. } => t.compute += dev.memory(*bytes),
            OpKind::Norm {
                bytes,
                width,
                planc_kernel,
            } => t.compute += dev.norm(*bytes, *width, *planc_kernel),
            OpKind::Activation {
                bytes,
                width,
                mlp,
                planc_kernel,
            } => t.compute += dev.activation(*bytes, *width, *mlp, *planc_kernel),
            OpKind::Collective { op, bytes, group } => {
                let g = match group {
                    Group::Tp => pl.tp,
                    Group::Cp => pl.cp,
                    Group::Ep => pl.ep,
                };
                t.comm += collective_time(*op, *bytes, g, &pl.fabric);
            }
            OpKind::RingExchange { bytes, steps } => {
                ring += *steps as f64 * p2p_time(*bytes, pl.cp.per_node < pl.cp.size, &pl.fabric);
            }
            OpKind::Unfused(p) => {
                t.compute += super::eager::total(dev, &p.forward);
                t.flops += Passes::flops(&p.forward);
            }
        }
    }
    // The ring exchange hides behind the attention blocks it feeds.
    t.comm += (ring - attention_compute).max(0.0);
    t
}

/// Forward and backward of one micro-batch on one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StageTime {
    pub forward: PassTime,
    pub backward: PassTime,
    /// Pipeline send/receive per micro-batch (forward activations and backward gradients).
    pub p2p: f64,
    /// The weight-gradient products inside `backward.compute`.
    pub weight_grad: f64,
}

impl StageTime {
    pub fn per_microbatch(&self) -> f64 {
        self.forward.total() + self.backward.total() + self.p2p
    }
}

/// The pieces of one stage's work that a pipeline schedule arranges: one layer's passes,
/// and the embedding and output layer at the ends. The closed form ([`stage_time`]) and the
/// simulator build from the same pieces, so they differ only in how they compose them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pieces {
    pub layer_fwd: PassTime,
    /// Input-gradient and weight-gradient work, recomputation included.
    pub layer_bwd: PassTime,
    /// The weight-gradient products inside `layer_bwd.compute` (zero-bubble schedules
    /// defer them).
    pub layer_wgrad: f64,
    /// The same three of a layer with a dense MLP: an MoE model's first dense layers (equal
    /// to the layer's own in a dense model).
    pub dense_fwd: PassTime,
    pub dense_bwd: PassTime,
    pub dense_wgrad: f64,
    pub embedding_fwd: PassTime,
    pub embedding_bwd: PassTime,
    pub head_fwd: PassTime,
    pub head_bwd: PassTime,
    /// The output layer's weight-gradient work inside `head_bwd` (zero when it is frozen).
    pub head_wgrad: f64,
    /// One micro-batch's activation (or its gradient) crossing a pipeline boundary.
    pub p2p: f64,
}

impl Pieces {
    /// Forward, backward and weight-gradient work of `moe` MoE layers and `dense` dense
    /// ones (of a dense model, `dense` layers).
    pub fn layers(&self, moe: f64, dense: f64) -> (PassTime, PassTime, f64) {
        let mut fwd = self.layer_fwd.scale(moe);
        fwd.add(self.dense_fwd.scale(dense));
        let mut bwd = self.layer_bwd.scale(moe);
        bwd.add(self.dense_bwd.scale(dense));
        (fwd, bwd, self.layer_wgrad * moe + self.dense_wgrad * dense)
    }

    /// [`Pieces::layers`] of chunk `chunk` of stage `stage`: a frozen prefix's layers
    /// (`train.method = frozen`) run forward only, since no gradient flows before the
    /// first trained layer.
    pub fn chunk_layers(&self, plan: &Plan, stage: u64, chunk: u64) -> (PassTime, PassTime, f64) {
        let (_, n) = plan.chunk_range(stage, chunk);
        let dense = if plan.model.is_moe() {
            plan.chunk_dense_layers(stage, chunk)
        } else {
            n
        };
        let (moe, dense) = ((n - dense) as f64, dense as f64);
        let (fwd, mut bwd, wgrad) = self.layers(moe, dense);
        let (frozen_moe, frozen_dense) = plan.chunk_frozen_layers(stage, chunk);
        let (_, frozen_bwd, frozen_wgrad) = self.layers(frozen_moe as f64, frozen_dense as f64);
        bwd.add(frozen_bwd.scale(-1.0));
        (fwd, bwd, wgrad - frozen_wgrad)
    }

    /// [`Pieces::chunk_layers`] over every chunk of stage `stage`.
    pub fn stage_layers(&self, plan: &Plan, stage: u64) -> (PassTime, PassTime, f64) {
        let moe = plan.stage_moe_layers(stage) as f64;
        let dense = plan.stage_layers(stage) as f64 - moe;
        let (fwd, mut bwd, wgrad) = self.layers(moe, dense);
        let (frozen_moe, frozen_dense) = plan.stage_frozen_layers(stage);
        let (_, frozen_bwd, frozen_wgrad) = self.layers(frozen_moe as f64, frozen_dense as f64);
        bwd.add(frozen_bwd.scale(-1.0));
        (fwd, bwd, wgrad - frozen_wgrad)
    }
}

/// The backward of `ops` (a layer's forward operations, or some of them) whose forward
/// took `fwd`: two products per forward product and twice the memory traffic, collectives
/// mirroring the forward ones; the attention core's backward its own (the fused kernel's
/// 2.5× the work, the standard core's passes, or what the profile measured); the bias
/// gradients' reductions of the products among `ops`; recomputation on top.
pub(crate) fn layer_backward(
    plan: &Plan,
    ops: &[Op],
    fwd: PassTime,
    dev: &Device,
    pl: &Placement,
) -> PassTime {
    let mut bwd = PassTime {
        compute: 2.0 * fwd.compute,
        comm: fwd.comm,
        flops: 2.0 * fwd.flops,
    };
    bwd.add(own_backwards(ops, dev));
    bwd.compute += split_accumulation(plan, ops, dev);
    let overlap = super::tp_overlap::backward(plan, ops, dev, pl);
    bwd.comm += overlap.comm;
    bwd.compute += overlap.lost();
    // A frozen weight's product computes its input gradient only (`cost::method`): once
    // its forward, not twice.
    let frozen: Vec<Op> = ops
        .iter()
        .filter(|o| super::method::is_weight_product(o) && !trains_weight(plan, o))
        .cloned()
        .collect();
    if !frozen.is_empty() {
        bwd.add(time_ops(&frozen, dev, pl).scale(-1.0));
    }
    for bytes in layer_bias_gradients(plan, ops) {
        bwd.compute += dev.memory(bytes);
    }
    match plan.parallel.recompute {
        Recompute::Full => bwd.add(fwd),
        // Megatron-LM checkpoints the core attention and runs its forward again; planc's
        // runtime recomputes only the scores and the softmax, in the core's own backward.
        Recompute::Selective
            if plan.train.attention == Attention::Standard
                && plan.framework() != Framework::Planc =>
        {
            let core: Vec<Op> = ops.iter().filter(|o| is_core(o)).cloned().collect();
            bwd.add(time_ops(&core, dev, pl));
        }
        _ => {}
    }
    bwd
}

/// What the products among `ops` take longer in backward than twice their forward: fp8
/// gradients' products accumulate split, their forward fast ([`Device::product`]); a
/// frozen weight's product runs its input gradient only.
fn split_accumulation(plan: &Plan, ops: &[Op], dev: &Device) -> f64 {
    ops.iter()
        .map(|o| {
            let (count, m, n, k) = match o.kind {
                OpKind::Gemm { m, n, k } => (1.0, m, n, k),
                OpKind::GroupedGemm { count, m, n, k } => (count, m, n, k),
                _ => return 0.0,
            };
            let dev = dev.for_op(o.id);
            let products = if super::method::is_weight_product(o) && !trains_weight(plan, o) {
                1.0
            } else {
                2.0
            };
            products * count * (dev.product(m, n, k, false) - dev.product(m, n, k, true))
        })
        .sum()
}

/// What the backwards of `ops` that are not twice their forward add to twice it: the
/// fused attention's (2.5× the work, or what the profile measured), the standard
/// attention core's (its own passes, `cost::standard_attention`), the norms' and the MLP
/// activation's where a profile measured them, the layout changes' own, and LoRA's scaled
/// additions' (`cost::method`).
fn own_backwards(ops: &[Op], dev: &Device) -> PassTime {
    let mut extra = PassTime::default();
    // None of them is an fp8 product.
    let dev = &dev.sixteen_bit();
    for o in ops {
        match o.kind {
            OpKind::FlashAttention {
                flops,
                seq,
                head_dim,
                kernel,
            } => {
                let f = dev.flash(flops, seq, head_dim, kernel);
                extra.compute += dev.flash_backward(flops, seq, head_dim, kernel) - 2.0 * f;
                extra.flops += (FLASH_BACKWARD_WORK - 2.0) * flops;
            }
            OpKind::StandardAttention(ref core) => {
                extra.compute +=
                    dev.standard_attention_backward(core) - 2.0 * dev.standard_attention(core);
                extra.flops += Core::flops(&core.recompute());
            }
            OpKind::Layout {
                bytes,
                backward_bytes,
            }
            | OpKind::Epilogue {
                bytes,
                backward_bytes,
            }
            | OpKind::Cast {
                bytes,
                backward_bytes,
            } => {
                let backward = if backward_bytes > 0.0 {
                    dev.memory(backward_bytes)
                } else {
                    0.0
                };
                extra.compute += backward - 2.0 * dev.memory(bytes);
            }
            OpKind::Norm {
                bytes,
                width,
                planc_kernel,
            } => {
                extra.compute += dev.norm_backward(bytes, width, planc_kernel)
                    - 2.0 * dev.norm(bytes, width, planc_kernel);
            }
            OpKind::Activation {
                bytes,
                width,
                mlp,
                planc_kernel,
            } => {
                extra.compute += dev.activation_backward(bytes, width, mlp, planc_kernel)
                    - 2.0 * dev.activation(bytes, width, mlp, planc_kernel);
            }
            // An unfused operation's backward is its autograd kernels, not twice its forward.
            OpKind::Unfused(ref p) => {
                extra.compute += super::eager::total(dev, &p.backward)
                    - 2.0 * super::eager::total(dev, &p.forward);
                extra.flops += Passes::flops(&p.backward) - 2.0 * Passes::flops(&p.forward);
            }
            // LoRA's scaled addition: its backward scales one copy of the output gradient.
            OpKind::Memory { bytes } if o.id == OpId::LoraAdd => {
                let backward = bytes * super::method::ADAPTER_ADD_BACKWARD_PASSES
                    / super::method::ADAPTER_ADD_PASSES;
                extra.compute += dev.memory(backward) - 2.0 * dev.memory(bytes);
            }
            _ => {}
        }
    }
    extra
}

/// The standard attention core (what Megatron-LM's selective recomputation redoes), fused
/// or run unfused (`cost::eager`).
fn is_core(o: &Op) -> bool {
    matches!(o.kind, OpKind::StandardAttention(_)) || o.id == OpId::AttentionCore
}

/// The pass that adds one micro-batch's gradients of `params` local parameters into the
/// fp32 gradient buffer, where the weight-gradient products do not accumulate into it
/// themselves (`parallel.grad_accumulation_fusion = false`).
///
/// Megatron-LM before 07916bf245 (2022-09-27) fused the accumulation into the product
/// (`fused_weight_gradient_mlp_cuda`) only with `--accumulate-allreduce-grads-in-fp32`
/// (`arguments.py` at 739cb43dae turns `gradient_accumulation_fusion` off otherwise); the
/// product then writes a 16-bit `param.grad`, and the hook that
/// `DistributedDataParallel._make_param_hook` (`megatron/model/distributed.py`) registers
/// on each parameter's gradient accumulator runs `param.main_grad.add_(param.grad.data)`
/// in the backward pass of every micro-batch: one elementwise kernel reading the gradient
/// and the buffer and writing the buffer back. The buffer holds the parameters' own type
/// unless gradients accumulate in fp32, which bf16 forces (`_get_buffer_type` in
/// `DistributedDataParallel.__init__`; `arguments.py` sets
/// `accumulate_allreduce_grads_in_fp32` for bf16): 6 bytes a parameter with fp16.
fn grad_accumulation(plan: &Plan, params: f64, dev: &Device) -> f64 {
    if super::eager::accumulates_in_products(plan) || params <= 0.0 {
        return 0.0;
    }
    let grad = plan.train.precision.bytes();
    let buffer = match plan.parallel.grad_dtype {
        Some(d) => d.bytes(),
        None if plan.train.precision == Precision::Bf16 => 4.0,
        None => grad,
    };
    dev.memory(params * (grad + 2.0 * buffer))
}

/// `grad_accumulation` of the parameters beyond the layers: the embedding's (first stage)
/// and the output layer's with the final norm (last stage). Nothing to price, and nothing
/// computed, where the products accumulate themselves.
fn ends_accumulation(plan: &Plan, dev: &Device) -> (f64, f64) {
    let p = &plan.parallel;
    if super::eager::accumulates_in_products(plan) || !plan.train.method.trains_ends() {
        return (0.0, 0.0);
    }
    let first_extra = stage_params(plan, 0) - stage_layer_params(plan, 0);
    let last = p.pp - 1;
    let last_extra = stage_params(plan, last) - stage_layer_params(plan, last);
    let (embedding, head) = if p.pp > 1 {
        (first_extra, last_extra)
    } else {
        // One stage holds both ends; its extra parameters split as the ends own them.
        let embedding = embedding_params(&plan.model)
            - (plan.model.vocab * plan.model.hidden) as f64
            + (plan.model.vocab * plan.model.hidden) as f64 / p.tp as f64;
        (embedding, first_extra - embedding)
    };
    (
        grad_accumulation(plan, embedding, dev),
        grad_accumulation(plan, head, dev),
    )
}

/// The memory-bound copies a sharded-parameter framework (`zero = 3`) runs around each
/// layer's collectives, as (forward, backward) seconds of one layer of `params` parameters: they stream the whole
/// unsharded layer through HBM, so unlike the collectives they cannot hide behind the
/// products, which need the same bandwidth.
///
/// PyTorch FSDP2 (`torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`): after each
/// all-gather, `foreach_all_gather_copy_out` splits the gathered buffer into the
/// parameters' own tensors (`split_with_sizes_copy`: read and write the layer in the
/// parameter type), before the forward and again before the backward (parameters are
/// resharded after forward by default); before each reduce-scatter, `foreach_reduce`
/// copies the gradients into the reduce-scatter buffer (`_chunk_cat`: read them in the
/// parameter type, write them in the reduction's). DeepSpeed's ZeRO-3 copies the same
/// bytes (the gathered partitions into the parameters' storage, each gradient into its
/// reduction bucket, `__add_grad_to_ipg_bucket`). Megatron-LM and planc's runtime have no
/// ZeRO-3 path here: nothing to price.
///
/// On one GPU the copies remain where the framework still shards: the `train.py` planc
/// writes applies `fully_shard` whatever the world size, and FSDP2 runs the same copy-in,
/// gather and copy-out over a group of one (`_fsdp_collectives.py` has no single-rank path
/// around them). `fsdp_probe.py` on one H100 (docs/measurements.md, 2026-11-25) measured
/// +0.27 ms a layer of 24 × 2048 under reshard after forward against an unwrapped model
/// (its runs varied by ±0.3 ms a layer); the kernels of a profiled Llama 3.2 1B step on an
/// H200 (2026-11-29) show every copy priced below, about 1 ms a layer of 61 M parameters
/// under the profiler, where they price 0.6. torchtitan applies FSDP only over a sharded
/// group (`dp_shard > 1`); DeepSpeed is left unpriced there (not measured).
///
/// `params` are the layer's held weights (gathered, frozen ones too), `trained` those whose
/// gradients are reduced.
pub fn sharded_param_copies(plan: &Plan, params: f64, trained: f64, dev: &Device) -> (f64, f64) {
    let p = &plan.parallel;
    let sharded = p.dp * p.cp > 1 || plan.framework() == Framework::Torch;
    if p.zero < 3 || !sharded {
        return (0.0, 0.0);
    }
    if !matches!(
        plan.framework(),
        Framework::Torch | Framework::Torchtitan | Framework::Deepspeed
    ) {
        return (0.0, 0.0);
    }
    let weight = plan.train.precision.bytes();
    let copy_out = dev.memory(2.0 * params * weight);
    let copy_in = dev.memory(trained * (weight + plan.reduce_bytes()));
    if plan.framework() == Framework::Deepspeed {
        return (copy_out, copy_out + copy_in);
    }
    // FSDP2 also copies each gather's input: `all_gather_inputs` casts this rank's fp32
    // shard to the parameter type (mixed precision), and `all_gather_copy_in` copies it into
    // the gather's buffer (`_foreach_copy_`). Over a group of one the reduce-scatter is a
    // copy of the fp32 reduction buffer into its output (`reduce_output.copy_`), which over
    // more ranks is the collective the data-parallel traffic prices. Seen on one H200
    // (torch 2.11, `torch_profile.py`, 2026-11-29): per Llama 3.2 1B step, 192 + 128
    // `copy_`s of the layers' weights and 342 device-to-device copies beside the copy-outs,
    // and 16 `copy_`s of a whole layer's fp32 gradients.
    let shard = params / (p.dp * p.cp) as f64;
    let cast = if weight < 4.0 { 4.0 + weight } else { 0.0 };
    let gather_in = dev.memory(shard * (cast + 2.0 * weight));
    let single = if p.dp * p.cp == 1 {
        dev.memory(2.0 * trained * plan.reduce_bytes())
    } else {
        0.0
    };
    let fwd = copy_out + gather_in;
    (fwd, fwd + copy_in + single)
}

/// What one layer's offloaded state leaves exposed on the host link per micro-batch, as
/// (forward, backward) seconds, behind passes of `fwd` and `bwd` (`cost::offload`), for a
/// layer of `params` held and `trained` trained parameters on this GPU.
pub fn host_exposed(
    plan: &Plan,
    params: f64,
    trained: f64,
    dev: &Device,
    fwd: PassTime,
    bwd: PassTime,
) -> (f64, f64) {
    super::offload::layer_exposed(plan, params, trained, dev.gpu, fwd.compute, bwd.compute)
}

/// One layer's forward, backward and weight-gradient work from its forward operations
/// `ops`, of an MoE layer when `moe` (its parameters on this GPU, held and trained, from
/// `cost::method`).
fn layer_passes(
    plan: &Plan,
    ops: &[Op],
    moe: bool,
    dev: &Device,
    pl: &Placement,
) -> (PassTime, PassTime, f64) {
    let params = layer_held_params(plan, moe);
    let trained = layer_trained_params(plan, moe).0;
    let mut fwd = time_ops(ops, dev, pl);
    let mut bwd = layer_backward(plan, ops, fwd, dev, pl);
    let (host_fwd, host_bwd) = host_exposed(plan, params, trained, dev, fwd, bwd);
    let accumulation = grad_accumulation(plan, trained, dev);
    bwd.compute += accumulation;
    // After the backward is priced from the forward: recomputation gathers nothing twice.
    let (copies_fwd, copies_bwd) = sharded_param_copies(plan, params, trained, dev);
    fwd.compute += copies_fwd;
    bwd.compute += copies_bwd;
    fwd.comm += host_fwd;
    bwd.comm += host_bwd;
    // A weight gradient is one product of the same size as the forward product; a frozen
    // weight has none.
    let weight_products: Vec<Op> = ops
        .iter()
        .filter(|o| trains_weight(plan, o) && !is_core(o))
        .cloned()
        .collect();
    // The accumulation follows the weight gradients it adds.
    let wgrad = time_ops(&weight_products, dev, pl).compute + accumulation;
    if let Some(host) = HostCost::of(plan) {
        let (host_fwd, host_bwd) = layer_host(plan, ops, host);
        host.apply(&mut fwd, host_fwd);
        host.apply(&mut bwd, host_bwd);
    }
    (fwd, bwd, wgrad)
}

/// What the host costs a pass beyond its kernels, where it costs anything: an unfused path's
/// dispatch of each operation (`cost::eager`), which a pass takes no less than, or, under
/// `CUDA_LAUNCH_BLOCKING`, each blocked launch's gap, which adds to the kernels
/// (`cost::launch_blocking`).
#[derive(Clone, Copy)]
enum HostCost {
    Dispatch,
    Blocking,
}

impl HostCost {
    fn of(plan: &Plan) -> Option<HostCost> {
        if plan.launch_blocking {
            Some(HostCost::Blocking)
        } else if super::eager::path(plan).is_some() {
            Some(HostCost::Dispatch)
        } else {
            None
        }
    }

    /// The host's time for `ops`' forward.
    fn forward(self, ops: &[Op]) -> f64 {
        match self {
            HostCost::Dispatch => {
                super::eager::forward_dispatches(ops) * super::eager::HOST_FORWARD_OP_S
            }
            HostCost::Blocking => super::launch_blocking::forward_gaps(ops),
        }
    }

    /// The host's time for `ops`' backward, the products whose weight `trains` with their
    /// weight gradient.
    fn backward(self, ops: &[Op], trains: impl Fn(&Op) -> bool) -> f64 {
        match self {
            HostCost::Dispatch => {
                super::eager::backward_dispatches(ops, trains) * super::eager::HOST_BACKWARD_OP_S
            }
            HostCost::Blocking => super::launch_blocking::backward_gaps(ops, trains),
        }
    }

    /// The host's time for one small backward kernel (a gradient hook's add).
    fn backward_op(self) -> f64 {
        match self {
            HostCost::Dispatch => super::eager::HOST_BACKWARD_OP_S,
            HostCost::Blocking => super::launch_blocking::BLOCKED_BACKWARD_OP_S,
        }
    }

    /// `host` seconds on pass `t`: its floor (the GPU's queue runs ahead of a host that
    /// dispatches faster than the kernels run), or its gaps added.
    fn apply(self, t: &mut PassTime, host: f64) {
        match self {
            HostCost::Dispatch => host_floor(t, host),
            HostCost::Blocking => t.compute += host,
        }
    }
}

/// The host's time for one layer's forward and backward ([`HostCost`]): the forward's
/// operations; autograd's backward operations, with Megatron-LM's `main_grad.add_` hook a
/// parameter tensor where the products do not accumulate, and the forward run again where
/// the layer recomputes it.
fn layer_host(plan: &Plan, ops: &[Op], host: HostCost) -> (f64, f64) {
    let fwd = host.forward(ops);
    let mut bwd = host.backward(ops, |o| {
        super::method::is_weight_product(o) && trains_weight(plan, o)
    });
    if !super::eager::accumulates_in_products(plan) {
        bwd += super::eager::parameter_tensors(plan, 1.0, false, false) * host.backward_op();
    }
    match plan.parallel.recompute {
        Recompute::Full => bwd += fwd,
        Recompute::Selective
            if plan.train.attention == Attention::Standard
                && plan.framework() != Framework::Planc =>
        {
            let core: Vec<Op> = ops.iter().filter(|o| is_core(o)).cloned().collect();
            bwd += host.forward(&core);
        }
        _ => {}
    }
    (fwd, bwd)
}

/// An eager pass takes no less than the host's dispatch of its operations, `host` seconds:
/// the GPU's queue runs ahead of the host only while the kernels are longer than their
/// dispatch, and drains at the pass's ends (a pipeline transfer, the next pass's wait).
/// What the host adds shows as compute (the GPU idles between kernels).
fn host_floor(t: &mut PassTime, host: f64) {
    let gap = host - t.total();
    if gap > 0.0 {
        t.compute += gap;
    }
}

pub fn pieces(plan: &Plan, dev: &Device, pl: &Placement) -> Pieces {
    let p = &plan.parallel;
    let layer_ops = layer_forward(plan);
    let (layer_fwd, layer_bwd, layer_wgrad) = layer_passes(plan, &layer_ops, true, dev, pl);
    let (dense_fwd, dense_bwd, dense_wgrad) = if plan.model.is_moe() {
        let ops = dense_layer_forward(plan);
        layer_passes(plan, &ops, false, dev, pl)
    } else {
        (layer_fwd, layer_bwd, layer_wgrad)
    };
    let embedding_fwd = time_ops(&embedding_forward(plan), dev, pl);
    let trains_ends = plan.train.method.trains_ends();
    // A frozen embedding needs no gradient: nothing runs backward there.
    let mut embedding_bwd = if trains_ends {
        embedding_fwd
    } else {
        PassTime::default()
    };
    let (embedding_accumulation, head_accumulation) = ends_accumulation(plan, dev);
    embedding_bwd.compute += embedding_accumulation;
    let head_fwd = time_ops(&head_forward(plan), dev, pl);
    let head_bwd_ops = head_backward(plan);
    let head_bwd = time_ops(&head_bwd_ops, dev, pl);
    // Backward runs twice the work of those operations; collectives mirror forward's.
    let mut head_bwd = PassTime {
        compute: 2.0 * head_bwd.compute,
        comm: head_bwd.comm,
        flops: 2.0 * head_bwd.flops,
    };
    head_bwd.add(own_backwards(&head_bwd_ops, dev));
    head_bwd.compute += head_accumulation;
    let (head_reduce, head_lost) = super::tp_overlap::head_backward(plan, dev, pl);
    head_bwd.comm += head_reduce;
    head_bwd.compute += head_lost;
    // A frozen output layer's product computes the input gradient only (the layers before
    // it still need it), and nothing is left for a deferred weight-gradient pass.
    let head_wgrad = if trains_ends {
        head_fwd.compute
    } else {
        let products: Vec<Op> = head_bwd_ops
            .iter()
            .filter(|o| super::method::is_weight_product(o))
            .cloned()
            .collect();
        head_bwd.add(time_ops(&products, dev, pl).scale(-1.0));
        0.0
    };
    let (mut embedding_fwd, mut embedding_bwd, mut head_fwd, mut head_bwd) =
        (embedding_fwd, embedding_bwd, head_fwd, head_bwd);
    if let Some(host) = HostCost::of(plan) {
        let embedding_ops = embedding_forward(plan);
        host.apply(&mut embedding_fwd, host.forward(&embedding_ops));
        if trains_ends {
            host.apply(&mut embedding_bwd, host.backward(&embedding_ops, |_| false));
        }
        host.apply(&mut head_fwd, host.forward(&head_forward(plan)));
        let head_host = host.backward(&head_bwd_ops, |o| {
            trains_ends && super::method::is_weight_product(o)
        });
        host.apply(&mut head_bwd, head_host);
    }
    let p2p = if p.pp > 1 {
        let m = &plan.model;
        // In 128 bits: three counts of up to 2^24 overflow 64.
        let activation = (u128::from(p.micro_batch) * u128::from(m.seq_len) / u128::from(p.cp)
            * u128::from(m.hidden)) as f64
            * plan.train.precision.bytes();
        if p.sequence_parallel {
            // Each tensor-parallel rank holds, and sends, its own 1/tp of the tokens.
            p2p_time(activation / p.tp as f64, pl.pp_crosses_nodes, &pl.fabric)
        } else if p.scatter_gather_p2p && p.tp > 1 {
            // Megatron-LM before Megatron-core (`megatron/p2p_communication.py`,
            // `_communicate`, at 739cb43dae): without sequence parallelism each rank sends
            // `split_tensor_into_1d_equal_chunks` of the replicated activation over its own
            // link, and the receiver waits for `gather_split_1d_tensor`, an all-gather over
            // the tensor-parallel group, before the pass that needs it.
            p2p_time(activation / p.tp as f64, pl.pp_crosses_nodes, &pl.fabric)
                + collective_time(Collective::AllGather, activation, pl.tp, &pl.fabric)
        } else {
            // Every rank sends the whole activation it holds, each over its own link
            // (Megatron-core's `p2p_communication.py`).
            p2p_time(activation, pl.pp_crosses_nodes, &pl.fabric)
        }
    } else {
        0.0
    };
    Pieces {
        layer_fwd,
        layer_bwd,
        layer_wgrad,
        dense_fwd,
        dense_bwd,
        dense_wgrad,
        embedding_fwd,
        embedding_bwd,
        head_fwd,
        head_bwd,
        head_wgrad,
        p2p,
    }
}

/// One micro-batch on stage `stage`, over that stage's own layers: with uneven stages the
/// ends differ from the middle, and the pipeline composition (`cost::estimate`) is paced
/// by the slowest.
pub fn stage_time(plan: &Plan, stage: u64, dev: &Device, pl: &Placement) -> StageTime {
    let p = &plan.parallel;
    let pc = pieces(plan, dev, pl);
    let (mut forward, mut backward, mut weight_grad) = pc.stage_layers(plan, stage);
    if stage == 0 {
        forward.add(pc.embedding_fwd);
        backward.add(pc.embedding_bwd);
    }
    if stage == p.pp - 1 {
        forward.add(pc.head_fwd);
        backward.add(pc.head_bwd);
    }
    // One send forward and one backward per model chunk boundary, on the critical path
    // unless the framework overlaps them with the next pass.
    let p2p = if p.overlaps_p2p() {
        0.0
    } else {
        2.0 * p.vpp as f64 * pc.p2p
    };
    if stage == p.pp - 1 {
        weight_grad += pc.head_wgrad;
    }
    StageTime {
        forward,
        backward,
        p2p,
        weight_grad,
    }
}

/// The tied embedding's gradient summed between the first and the last stage (Megatron's
/// and planc's all-reduce of the two copies' gradients) after the last backward; zero
/// without a pipeline or without tied embeddings. On two H200s Llama 3.2 1B's (1 GB of
/// fp32 gradients over NVLink) took 3.2 ms of stage 0's step under pp 2.
pub fn embedding_sync_time(plan: &Plan, pl: &Placement) -> f64 {
    let (m, p) = (&plan.model, &plan.parallel);
    if !m.tied_embeddings || p.pp <= 1 {
        return 0.0;
    }
    let bytes = (m.vocab * m.hidden) as f64 / p.tp as f64 * 4.0;
    2.0 * p2p_time(bytes / 2.0, pl.pp_crosses_nodes, &pl.fabric)
}

/// Gradients of `stage` that can be reduced only once its backward has ended: the input
/// embedding's (its backward is the stage's last), and under planc's own runtime everything
/// outside the layers (it reduces each layer's gradients as backward goes, the rest after).
pub fn reduction_tail(plan: &Plan, stage: u64) -> f64 {
    let m = &plan.model;
    if !plan.train.method.trains_ends() {
        // Frozen ends have no gradients; the layers' reduce as their backward goes.
        0.0
    } else if plan.framework() == Framework::Planc {
        stage_params(plan, stage) - stage_layer_params(plan, stage)
    } else if stage == 0 {
        embedding_params(m) - (m.vocab * m.hidden) as f64 * (1.0 - 1.0 / plan.parallel.tp as f64)
    } else {
        0.0
    }
}

/// How many equal pieces of `params` gradients an overlapped reduction of `stage` runs in,
/// of which the last is exposed after backward: buckets of [`BUCKET_PARAMS`], but no piece
/// smaller than the [`reduction_tail`] (on two H200s, GPT-2's 39 M embedding parameters
/// reduced after backward: 0.68 ms of a 39.5 ms step).
pub fn reduction_pieces(plan: &Plan, stage: u64, params: f64) -> f64 {
    let buckets = (params / BUCKET_PARAMS).max(1.0);
    let tail = reduction_tail(plan, stage);
    if tail > 0.0 {
        buckets.min(params / tail).max(1.0)
    } else {
        buckets
    }
}

/// Data-parallel gradient (and parameter) communication of one stage, exposed part, as
/// (what waits for the link, what the passes lose beside the hidden rest: [`dp_contention`]
/// of it). The second lengthens the stage's last backward passes, so under a pipeline it
/// also delays the earlier stages' drain.
pub fn dp_exposed_parts(
    plan: &Plan,
    stage: u64,
    params: f64,
    st: &StageTime,
    pl: &Placement,
) -> (f64, f64) {
    dp_exposed_beside(plan, stage, params, st, pl, dp_contention(plan, stage, pl))
}

/// [`dp_exposed_parts`] with the passes losing `(reduce, gather)` shares of the hidden
/// collectives' time.
fn dp_exposed_beside(
    plan: &Plan,
    stage: u64,
    params: f64,
    st: &StageTime,
    pl: &Placement,
    (slow_reduce, slow_gather): (f64, f64),
) -> (f64, f64) {
    let p = &plan.parallel;
    if pl.dp.size <= 1 {
        return (0.0, 0.0);
    }
    let experts = stage_expert_params(plan, stage).min(params);
    // Only trained weights' gradients are reduced and their updates gathered; ZeRO-3
    // gathers every weight a pass computes with (`cost::method`).
    let trained = if plan.train.method.is_full() {
        (params, experts)
    } else {
        super::method::stage_trained_params(plan, stage)
    };
    let buckets = (trained.0 / BUCKET_PARAMS).max(1.0);
    // Of which the last, exposed after backward, is never smaller than the tail.
    let n_pieces = reduction_pieces(plan, stage, trained.0);
    let (reduce, gather) = dp_collectives(plan, (params, experts), trained, pl);
    let gather = if p.zero >= 1 { gather } else { 0.0 };
    let m = p.grad_accum(plan.train.global_batch).max(1) as f64;
    if !plan.overlaps_grad_reduce() {
        // After the backward passes (and the parameter gather before the forward ones),
        // nothing hides it.
        let per_step = if p.zero >= 2 { m } else { 1.0 };
        let gathers = if p.zero >= 3 { 2.0 * m } else { 1.0 };
        return (per_step * reduce + gathers * gather, 0.0);
    }
    if p.zero >= 2 {
        // ZeRO-2 reduces gradients after every backward, ZeRO-3 also gathers parameters
        // before every forward and backward: per micro-batch the link carries all of it
        // while the passes compute, one bucket at a time.
        let link = reduce + if p.zero >= 3 { 2.0 * gather } else { 0.0 };
        // A reduction starts when its backward pass produces the gradients; it hides behind
        // that pass and behind the forward passes that follow backward passes in the
        // schedule's steady state, not behind the warm-up's forwards, which run before any
        // gradient exists (with vpp chunks and few micro-batches, all of them).
        let hidden = hiding(&st.backward, pl)
            + hiding(&st.forward, pl) * steady_forwards(plan, stage, m as u64);
        let mut per_micro_batch = (link - hidden).max(link / buckets);
        // What no pass can hide: the last bucket (ZeRO-3: the first layer's gather and the
        // last layer's reduce-scatter).
        let mut floor = link / buckets;
        if p.zero >= 3 {
            per_micro_batch = zero3_exposed(plan, stage, reduce, gather, st, pl);
            let layers = (plan.stage_layers(stage) as f64).max(1.0);
            floor = (gather + reduce) / layers;
        }
        // The gradients ready only when a backward ends (the embedding's) hide behind the
        // next micro-batch's passes; after the last one they are waited for, once a step.
        let tail = (reduce / n_pieces - per_micro_batch).max(0.0);
        // What hides still costs the passes it hides behind their lost rate: the reduction
        // (reduce-scatter) and, under ZeRO-3, the gathers, each at its own measured rate.
        let gathers = if p.zero >= 3 { 2.0 * gather } else { 0.0 };
        let slow = (slow_reduce * reduce + slow_gather * gathers) / link.max(f64::MIN_POSITIVE);
        let (per_micro_batch, lost_per_micro_batch) = rehidden(link, per_micro_batch, floor, slow);
        let lost = m * lost_per_micro_batch;
        if p.zero >= 3 {
            return (m * per_micro_batch + tail, lost);
        }
        let (exposed, lost_gather) = rehidden(
            gather,
            (gather - hiding(&st.forward, pl)).max(gather / n_pieces),
            gather / n_pieces,
            slow_gather,
        );
        return (m * per_micro_batch + tail + exposed, lost + lost_gather);
    }
    let (exposed_reduce, lost_reduce) = rehidden(
        reduce,
        (reduce - hiding(&st.backward, pl)).max(reduce / n_pieces),
        reduce / n_pieces,
        slow_reduce,
    );
    let (exposed_gather, lost_gather) = rehidden(
        gather,
        (gather - hiding(&st.forward, pl)).max(gather / n_pieces),
        gather / n_pieces,
        slow_gather,
    );
    (exposed_reduce + exposed_gather, lost_reduce + lost_gather)
}

/// A collective of `total` seconds of which `exposed` waits for the link past the passes
/// and `floor` no pass can hide, beside passes that lose `share` of the time it runs
/// behind them: (what still waits, what the passes lose). The passes that lose it run that
/// much longer beside the link and hide that much more of it, down to the floor, as the
/// simulator's lengthened passes do.
fn rehidden(total: f64, exposed: f64, floor: f64, share: f64) -> (f64, f64) {
    let lost = share * (total - exposed);
    (exposed - lost.min((exposed - floor).max(0.0)), lost)
}

/// Seconds of the data-parallel gradient reduction (all-reduce, or reduce-scatter under
/// ZeRO) and parameter all-gather of `held` parameters as (all, routed experts'), of which
/// `trained` train: routed experts' are reduced and gathered over the expert data-parallel
/// group (Megatron-Core's expert-parallel gradient buffers), the rest over the
/// data-parallel group. Gradients travel in the reduction's type ([`Plan::reduce_bytes`]).
/// The reduction covers the trained weights only, as does the gather of ZeRO-1 and -2's
/// updated shards; ZeRO-3 gathers every held weight (frozen ones too) for its passes.
pub fn dp_collectives(
    plan: &Plan,
    held: (f64, f64),
    trained: (f64, f64),
    pl: &Placement,
) -> (f64, f64) {
    let e = plan.train.precision.bytes();
    let c = if plan.parallel.zero >= 1 {
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    let gathered = if plan.parallel.zero >= 3 {
        held
    } else {
        trained
    };
    let mut reduce = 0.0;
    let mut gather = 0.0;
    for (n, group) in [(trained.0 - trained.1, pl.dp), (trained.1, pl.edp)] {
        if n > 0.0 {
            reduce += collective_time(c, n * plan.reduce_bytes(), group, &pl.fabric);
        }
    }
    for (n, group) in [(gathered.0 - gathered.1, pl.dp), (gathered.1, pl.edp)] {
        if n > 0.0 {
            gather += collective_time(Collective::AllGather, n * e, group, &pl.fabric);
        }
    }
    (reduce, gather)
}

/// What one micro-batch's ZeRO-3 traffic leaves exposed on stage `stage`, layer by layer,
/// as PyTorch FSDP runs it (Zhao et al. 2023, "PyTorch FSDP", arXiv 2304.11277, §3.3 and
/// Fig. 5; FSDP2 keeps the same order): each layer is one unit, gathered whole before its
/// forward and again before its backward, its gradients reduce-scattered whole after its
/// backward. The next layer's gather is issued while this layer computes (forward
/// prefetch: the CPU runs ahead; backward prefetch: before the current layer's gradient
/// products), so a gather hides behind one layer's pass, not behind the whole step. All
/// of a layer's collectives share one NCCL communicator, which runs them in issue order:
/// in backward the next layer's gather and this layer's reduce-scatter both pass through
/// it while this layer's backward computes. What cannot hide: the first layer's gather
/// (nothing runs before it) and the last reduce-scatter (nothing runs after it; the next
/// micro-batch's first gather queues behind it on the same communicator).
fn zero3_exposed(
    plan: &Plan,
    stage: u64,
    reduce: f64,
    gather: f64,
    st: &StageTime,
    pl: &Placement,
) -> f64 {
    let layers = (plan.stage_layers(stage) as f64).max(1.0);
    let (gather_l, reduce_l) = (gather / layers, reduce / layers);
    let (fwd_l, bwd_l) = (
        hiding(&st.forward, pl) / layers,
        hiding(&st.backward, pl) / layers,
    );
    let forward = (gather_l - fwd_l).max(0.0);
    let backward = (gather_l + reduce_l - bwd_l).max(0.0);
    gather_l + reduce_l + (layers - 1.0) * (forward + backward)
}

/// The share of the passes' rate a data-parallel reduction and parameter gather take while
/// they run beside them (SMs and memory bandwidth held by NCCL's kernels): as the device's
/// profile measured it for a group of this size inside a node (`planc calibrate --gpus N`,
/// `[[overlap]]`), for the collective the plan's ZeRO stage runs (all-reduce without ZeRO,
/// reduce-scatter and all-gather with it).
///
/// Where the device's profile has no such measurement (an unprofiled catalog GPU, or a
/// one-GPU profile) and the group sits on NVLink inside a node, [`NVLINK_CONTENTION_FROM`]'s
/// measurement stands in: NCCL's kernels take their SMs and copy through HBM on any NVLink
/// part (one CTA a channel, the channel count set by the NVLink topology), so a collective
/// hidden behind the passes is not free there either. It was measured on two H200s and is
/// applied to every group size and NVLink GPU; a profile measured on the plan's own GPUs
/// and group size replaces it. Across nodes, [`CROSS_NODE_CONTENTION`]: the NICs feed NCCL
/// slower, but its ring keeps one CTA a channel resident for as long as the collective
/// runs, so the passes lose those SMs for longer. None on PCIe.
pub fn dp_contention(plan: &Plan, stage: u64, pl: &Placement) -> (f64, f64) {
    if pl.dp.size <= 1 {
        return (0.0, 0.0);
    }
    let gpu = &super::stage_group(plan, stage).gpu;
    let share = |op| group_contention(gpu, pl.dp, &pl.fabric, op);
    if plan.parallel.zero >= 1 {
        (
            share(Collective::ReduceScatter),
            share(Collective::AllGather),
        )
    } else {
        (share(Collective::AllReduce), 0.0)
    }
}

/// The share of the passes' rate a collective `op` over `group` takes while it runs beside
/// them ([`dp_contention`] says whence each figure comes): the device's profile for a group
/// of this size, else across nodes [`CROSS_NODE_CONTENTION`], else on NVLink
/// [`NVLINK_CONTENTION_FROM`]'s two-GPU measurement; none on PCIe.
pub(crate) fn group_contention(
    gpu: &Gpu,
    group: GroupShape,
    fabric: &Fabric,
    op: Collective,
) -> f64 {
    if group.size <= 1 {
        return 0.0;
    }
    if group.per_node < group.size {
        return CROSS_NODE_CONTENTION;
    }
    let name = match op {
        Collective::AllReduce => "AllReduce",
        Collective::ReduceScatter => "ReduceScatter",
        Collective::AllGather => "AllGather",
        _ => return 0.0,
    };
    gpu.profile
        .as_ref()
        .and_then(|p| p.contention(name, group.size as usize))
        .or_else(|| {
            (fabric.intra.kind == LinkKind::Nvlink)
                .then(|| nvlink_contention_measurement().and_then(|p| p.contention(name, 2)))
                .flatten()
        })
        .unwrap_or(0.0)
}

/// What the passes lose beside a data-parallel collective across nodes, as a share of its
/// time: a product's time with 16 of the H200's 132 SMs held by another kernel's resident
/// blocks, over its time alone, was 1.14 (8192³), 1.28 (8192 × 4096 × 4096) and 1.24
/// (16384 × 3072 × 768), mean 1.22, so the passes keep 1 / 1.22 of their rate and lose 0.18
/// of the time the collective runs (`runtime/tests/gpu/sm_share.py` on the lent H200,
/// 2026-11-29; a 1 GiB copy lost 0.4 %). 16 is NCCL's ring channel count across nodes of
/// eight H100s, one CTA a channel (NVIDIA/nccl#1453's log of three such nodes: `Channel
/// 00/16`). Taken for every GPU: an A100's 108 SMs would lose a little more.
pub const CROSS_NODE_CONTENTION: f64 = 0.18;

/// The shipped profile whose `[[overlap]]` points (two GPUs, products of 16384 × 3072 × 768
/// and 8192 × 4096 × 4096 beside a 64 MB collective; docs/measurements.md, re-measured
/// 2026-11-28) price the contention of NVLink groups that no profile of their own measured:
/// products lose 26 % of an all-reduce's time, 31 % of a reduce-scatter's, 30 % of an
/// all-gather's (41 % on 2026-11-24).
pub const NVLINK_CONTENTION_FROM: (&str, &str) = ("H200_SXM_141GB", "bf16");

fn nvlink_contention_measurement() -> Option<std::sync::Arc<crate::profile::Profile>> {
    crate::profile::shipped(NVLINK_CONTENTION_FROM.0, NVLINK_CONTENTION_FROM.1)
}

/// How long a pass keeps the data-parallel link's traffic hidden: its compute, and also its
/// own collectives when they run on other links (tensor- and context-parallel groups inside
/// a node, on NVLink, while the data-parallel group crosses nodes on the NICs). Where they
/// share the link, the reduction waits while they run.
fn hiding(pass: &PassTime, pl: &Placement) -> f64 {
    let crosses = |g: &GroupShape| g.per_node < g.size;
    if crosses(&pl.dp) && !crosses(&pl.tp) && !crosses(&pl.cp) {
        pass.total()
    } else {
        pass.compute
    }
}

/// The fraction of stage `stage`'s forward passes that run after its first backward pass
/// (the rest are the warm-up's).
fn steady_forwards(plan: &Plan, stage: u64, m: u64) -> f64 {
    let p = &plan.parallel;
    let pp = p.pp;
    let v = if p.schedule == Schedule::Interleaved {
        p.vpp.max(1)
    } else {
        1
    };
    let total = m.max(1) * v;
    let warmup = match p.schedule {
        Schedule::Gpipe => total,
        Schedule::OneFOneB | Schedule::ZeroBubble => pp - stage - 1,
        Schedule::Interleaved => (pp - stage - 1) * 2 + (v - 1) * pp,
    }
    .min(total);
    (total - warmup) as f64 / total as f64
}

/// The optimizer step: streaming the local optimizer state through HBM (or the host).
///
/// Megatron-LM's mixed-precision optimizer (`megatron/core/optimizer/optimizer.py`,
/// `MixedPrecisionOptimizer.step`; the same flow in 2021-2022's `optimizer.py`) makes
/// several passes over its gradients and parameters besides the fused Adam kernel, each a
/// separate multi-tensor kernel that streams its tensors through HBM:
/// - `zero_grad_buffer()` at the start of `train_step` clears the fp32 gradient buffer of
///   every local parameter (write 4 bytes; the whole buffer, not the optimizer's shard);
/// - with fp16, `_unscale_main_grads_and_check_for_nan` (read and write 4); bf16 has no loss
///   scale;
/// - `clip_grad_norm` reads every gradient for the norm (`multi_tensor_l2norm`, read 4),
///   where `--clip-grad` is above 0 (`train.grad_clip`); planc's runtime takes it to clip
///   and, under fp16, to find the loss scale's overflows;
/// - the Adam (or SGD) update itself;
/// - `_copy_main_params_to_model_params` reads the fp32 master again to write the 16-bit
///   weight (read 4, write 2).
///
/// The distributed optimizer shards the routed experts' `experts` of the `params` over the
/// expert data-parallel group, the rest over the data-parallel group.
pub fn optimizer_time(plan: &Plan, stage: u64, params: f64, experts: f64, dev: &Device) -> f64 {
    let p = &plan.parallel;
    let (dense_shard, expert_shard) = if p.zero >= 1 {
        shard_groups(plan)
    } else {
        (1.0, 1.0)
    };
    let experts = experts.min(params);
    let local = (params - experts) / dense_shard + experts / expert_shard;
    if let Some(path) = super::eager::path(plan).filter(|_| p.offload == Offload::None) {
        let whole: f64 = (0..p.pp).map(|s| stage_params(plan, s)).sum();
        let tensors = super::eager::parameter_tensors(plan, plan.model.layers as f64, true, true)
            * params
            / whole.max(1.0);
        return super::eager::optimizer_seconds(plan, path, params, local, tensors, dev);
    }
    // The update reads the gradient, reads and writes the master weights and moments
    // (`Plan::optimizer_state_bytes`), then (with a separate fp32 master) reads the master
    // again to write the 16-bit weights. An fp32 optimizer's gradient is fp32 (Megatron's
    // main gradients); a bf16 one reads the buffer's. Master weights kept as remainders are
    // joined to the 16-bit weights inside the update (both read and written there); a bf16
    // optimizer steps the weights themselves.
    let w = plan.train.precision.bytes();
    let (master, moments) = plan.optimizer_state_bytes();
    let (grad_read, weights, copy_to_model) = match plan.parallel.optimizer_dtype {
        Some(OptimizerDtype::Bf16) => (plan.grad_bytes(), w, 0.0),
        Some(OptimizerDtype::Fp32Remainders) if master == 2.0 => (4.0, w, 0.0),
        // planc's update writes the 16-bit weights in the same pass (`adamw_flat`, 30 bytes
        // a parameter as `planc calibrate`'s `[[optimizer]]` point counts them).
        _ if master > 0.0 && plan.framework() == Framework::Planc => (4.0, 0.0, w),
        _ if master > 0.0 => (4.0, 0.0, master + w),
        // fp32 training: the weights are the master.
        _ => (4.0, w, 0.0),
    };
    let update = grad_read + 2.0 * (master + moments + weights);
    let unscale = if plan.train.precision == Precision::Fp16 {
        8.0
    } else {
        0.0
    };
    // The norm reads the gradients, zeroing writes the buffer, in its type.
    let grad = plan.grad_bytes();
    let takes_norm = match plan.framework() {
        Framework::Planc => {
            crate::plan::planc_takes_grad_norm(plan.train.precision, plan.train.run.grad_clip)
        }
        _ => plan.train.run.grad_clip > 0.0,
    };
    let grad_norm = if takes_norm { grad } else { 0.0 };
    // ZeRO-2 and -3 keep only the shard's gradients; otherwise the buffer is whole. planc's
    // runtime zeroes only what the step's first weight gradients do not overwrite.
    let whole_buffer = if p.zero >= 2 { local } else { params };
    let grad_buffer = if plan.framework() == Framework::Planc {
        whole_buffer * super::buffers::zeroed_gradient_share(plan, stage)
    } else {
        whole_buffer
    };
    if p.offload != Offload::None {
        // The host steps the shard (`cost::offload`); the GPU only clears its buffer.
        return super::offload::optimizer_tail(plan, local, dev.gpu)
            + dev.memory(grad_buffer * grad);
    }
    dev.memory(local * (update + copy_to_model + unscale + grad_norm) + grad_buffer * grad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::memory::layer_params_per_gpu;

    /// Both parts of [`dp_exposed_parts`]: what the stage's step pays in all.
    fn dp_exposed(plan: &Plan, stage: u64, params: f64, st: &StageTime, pl: &Placement) -> f64 {
        let (exposed, contention) = dp_exposed_parts(plan, stage, params, st, pl);
        exposed + contention
    }
    use crate::catalog::Catalog;

    fn a100() -> Device<'static> {
        Device {
            gpu: Catalog::builtin().gpu("A100_SXM_80GB").unwrap(),
            precision: Precision::Bf16,
        }
    }

    /// The catalog's H100, priced at `precision`.
    fn on_h100(precision: Precision) -> Device<'static> {
        Device {
            gpu: Catalog::builtin().gpu("H100_SXM_80GB").unwrap(),
            precision,
        }
    }

    /// An H200 whose profile measured the standard attention core at 50 TFLOP/s (causal
    /// forward FLOPs) for head size 64.
    #[test]
    fn fp8_products_take_the_16_bit_profiles_fp8_curve_where_it_has_one() {
        use crate::profile::{GemmPoint, Profile};
        let point = |e: f64| GemmPoint {
            m: 8192,
            n: 8192,
            k: 8192,
            seconds: 1e-3,
            tflops: 1.0,
            efficiency: e,
        };
        let with = |fp8_gemm: Vec<GemmPoint>| {
            let mut gpu = Catalog::builtin().gpu("H100_SXM_80GB").unwrap().clone();
            gpu.profile = Some(std::sync::Arc::new(Profile {
                gemm: vec![point(0.8)],
                fp8_gemm,
                ..Profile::empty_for_tests()
            }));
            gpu
        };
        let x = 8192.0;
        let flops = 2.0 * x * x * x;
        let gpu = with(vec![point(0.5)]);
        let (fp8, bf16) = (
            Device {
                gpu: &gpu,
                precision: Precision::Fp8,
            },
            Device {
                gpu: &gpu,
                precision: Precision::Bf16,
            },
        );
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
        assert!(close(bf16.gemm(x, x, x), flops / (bf16.peak() * 0.8)));
        assert!(close(fp8.gemm(x, x, x), flops / (fp8.peak() * 0.5)));
        // A profile without fp8 products: the catalog's efficiency at the fp8 peak, as
        // before planc timed them (compute-bound at this shape).
        let old = with(vec![]);
        let fp8_old = Device {
            gpu: &old,
            precision: Precision::Fp8,
        };
        assert!(close(
            fp8_old.gemm(x, x, x),
            fp8_old.catalog_gemm_math(x, x, x)
        ));
        assert!(!close(fp8_old.gemm(x, x, x), flops / (fp8.peak() * 0.5)));
        // planc's forward product measured the curve, fast: the gradients' products run
        // split, slower. The catalog's figure was measured split: the forward runs faster.
        let f = FP8_FAST_ACCUMULATION;
        let directions = |d: &Device| (d.product(x, x, x, true), d.product(x, x, x, false));
        let (fwd, bwd) = directions(&fp8);
        assert!(close(fwd, fp8.gemm(x, x, x)) && close(bwd, f * fp8.gemm(x, x, x)));
        let (fwd, bwd) = directions(&fp8_old);
        assert!(close(fwd, fp8_old.gemm(x, x, x) / f) && close(bwd, fp8_old.gemm(x, x, x)));
        assert_eq!(directions(&bf16), (bf16.gemm(x, x, x), bf16.gemm(x, x, x)));
    }

    #[test]
    fn fp8_forward_products_accumulate_fast_and_their_gradients_split() {
        // Llama 3 8B's qkv on an H100 without a profile: the forward at the catalog's
        // (split) rate sped up by fast accumulation, the two gradient products at it.
        let p = crate::check::check_source(
            "t.tp",
            "cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }
             model m { preset = \"llama3-8b\" }
             train { global_batch = 32, precision = fp8, attention = flash }
             parallel { tp = 1, pp = 1, dp = 8, micro_batch = 1 }",
        )
        .plan
        .unwrap();
        let dev = Device {
            gpu: &p.cluster.groups[0].gpu,
            precision: p.train.precision,
        };
        let pl = placement(&p, &p.cluster.groups[0]);
        let ops: Vec<Op> = super::super::ops::layer_forward(&p)
            .into_iter()
            .filter(|o| o.id == OpId::QkvProj)
            .collect();
        let OpKind::Gemm { m, n, k } = ops[0].kind else {
            panic!("{:?}", ops[0]);
        };
        let split = dev.gemm(m, n, k);
        let fwd = time_ops(&ops, &dev, &pl);
        assert!((fwd.compute - split / FP8_FAST_ACCUMULATION).abs() < 1e-12);
        let bwd = layer_backward(&p, &ops, fwd, &dev, &pl);
        assert!(
            (bwd.compute - 2.0 * split).abs() < 1e-9 * split,
            "{bwd:?} {split}"
        );
        // Only the math speeds up: a product under the launch floor stays there.
        assert_eq!(dev.product(16.0, 16.0, 16.0, true), KERNEL_FLOOR_S);
        assert_eq!(dev.product(16.0, 16.0, 16.0, false), KERNEL_FLOOR_S);
    }

    fn h200_with_standard_attention() -> Gpu {
        use crate::profile::{AttentionPoint, Profile};
        let mut gpu = Catalog::builtin().gpu("H200_SXM_141GB").unwrap().clone();
        gpu.profile = Some(std::sync::Arc::new(Profile {
            attention: vec![AttentionPoint {
                kind: "standard".into(),
                batch_heads: 192,
                seq: 1024,
                head_dim: 64,
                seconds: 0.0,
                tflops: 50.0,
            }],
            ..Profile::empty_for_tests()
        }));
        gpu
    }

    fn one_gpu() -> Placement {
        use crate::plan::{Link, LinkKind};
        let one = GroupShape {
            size: 1,
            per_node: 1,
        };
        Placement {
            fabric: Fabric {
                intra: Link {
                    kind: LinkKind::Nvlink,
                    bandwidth: 450e9,
                    latency: 2e-6,
                },
                inter: None,
                inter_per_gpu: 0.0,
                pair_bus_bandwidth: None,
                pre_ampere: false,
                profile: None,
            },
            tp: one,
            cp: one,
            dp: one,
            ep: one,
            edp: one,
            pp_crosses_nodes: false,
        }
    }

    #[test]
    fn a_profiles_norms_price_plancs_kernels_only_and_their_own_backward() {
        use crate::profile::NormPoint;
        let mut gpu = h200_with_standard_attention();
        let mut p = (**gpu.profile.as_ref().unwrap()).clone();
        let bytes = 2.0 * 16384.0 * 768.0 * 2.0;
        for (pass, moved, gb_per_s) in [
            ("forward", bytes, 2000.0),
            ("backward", 2.0 * bytes, 2500.0),
        ] {
            p.norms.push(NormPoint {
                pass: pass.into(),
                rows: 16384,
                width: 768,
                seconds: moved / (gb_per_s * 1e9),
                gb_per_s,
            });
        }
        gpu.profile = Some(std::sync::Arc::new(p));
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        assert!((dev.norm(bytes, 768.0, true) - bytes / 2000e9).abs() < 1e-12);
        assert!((dev.norm_backward(bytes, 768.0, true) - 2.0 * bytes / 2500e9).abs() < 1e-12);
        // Another framework's norm: a memory-bound kernel of those bytes, backward twice it.
        assert_eq!(dev.norm(bytes, 768.0, false), dev.memory(bytes));
        assert_eq!(
            dev.norm_backward(bytes, 768.0, false),
            2.0 * dev.memory(bytes)
        );
        // A layer's backward takes the measured backward, not twice the measured forward.
        let op = |planc_kernel| Op {
            id: OpId::InputNorm,
            kind: OpKind::Norm {
                bytes,
                width: 768.0,
                planc_kernel,
            },
        };
        let extra = own_backwards(&[op(true)], &dev).compute;
        assert!((extra - (2.0 * bytes / 2500e9 - 2.0 * bytes / 2000e9)).abs() < 1e-12);
        assert_eq!(own_backwards(&[op(false)], &dev).compute, 0.0);
    }

    #[test]
    fn a_profiles_activations_price_plancs_kernels_only_and_their_own_backward() {
        use crate::profile::ActivationPoint;
        let mut gpu = h200_with_standard_attention();
        let mut p = (**gpu.profile.as_ref().unwrap()).clone();
        let bytes = super::super::ops::activation_bytes(Mlp::Gelu, 16384.0, 3072.0, 2.0);
        for (pass, moved, gb_per_s) in [
            ("forward", bytes, 2400.0),
            ("backward", 2.0 * bytes, 3000.0),
        ] {
            p.activations.push(ActivationPoint {
                kind: "gelu".into(),
                pass: pass.into(),
                rows: 16384,
                width: 3072,
                seconds: moved / (gb_per_s * 1e9),
                gb_per_s,
            });
        }
        gpu.profile = Some(std::sync::Arc::new(p));
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        let gelu = Mlp::Gelu;
        assert!((dev.activation(bytes, 3072.0, gelu, true) - bytes / 2400e9).abs() < 1e-12);
        let bwd = dev.activation_backward(bytes, 3072.0, gelu, true);
        assert!((bwd - 2.0 * bytes / 3000e9).abs() < 1e-12);
        // Another framework's activation, or one the profile did not measure: a memory-bound
        // kernel of those bytes, backward twice it.
        for (mlp, planc) in [(gelu, false), (Mlp::Swiglu, true)] {
            assert_eq!(dev.activation(bytes, 3072.0, mlp, planc), dev.memory(bytes));
            assert_eq!(
                dev.activation_backward(bytes, 3072.0, mlp, planc),
                2.0 * dev.memory(bytes)
            );
        }
        // A layer's backward takes the measured backward, not twice the measured forward.
        let op = |planc_kernel| Op {
            id: OpId::MlpActivation,
            kind: OpKind::Activation {
                bytes,
                width: 3072.0,
                mlp: gelu,
                planc_kernel,
            },
        };
        let extra = own_backwards(&[op(true)], &dev).compute;
        assert!((extra - (2.0 * bytes / 3000e9 - 2.0 * bytes / 2400e9)).abs() < 1e-12);
        assert_eq!(own_backwards(&[op(false)], &dev).compute, 0.0);
    }

    #[test]
    fn a_profiles_fused_attention_prices_plancs_kernel_only() {
        use crate::profile::AttentionPoint;
        let mut gpu = h200_with_standard_attention();
        let mut p = (**gpu.profile.as_ref().unwrap()).clone();
        for (kind, tflops) in [("flash", 150.0), ("flash_backward", 60.0)] {
            p.attention.push(AttentionPoint {
                kind: kind.into(),
                batch_heads: 192,
                seq: 1024,
                head_dim: 64,
                seconds: 0.0,
                tflops,
            });
        }
        gpu.profile = Some(std::sync::Arc::new(p));
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        let flops = 1e12;
        assert!(
            (dev.flash(flops, 1024.0, 64.0, FusedKernel::Planc) - flops / 150e12).abs() < 1e-12
        );
        assert!(
            (dev.flash_backward(flops, 1024.0, 64.0, FusedKernel::Planc) - flops / 60e12).abs()
                < 1e-12
        );
        // Another framework runs FlashAttention-2: its published H200 (H100) rates at the
        // shape they were published at, the backward's 2.5× work at its own rate; at the
        // profile's shape, those rates read through the kernel's measured shape factor.
        let fa2 = FusedKernel::FlashAttention2;
        assert!((dev.flash(flops, 16384.0, 128.0, fa2) - flops / 335e12).abs() < 1e-12);
        let bwd = dev.flash_backward(flops, 16384.0, 128.0, fa2);
        assert!((bwd - 2.5 * flops / 322e12).abs() < 1e-12);
        let shape = super::super::fused_shape::factor(fa2, false, 1024.0, 64.0);
        assert!((dev.flash(flops, 1024.0, 64.0, fa2) - flops / (335e12 * shape)).abs() < 1e-12);
    }

    #[test]
    fn flash_attention_without_published_rates_runs_at_a_fraction_of_the_products_rate() {
        let d = a100();
        assert!(d.gpu.flash_attention.is_none());
        let flops = 1e12;
        let fa = flops / (d.matrix_rate() * FLASH_EFFICIENCY);
        let fa2 = FusedKernel::FlashAttention2;
        assert!((d.flash(flops, 16384.0, 128.0, fa2) - fa).abs() < 1e-12);
        assert!((d.flash_backward(flops, 16384.0, 128.0, fa2) - 2.5 * fa).abs() < 1e-12);
        // A shorter sequence keeps the kernel's measured shape factor, pass by pass.
        let factor = |backward| super::super::fused_shape::factor(fa2, backward, 2048.0, 128.0);
        assert!((d.flash(flops, 2048.0, 128.0, fa2) - fa / factor(false)).abs() < 1e-12);
        assert!(
            (d.flash_backward(flops, 2048.0, 128.0, fa2) - 2.5 * fa / factor(true)).abs() < 1e-12
        );
        // The published H100 rates are 16-bit measurements: fp8 keeps the fraction.
        let fp8 = on_h100(Precision::Fp8);
        let fa = flops / (fp8.matrix_rate() * FLASH_EFFICIENCY);
        assert!((fp8.flash(flops, 16384.0, 128.0, fa2) - fa).abs() < 1e-12);
    }

    #[test]
    fn transformer_engines_attention_on_hopper_is_cudnns_and_elsewhere_flashattention_2s() {
        // Shah et al. 2024, Figs. 5-6 on an H100: cuDNN 539 / 516 TFLOP/s, FlashAttention-2
        // 335 / 322; both burst figures at the sustained clock's share.
        let d = on_h100(Precision::Bf16);
        let flops = 1e15;
        let fa2 = d.flash(flops, 16384.0, 128.0, FusedKernel::FlashAttention2);
        let cudnn = d.flash(flops, 16384.0, 128.0, FusedKernel::Cudnn);
        assert!((fa2 / cudnn - 539.0 / 335.0).abs() < 1e-9);
        let (fa2_b, cudnn_b) = (
            d.flash_backward(flops, 16384.0, 128.0, FusedKernel::FlashAttention2),
            d.flash_backward(flops, 16384.0, 128.0, FusedKernel::Cudnn),
        );
        assert!((fa2_b / cudnn_b - 516.0 / 322.0).abs() < 1e-9);
        // Where cuDNN's kernel was not measured (an A100), the framework's FlashAttention-2.
        let a = a100();
        assert_eq!(
            a.flash(flops, 8192.0, 128.0, FusedKernel::Cudnn),
            a.flash(flops, 8192.0, 128.0, FusedKernel::FlashAttention2)
        );
        // Which kernel a plan's attention is: Megatron-Core with Transformer Engine, cuDNN's;
        // its local path is unfused (`kernels = eager`); PyTorch's SDPA, FlashAttention-2.
        let kernel = |framework: &str, kernels: &str| {
            let plan = crate::check::check_source(
                "kernel.tp",
                &format!(
                "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                 model m {{ preset = \"llama3-8b\" }}
                 train {{ global_batch = 8, precision = bf16, optimizer = adamw, attention = flash }}
                 parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 1 }}
                 job j {{ framework = {framework}, {kernels} }}"
                ),
            )
            .plan
            .unwrap();
            super::super::ops::layer_forward(&plan)
                .iter()
                .find_map(|o| match o.kind {
                    OpKind::FlashAttention { kernel, .. } => Some(kernel),
                    _ => None,
                })
        };
        assert_eq!(
            kernel("megatron", "kernels = fused"),
            Some(FusedKernel::Cudnn)
        );
        assert_eq!(
            kernel("torch", "kernels = fused"),
            Some(FusedKernel::FlashAttention2)
        );
        assert_eq!(kernel("planc", "kernels = fused"), Some(FusedKernel::Planc));
        // Where the job states the kernel, that one; planc runs its own whatever is written.
        let stated = |framework, k| {
            kernel(
                framework,
                &format!("kernels = fused, attention_kernel = {k}"),
            )
        };
        assert_eq!(stated("torch", "triton"), Some(FusedKernel::Triton));
        assert_eq!(stated("torch", "cudnn"), Some(FusedKernel::Cudnn));
        assert_eq!(
            stated("megatron", "flash2"),
            Some(FusedKernel::FlashAttention2)
        );
        assert_eq!(stated("planc", "triton"), Some(FusedKernel::Planc));
    }

    #[test]
    fn flashattention_in_triton_takes_dao_2023s_ratios_over_flashattention_2() {
        // Dao 2023, section 4.1 (A100 80GB): FlashAttention-2 1.3-1.5x faster than the
        // Triton kernel forward, about 2x backward; at any shape, with published rates (an
        // H100) or without (an A100).
        let h = on_h100(Precision::Bf16);
        let (fa2, triton) = (FusedKernel::FlashAttention2, FusedKernel::Triton);
        let flops = 1e12;
        for d in [h, a100()] {
            for (seq, head) in [(2048.0, 128.0), (16384.0, 64.0)] {
                let fwd = d.flash(flops, seq, head, triton) / d.flash(flops, seq, head, fa2);
                let bwd = d.flash_backward(flops, seq, head, triton)
                    / d.flash_backward(flops, seq, head, fa2);
                assert!((fwd - 1.4).abs() < 1e-9, "forward {fwd}");
                assert!((bwd - 2.0).abs() < 1e-9, "backward {bwd}");
            }
            // It tiles a head to the next power of two: 112 (MPT 30B's) runs as 128.
            let padded = flops * 128.0 / 112.0;
            assert_eq!(
                d.flash(flops, 8192.0, 112.0, triton),
                d.flash(padded, 8192.0, 128.0, triton)
            );
            assert_eq!(
                d.flash_backward(flops, 8192.0, 112.0, triton),
                d.flash_backward(padded, 8192.0, 128.0, triton)
            );
            assert!(d.flash(flops, 8192.0, 112.0, fa2) < d.flash(padded, 8192.0, 128.0, fa2));
        }
    }

    #[test]
    fn fp8_products_run_at_the_fp8_efficiency_measured_for_them() {
        // 8192³ E4M3 on the lent H200: 1352 TFLOP/s in a burst (0.68 of 1978.9), 1265 after a
        // minute of products (0.94 of the burst); bf16 keeps its own 0.79 and 0.84.
        let fp8 = on_h100(Precision::Fp8);
        assert!((fp8.matrix_rate() - 1978.9e12 * 0.68 * 0.94).abs() < 1e6);
        let bf16 = on_h100(Precision::Bf16);
        assert!((bf16.matrix_rate() - 989.4e12 * 0.79 * 0.84).abs() < 1e6);
    }

    #[test]
    fn flashattention_2_on_hopper_runs_at_its_published_rates_not_the_products() {
        // Shah et al. 2024, Figs. 5-6: 335 TFLOP/s causal forward, 322 backward on an H100,
        // well under the 0.79 × 989 TFLOP/s cuBLAS reaches; both burst figures, kept at the
        // sustained clock's share through training.
        let d = on_h100(Precision::Bf16);
        let sustained = d.gpu.sustained_clock;
        let flops = 4.4e12;
        let fwd = d.flash(flops, 131072.0, 128.0, FusedKernel::FlashAttention2);
        assert!((fwd - flops / (335e12 * sustained)).abs() < 1e-12);
        let bwd = d.flash_backward(flops, 131072.0, 128.0, FusedKernel::FlashAttention2);
        assert!((bwd - 2.5 * flops / (322e12 * sustained)).abs() < 1e-12);
        assert!(flops / fwd < 0.5 * d.matrix_rate());
    }

    #[test]
    fn compute_bound_kernels_run_at_the_sustained_clock_unless_a_profile_measured_them() {
        // The lent H100 kept 0.84 of its burst product rate through a minute of products
        // (runtime/tests/gpu/sustained.py); its copies kept their bandwidth.
        let h100 = Catalog::builtin().gpu("H100_SXM_80GB").unwrap();
        assert_eq!(h100.sustained_clock, 0.84);
        let burst = Gpu {
            sustained_clock: 1.0,
            ..h100.clone()
        };
        let dev = |gpu| Device {
            gpu,
            precision: Precision::Bf16,
        };
        let (held, fresh) = (dev(h100), dev(&burst));
        let n = 8192.0;
        let ratio = held.gemm(n, n, n) / fresh.gemm(n, n, n);
        assert!((ratio - 1.0 / 0.84).abs() < 1e-9, "{ratio}");
        assert_eq!(held.memory(1e9), fresh.memory(1e9));
        // A profile holds the clock it was measured at: no second discount.
        let profiled = Gpu {
            profile: Some(std::sync::Arc::new(
                crate::profile::Profile::empty_for_tests(),
            )),
            ..h100.clone()
        };
        let burst_profiled = Gpu {
            sustained_clock: 1.0,
            ..profiled.clone()
        };
        assert_eq!(
            dev(&profiled).gemm(n, n, n),
            dev(&burst_profiled).gemm(n, n, n)
        );
        // Unmeasured devices keep their rates.
        let a100 = Catalog::builtin().gpu("A100_SXM_80GB").unwrap();
        assert_eq!(a100.sustained_clock, 1.0);
    }

    /// GPT-2's standard attention core on one GPU (micro-batch 16 × 12 heads of 64 × 1024).
    fn gpt2_core(planc: bool, recomputes_probs: bool) -> Core {
        Core {
            batch_heads: 192.0,
            seq: 1024.0,
            seq_full: 1024.0,
            head_dim: 64.0,
            element: 2.0,
            dropout: false,
            planc,
            recomputes_probs,
        }
    }

    fn core_op(core: Core) -> Op {
        Op {
            id: OpId::AttentionCore,
            kind: OpKind::StandardAttention(core),
        }
    }

    #[test]
    fn a_measured_standard_attention_core_prices_plancs_kernels_at_once() {
        let gpu = h200_with_standard_attention();
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        let c = gpt2_core(true, false);
        let (bh, s, d) = (c.batch_heads, c.seq, c.head_dim);
        let t = time_ops(&[core_op(c)], &dev, &one_gpu());
        // 2·bh·s²·d causal FLOPs at 50 TFLOP/s; the FLOPs counted stay the products'.
        let want = 2.0 * bh * s * s * d / 50e12;
        assert!((t.compute - want).abs() < 1e-12, "{} vs {want}", t.compute);
        assert_eq!(t.flops, 4.0 * bh * s * s * d);
        // Megatron-LM's kernels are not planc's: their passes one by one.
        let m = gpt2_core(false, false);
        let passes: f64 = m.forward().iter().map(|x| dev.pass(x.pass)).sum();
        assert_eq!(dev.standard_attention(&m), passes);
        assert!((passes - want).abs() > 1e-6);
    }

    #[test]
    fn a_standard_attention_core_is_priced_by_its_passes_where_nothing_measured_it() {
        let plain = Catalog::builtin().gpu("H200_SXM_141GB").unwrap();
        let dev = Device {
            gpu: plain,
            precision: Precision::Bf16,
        };
        let c = gpt2_core(true, false);
        let (bh, s, d) = (c.batch_heads, c.seq, c.head_dim);
        let square = bh * s * s * 2.0;
        let scores = dev.square_product(bh, s, s, d, square);
        let reading = dev.square_product(bh, s, d, s, square);
        let fwd = dev.standard_attention(&c);
        let want = scores + dev.memory(2.0 * square) + reading;
        assert!((fwd - want).abs() < 1e-12, "{fwd} vs {want}");
        // Backward: one product writing the square, three reading it, the softmax's
        // backward over P and dP: not twice the forward.
        let bwd = dev.standard_attention_backward(&c);
        let want = scores + 3.0 * reading + dev.memory(3.0 * square);
        assert!((bwd - want).abs() < 1e-12, "{bwd} vs {want}");
        assert!((bwd - 2.0 * fwd).abs() > 0.05 * fwd, "{bwd} vs {fwd}");
        // The scores' product: its math, then writing the 0.4 GB square.
        let math = dev.catalog_gemm_math(bh * s, s, d);
        assert!((scores - math - dev.memory(square)).abs() < 1e-12);
        assert!(scores > dev.gemm(bh * s, s, d));
        // A layer's backward takes the core's own.
        let extra = own_backwards(&[core_op(c)], &dev);
        assert!((extra.compute - (bwd - 2.0 * fwd)).abs() < 1e-12);
        assert_eq!(extra.flops, 0.0);
        // Recomputed probabilities: the scores and softmax again, their product's FLOPs.
        let r = gpt2_core(true, true);
        let again = dev.standard_attention_backward(&r) - bwd;
        assert!((again - scores - dev.memory(2.0 * square)).abs() < 1e-12);
        assert_eq!(
            own_backwards(&[core_op(r)], &dev).flops,
            2.0 * bh * s * s * d
        );
    }

    /// An H200 whose profile measured the standard core at GPT-2's shape: its forward at
    /// `forward` TFLOP/s, its backward at `backward` where given.
    fn h200_measuring_standard(forward: f64, backward: Option<f64>) -> Gpu {
        use crate::profile::{AttentionPoint, Profile};
        let point = |kind: &str, tflops| AttentionPoint {
            kind: kind.into(),
            batch_heads: 192,
            seq: 1024,
            head_dim: 64,
            seconds: 0.0,
            tflops,
        };
        let mut attention = vec![point("standard", forward)];
        attention.extend(backward.map(|b| point("standard_backward", b)));
        Gpu {
            profile: Some(std::sync::Arc::new(Profile {
                attention,
                ..Profile::empty_for_tests()
            })),
            ..Catalog::builtin().gpu("H200_SXM_141GB").unwrap().clone()
        }
    }

    #[test]
    fn a_measured_standard_forward_carries_its_shortfall_to_an_unmeasured_backward() {
        let gpu = h200_measuring_standard(30.0, None);
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        let c = gpt2_core(true, true);
        let modelled = |steps: Vec<super::standard_attention::Step>| -> f64 {
            steps.iter().map(|x| dev.pass(x.pass)).sum()
        };
        let short = dev.standard_attention(&c) / modelled(c.forward());
        assert!(short > 1.5, "{short}");
        let bwd = dev.standard_attention_backward(&c);
        let want = short * (modelled(c.backward()) + modelled(c.recompute()));
        assert!((bwd - want).abs() < 1e-12, "{bwd} vs {want}");
        // A measured backward replaces its passes; the recomputation keeps the shortfall.
        let gpu = h200_measuring_standard(30.0, Some(20.0));
        let dev = Device {
            gpu: &gpu,
            precision: Precision::Bf16,
        };
        let bwd = dev.standard_attention_backward(&c);
        let want = c.causal_flops() / 20e12 + short * modelled(c.recompute());
        assert!((bwd - want).abs() < 1e-12, "{bwd} vs {want}");
    }

    #[test]
    fn a_large_gemm_runs_at_the_achievable_matrix_rate() {
        let d = a100();
        let n = 8192.0;
        let want = 2.0 * n * n * n / (312e12 * d.gpu.gemm_efficiency);
        assert!((d.gemm(n, n, n) - want).abs() < 1e-12);
    }

    #[test]
    fn thin_products_pay_for_their_tiles_fixed_work() {
        let d = a100();
        // The same FLOPs with k = 1536 instead of 8192: (1536 + 64) / 1536 over
        // (8192 + 64) / 8192.
        let (m, n) = (2048.0, 12288.0);
        let square = d.gemm(m, n, 8192.0) * 1536.0 / 8192.0;
        let thin = d.gemm(m, n, 1536.0);
        let want = (1600.0 / 1536.0) / (8256.0 / 8192.0);
        assert!((thin / square - want).abs() < 1e-9, "{}", thin / square);
    }

    #[test]
    fn small_streaming_kernels_do_not_reach_the_copy_bandwidth() {
        let d = a100();
        let rate = d.gpu.hbm_bandwidth * d.gpu.memory_efficiency;
        let big = 1e9;
        assert!((d.memory(big) - (big / rate + KERNEL_RAMP_S)).abs() < 1e-15);
        // 12.6 MB at ~1.7 TB/s: 7.3 µs of bytes and 2 µs of ramp.
        let small = 12.6e6;
        let slowdown = d.memory(small) / (small / rate);
        assert!(slowdown > 1.2 && slowdown < 1.35, "{slowdown}");
    }

    #[test]
    fn ragged_dimensions_pay_for_whole_tiles() {
        let d = a100();
        assert_eq!(d.gemm(129.0, 8192.0, 8192.0), d.gemm(256.0, 8192.0, 8192.0));
        assert!(d.gemm(128.0, 8192.0, 8192.0) < d.gemm(129.0, 8192.0, 8192.0));
    }

    #[test]
    fn a_matrix_vector_product_is_bound_by_memory() {
        let d = a100();
        // 8192×8192 bf16 weights read once: 134 MB at 2.0 TB/s × efficiency.
        let bytes = 2.0 * (8192.0 * 8192.0 + 8192.0 + 1.0 * 8192.0);
        let want = bytes / (d.gpu.hbm_bandwidth * d.gpu.memory_efficiency) + KERNEL_RAMP_S;
        assert!((d.gemm(1.0, 8192.0, 8192.0) - want).abs() < 1e-12);
    }

    #[test]
    fn tiny_kernels_cost_a_launch() {
        let d = a100();
        assert_eq!(d.gemm(8.0, 8.0, 8.0), KERNEL_FLOOR_S);
        assert_eq!(d.memory(16.0), KERNEL_FLOOR_S);
    }

    fn checked(text: &str) -> Plan {
        let c = crate::check::check_source("t.tp", text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    fn a100_plan(precision: &str, zero: u64, dp: u64) -> Plan {
        checked(&format!(
            "cluster c {{ nodes = {nodes}, gpus_per_node = 8, gpu = A100_SXM_80GB
                 inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s }} }}
             model m {{ layers = 8, hidden = 4096, heads = 32, vocab = 51200, seq_len = 2048 }}
             train {{ global_batch = {dp}, precision = {precision}, optimizer = adam, attention = standard }}
             parallel {{ tp = 8, pp = 1, dp = {dp}, micro_batch = 1, zero = {zero}, recompute = none }}",
            nodes = dp
        ))
    }

    /// The first stage's placement, pass times and held parameters.
    fn stage0(plan: &Plan) -> (Placement, StageTime, f64) {
        let (dev, pl) = crate::cost::first_group(plan);
        let st = stage_time(plan, 0, &dev, &pl);
        (pl, st, stage_params(plan, 0))
    }

    #[test]
    fn passes_slowed_beside_a_link_bound_reduction_hide_more_of_it() {
        // ZeRO-2 across four nodes, link-bound: the reduce-scatters outlast the passes.
        let plan = a100_plan("bf16", 2, 4);
        let (pl, st, params) = stage0(&plan);
        let free = dp_exposed_beside(&plan, 0, params, &st, &pl, (0.0, 0.0));
        let slowed = dp_exposed_beside(&plan, 0, params, &st, &pl, (0.18, 0.18));
        assert_eq!(free.1, 0.0);
        assert!(slowed.1 > 0.0, "{slowed:?}");
        // The passes run longer by what they lose, and hide that much more of the link:
        // the step grows by less than the loss, never by less than nothing.
        let hidden_more = free.0 - slowed.0;
        assert!(hidden_more > 0.0, "{free:?} {slowed:?}");
        assert!(
            hidden_more <= slowed.1 * (1.0 + 1e-12),
            "{free:?} {slowed:?}"
        );
    }

    #[test]
    fn zero2_reductions_hide_behind_the_tensor_parallel_collectives_on_other_links() {
        // tp 8 inside each node on NVLink, dp 4 across nodes on the NICs, link-bound: the
        // reduce-scatters run while the passes compute and while their NVLink collectives
        // run; only where those share the NICs (tp across nodes) do they hide behind
        // compute alone.
        let plan = a100_plan("bf16", 2, 4);
        let (mut pl, st, params) = stage0(&plan);
        assert!(st.forward.comm > 0.0 && st.backward.comm > 0.0);
        let mut bare = st;
        bare.forward.comm = 0.0;
        bare.backward.comm = 0.0;
        // What waits for the link, the passes' contention aside (`dp_contention`).
        let exposed = |st: &StageTime, pl: &Placement| {
            dp_exposed_beside(&plan, 0, params, st, pl, (0.0, 0.0)).0
        };
        let beside = exposed(&st, &pl);
        let compute_only = exposed(&bare, &pl);
        let m = plan.parallel.grad_accum(plan.train.global_batch) as f64;
        // Each micro-batch's reduction, and the parameter gather after the last one.
        let hidden_more = m
            * (st.backward.comm + st.forward.comm * steady_forwards(&plan, 0, m as u64))
            + st.forward.comm;
        assert!(
            (compute_only - beside - hidden_more).abs() < 1e-12,
            "{compute_only} - {beside} != {hidden_more}"
        );
        pl.tp.per_node = 4;
        assert_eq!(exposed(&st, &pl), compute_only);
    }

    /// GPT-2 124M over dp 2 on one H200 node, its device profiled with products that
    /// lose `slowdown` of each second a 2-GPU `op` runs beside them.
    pub(crate) fn dp2_h200_with_contention(zero: u64, op: &str, slowdown: f64) -> Plan {
        use crate::profile::{OverlapPoint, Profile};
        let mut plan = checked(&format!(
            "cluster c {{ nodes = 1, gpus_per_node = 2, gpu = H200_SXM_141GB }}
             model m {{ layers = 12, hidden = 768, heads = 12, vocab = 50304, seq_len = 1024 }}
             train {{ global_batch = 32, precision = bf16, optimizer = adamw, attention = flash }}
             parallel {{ tp = 1, pp = 1, dp = 2, micro_batch = 16, zero = {zero}, recompute = none }}"
        ));
        let point = OverlapPoint {
            op: op.into(),
            gpus: 2,
            bytes: 64 << 20,
            m: 16384,
            n: 3072,
            k: 768,
            products_alone_s: 1e-3,
            products_beside_s: 1e-3 + slowdown * 2e-4,
            collective_alone_s: 2e-4,
            collective_beside_s: 2e-4,
        };
        plan.cluster.groups[0].gpu.profile = Some(std::sync::Arc::new(Profile {
            overlap: vec![point],
            ..Profile::empty_for_tests()
        }));
        plan
    }

    #[test]
    fn an_overlapped_reduction_costs_the_passes_its_measured_share_of_the_hidden_time() {
        let exposed = |plan: &Plan| {
            let (pl, st, params) = stage0(plan);
            let reduce = collective_time(Collective::AllReduce, params * 4.0, pl.dp, &pl.fabric);
            (dp_exposed(plan, 0, params, &st, &pl), reduce)
        };
        let (free, reduce) = exposed(&dp2_h200_with_contention(0, "AllReduce", 0.0));
        let (half, _) = exposed(&dp2_h200_with_contention(0, "AllReduce", 0.5));
        assert!(free < reduce, "part of it hides: {free} of {reduce}");
        assert!(
            (half - (free + 0.5 * (reduce - free))).abs() < 1e-12,
            "{half} vs {free} + half of {}",
            reduce - free
        );
        // Measured for another collective than the plan's (ZeRO-1 reduce-scatters): none.
        let z1 = exposed(&dp2_h200_with_contention(1, "AllReduce", 0.5)).0;
        let z1_free = exposed(&dp2_h200_with_contention(1, "AllReduce", 0.0)).0;
        assert_eq!(z1, z1_free);
        // A data-parallel group across nodes is not what the profile measured: NCCL's ring
        // channels hold their SMs there.
        let mut across = dp2_h200_with_contention(0, "AllReduce", 0.5);
        let mut pl = placement(&across, &across.cluster.groups[0]);
        pl.dp.per_node = 1;
        assert_eq!(dp_contention(&across, 0, &pl), (CROSS_NODE_CONTENTION, 0.0));
        pl.dp.per_node = 2;
        let (reduce, gather) = dp_contention(&across, 0, &pl);
        assert!(
            (reduce - 0.5).abs() < 1e-9 && gather == 0.0,
            "{reduce}, {gather}"
        );
        // Without a profile, the NVLink stand-in's measured all-reduce share.
        across.cluster.groups[0].gpu.profile = None;
        let (reduce, gather) = dp_contention(&across, 0, &pl);
        assert!((reduce - 0.259).abs() < 5e-3 && gather == 0.0, "{reduce}");
    }

    #[test]
    fn an_unprofiled_nvlink_group_loses_the_measured_share_across_nodes_the_ring_channels_sms() {
        // MPT-13B-shaped FSDP on eight unprofiled H100s: reduce-scatter and all-gather
        // beside the passes cost them what two H200s measured (the shipped profile's
        // `[[overlap]]` points: 31 % and 30 % of the collectives' time on 2026-11-28).
        let plan = fsdp_plan("torch", "fp32");
        assert!(plan.cluster.groups[0].gpu.profile.is_none());
        let mut pl = placement(&plan, &plan.cluster.groups[0]);
        let stand_in = nvlink_contention_measurement().expect("the H200 profile ships");
        let (reduce, gather) = dp_contention(&plan, 0, &pl);
        assert_eq!(reduce, stand_in.contention("ReduceScatter", 2).unwrap());
        assert_eq!(gather, stand_in.contention("AllGather", 2).unwrap());
        assert!(reduce > 0.0 && reduce < 1.0 && gather > 0.0 && gather < 1.0);
        // The same group across nodes: the SMs NCCL's ring channels hold; on PCIe, nothing
        // measured, nothing charged.
        pl.dp.per_node = 4;
        let x = CROSS_NODE_CONTENTION;
        assert_eq!(dp_contention(&plan, 0, &pl), (x, x));
        pl.dp.per_node = 8;
        pl.fabric.intra.kind = LinkKind::Pcie;
        assert_eq!(dp_contention(&plan, 0, &pl), (0.0, 0.0));
        // And the step is longer than with the collectives free behind the passes.
        let pl = placement(&plan, &plan.cluster.groups[0]);
        let dev = Device {
            gpu: &plan.cluster.groups[0].gpu,
            precision: plan.train.precision,
        };
        let st = stage_time(&plan, 0, &dev, &pl);
        let (_, lost) = dp_exposed_parts(&plan, 0, stage_params(&plan, 0), &st, &pl);
        assert!(lost > 0.0, "{lost}");
    }

    #[test]
    fn an_embedding_larger_than_a_bucket_is_reduced_whole_after_backward() {
        let plan = |pp: u64, framework: &str| {
            checked(&format!(
                "cluster c {{ nodes = 1, gpus_per_node = {gpus}, gpu = H200_SXM_141GB }}
                 model m {{ layers = 12, hidden = 768, heads = 12, vocab = 200000, seq_len = 1024 }}
                 train {{ global_batch = 32, precision = bf16, optimizer = adamw, attention = flash }}
                 parallel {{ tp = 1, pp = {pp}, dp = 2, micro_batch = 16, zero = 0, recompute = none }}
                 job j {{ framework = {framework} }}",
                gpus = 2 * pp
            ))
        };
        let embedding = 200000.0 * 768.0 + 1024.0 * 768.0;
        let one = plan(1, "megatron");
        let params = stage_params(&one, 0);
        assert_eq!(reduction_tail(&one, 0), embedding);
        assert_eq!(reduction_pieces(&one, 0, params), params / embedding);
        assert!(params / embedding < params / BUCKET_PARAMS);
        // A later stage's gradients all come from its layers: buckets as they come.
        let two = plan(2, "megatron");
        let last = stage_params(&two, 1);
        assert_eq!(reduction_tail(&two, 1), 0.0);
        assert_eq!(reduction_pieces(&two, 1, last), last / BUCKET_PARAMS);
        // planc's runtime reduces everything outside the layers after backward: its last
        // stage's output layer too.
        let planc = plan(2, "planc");
        let outside = last - layer_params_per_gpu(&planc) * 6.0;
        assert!(outside > 0.0);
        assert_eq!(reduction_tail(&planc, 1), outside);
    }

    #[test]
    fn under_zero_2_the_embeddings_reduction_waits_once_a_step_not_once_a_micro_batch() {
        let exposed = |batch: u64| {
            let plan = checked(&format!(
                "cluster c {{ nodes = 1, gpus_per_node = 2, gpu = A100_SXM_80GB }}
                 model m {{ layers = 4, hidden = 1024, heads = 16, vocab = 200000, seq_len = 1024 }}
                 train {{ global_batch = {batch}, precision = bf16, optimizer = adamw, attention = flash }}
                 parallel {{ tp = 1, pp = 1, dp = 2, micro_batch = 1, zero = 2, recompute = none }}"
            ));
            let group = &plan.cluster.groups[0];
            let dev = Device {
                gpu: &group.gpu,
                precision: plan.train.precision,
            };
            let pl = placement(&plan, group);
            let st = stage_time(&plan, 0, &dev, &pl);
            let params = stage_params(&plan, 0);
            assert!(reduction_pieces(&plan, 0, params) < params / BUCKET_PARAMS);
            dp_exposed_parts(&plan, 0, params, &st, &pl).0
        };
        // Two micro-batches a step, then eight: six more per-micro-batch pieces, one tail.
        let (two, eight) = (exposed(4), exposed(16));
        let per_micro_batch = (eight - two) / 6.0;
        let tail = two - 2.0 * per_micro_batch;
        assert!(
            per_micro_batch > 0.0 && tail > 0.0,
            "{per_micro_batch}, {tail}"
        );
        assert!((exposed(32) - (16.0 * per_micro_batch + tail)).abs() < 1e-9 * exposed(32));
    }

    fn tp8_plan(sp: bool, framework: &str) -> Plan {
        checked(&format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = A100_SXM_80GB }}
             model m {{ layers = 8, hidden = 6144, heads = 64, vocab = 51200, seq_len = 2048 }}
             train {{ global_batch = 4, precision = fp16, optimizer = adam, attention = standard }}
             parallel {{ tp = 8, pp = 1, dp = 1, micro_batch = 4, sequence_parallel = {sp}, recompute = none }}
             job j {{ framework = {framework} }}"
        ))
    }

    #[test]
    fn unfused_accumulation_streams_each_micro_batchs_gradients_into_the_buffer() {
        let mut plan = tp8_plan(false, "megatron");
        let group = &plan.cluster.groups[0].clone();
        let dev = Device {
            gpu: &group.gpu,
            precision: plan.train.precision,
        };
        let pl = placement(&plan, group);
        let fused = pieces(&plan, &dev, &pl);
        plan.parallel.grad_accumulation_fusion = false;
        let unfused = pieces(&plan, &dev, &pl);
        // fp16: read the gradient, read and write the fp16 buffer.
        let layer = dev.memory(6.0 * layer_params_per_gpu(&plan));
        assert!((unfused.layer_bwd.compute - fused.layer_bwd.compute - layer).abs() < 1e-12);
        assert!((unfused.layer_wgrad - fused.layer_wgrad - layer).abs() < 1e-12);
        // One stage: the embedding's shard, and the final norm at the head.
        let embedding = dev.memory(6.0 * (2048.0 * 6144.0 + 51200.0 * 6144.0 / 8.0));
        assert!(
            (unfused.embedding_bwd.compute - fused.embedding_bwd.compute - embedding).abs() < 1e-12
        );
        assert!(unfused.head_bwd.compute > fused.head_bwd.compute);
        assert_eq!(unfused.layer_fwd, fused.layer_fwd);
    }

    #[test]
    fn scattered_pipeline_transfers_send_a_slice_and_gather_it_on_arrival() {
        let text = |sp: bool, sg: bool| {
            format!(
                "cluster c {{ nodes = 2, gpus_per_node = 8, gpu = A100_SXM_80GB
                     inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s }} }}
                 model m {{ layers = 8, hidden = 6144, heads = 64, vocab = 51200, seq_len = 2048 }}
                 train {{ global_batch = 8, precision = fp16, optimizer = adam, attention = standard }}
                 parallel {{ tp = 8, pp = 2, dp = 1, micro_batch = 1, sequence_parallel = {sp},
                             scatter_gather_p2p = {sg}, recompute = none }}"
            )
        };
        let p2p = |plan: &Plan| {
            let group = &plan.cluster.groups[0];
            let dev = Device {
                gpu: &group.gpu,
                precision: plan.train.precision,
            };
            let pl = placement(plan, group);
            (pieces(plan, &dev, &pl).p2p, pl)
        };
        let activation = 2048.0 * 6144.0 * 2.0;
        let (whole, pl) = p2p(&checked(&text(false, false)));
        assert!((whole - p2p_time(activation, true, &pl.fabric)).abs() < 1e-12);
        let (scattered, _) = p2p(&checked(&text(false, true)));
        let gather = collective_time(Collective::AllGather, activation, pl.tp, &pl.fabric);
        let slice = p2p_time(activation / 8.0, true, &pl.fabric);
        assert!((scattered - slice - gather).abs() < 1e-12);
        assert!(scattered < whole);
        // Sequence parallelism already sends each rank's own tokens, whichever the attribute.
        let (sp, _) = p2p(&checked(&text(true, true)));
        assert_eq!(sp, slice);
        assert_eq!(p2p(&checked(&text(true, false))).0, slice);
    }

    /// MPT-13B-shaped (40 layers of 5120) under FSDP on one node of eight H100s.
    fn fsdp_plan(framework: &str, reduce: &str) -> Plan {
        checked(&format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ layers = 40, hidden = 5120, heads = 40, vocab = 50368, seq_len = 2048 }}
             train {{ global_batch = 16, precision = bf16, optimizer = adamw, attention = flash }}
             parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 2, zero = 3, recompute = none,
                         reduce_dtype = {reduce} }}
             job j {{ framework = {framework} }}"
        ))
    }

    #[test]
    fn fsdp_copies_each_gathered_layer_out_and_its_gradients_in() {
        // The layers' own kernels held the same in both frameworks: only the copies differ.
        let mut plan = Plan {
            kernels: crate::plan::Kernels::Fused,
            ..fsdp_plan("torch", "fp32")
        };
        // Megatron-Core's attention would be cuDNN's on this device: held to the torch
        // plan's FlashAttention-2, so only the copies differ.
        plan.cluster.groups[0].gpu.cudnn_attention = None;
        let group = &plan.cluster.groups[0];
        let dev = Device {
            gpu: &group.gpu,
            precision: plan.train.precision,
        };
        let params = layer_params_per_gpu(&plan);
        let (fwd, bwd) = sharded_param_copies(&plan, params, params, &dev);
        // Copy-out: read and write the bf16 layer; the gather's input: this rank's eighth
        // cast from fp32 (4 + 2 bytes) and copied into the buffer (2 + 2); the gradients'
        // copy-in: read bf16, write fp32.
        assert_eq!(
            fwd,
            dev.memory(4.0 * params) + dev.memory(params / 8.0 * 10.0)
        );
        assert_eq!(bwd, fwd + dev.memory(6.0 * params));
        // They lengthen the layer passes by as much; the simulator prices the same pieces.
        let pl = placement(&plan, group);
        let with = pieces(&plan, &dev, &pl);
        let mut megatron = plan.clone();
        megatron.framework = Framework::Megatron;
        assert_eq!(
            sharded_param_copies(&megatron, params, params, &dev),
            (0.0, 0.0)
        );
        let without = pieces(&megatron, &dev, &pl);
        assert!((with.layer_fwd.compute - without.layer_fwd.compute - fwd).abs() < 1e-12);
        assert!((with.layer_bwd.compute - without.layer_bwd.compute - bwd).abs() < 1e-12);
        // A bf16 reduction writes half the bytes into its buffer.
        let bf16 = fsdp_plan("torch", "bf16");
        assert_eq!(
            sharded_param_copies(&bf16, params, params, &dev).1,
            fwd + dev.memory(4.0 * params)
        );
    }

    #[test]
    fn fsdp2_on_one_gpu_still_copies_where_train_py_shards() {
        let one = |framework: &str| {
            let mut plan = fsdp_plan(framework, "fp32");
            plan.kernels = crate::plan::Kernels::Fused;
            plan.parallel.dp = 1;
            plan.cluster.groups[0].gpus_per_node = 1;
            plan
        };
        let (torch, titan) = (one("torch"), one("torchtitan"));
        let dev = Device {
            gpu: &torch.cluster.groups[0].gpu,
            precision: torch.train.precision,
        };
        let params = layer_params_per_gpu(&torch);
        // train.py wraps every block in `fully_shard` on one GPU too: the copies of eight
        // ranks, with the whole layer as this rank's shard, and the group of one's
        // reduce-scatter a copy of the fp32 gradients.
        let eight = fsdp_plan("torch", "fp32");
        let (one_fwd, one_bwd) = sharded_param_copies(&torch, params, params, &dev);
        let (eight_fwd, eight_bwd) = sharded_param_copies(&eight, params, params, &dev);
        let shard = |n: f64| dev.memory(params / n * 10.0);
        assert!((one_fwd - shard(1.0) - (eight_fwd - shard(8.0))).abs() < 1e-12);
        let single = dev.memory(8.0 * params);
        assert!((one_bwd - shard(1.0) - single - (eight_bwd - shard(8.0))).abs() < 1e-12);
        assert!(one_fwd > eight_fwd);
        // torchtitan does not apply FSDP without a sharded group.
        assert_eq!(
            sharded_param_copies(&titan, params, params, &dev),
            (0.0, 0.0)
        );
    }

    #[test]
    fn zero3_exposes_the_first_gather_and_the_last_reduction_of_each_micro_batch() {
        let plan = fsdp_plan("torch", "fp32");
        let group = &plan.cluster.groups[0];
        let pl = placement(&plan, group);
        let (reduce, gather) = (0.120, 0.060);
        let pass = |compute| PassTime {
            compute,
            comm: 0.0,
            flops: 0.0,
        };
        let st = |f, b| StageTime {
            forward: pass(f),
            backward: pass(b),
            ..StageTime::default()
        };
        // Long passes: each layer's gather (1.5 ms) hides behind one forward (5 ms), the
        // next gather and this reduce-scatter (4.5 ms) behind one backward (10 ms).
        let long = zero3_exposed(&plan, 0, reduce, gather, &st(0.2, 0.4), &pl);
        assert!((long - (gather + reduce) / 40.0).abs() < 1e-12, "{long}");
        // Short backward passes (2 ms a layer): 2.5 ms a layer waits, 39 times.
        let short = zero3_exposed(&plan, 0, reduce, gather, &st(0.2, 0.08), &pl);
        let want = (gather + reduce) / 40.0 + 39.0 * (0.0045 - 0.002);
        assert!((short - want).abs() < 1e-12, "{short} vs {want}");
        // The whole step's slack does not hide a layer's traffic: the same totals as the
        // long case, spread as a forward-heavy split, still expose the backward's.
        let skewed = zero3_exposed(&plan, 0, reduce, gather, &st(0.52, 0.08), &pl);
        assert!((skewed - short).abs() < 1e-12);
    }

    #[test]
    fn the_reduction_moves_gradients_in_the_reduce_dtype() {
        let fp32 = fsdp_plan("torch", "auto");
        assert_eq!((fp32.grad_bytes(), fp32.reduce_bytes()), (4.0, 4.0));
        let bf16 = fsdp_plan("torch", "bf16");
        assert_eq!((bf16.grad_bytes(), bf16.reduce_bytes()), (4.0, 2.0));
        let group = &fp32.cluster.groups[0];
        let dev = Device {
            gpu: &group.gpu,
            precision: fp32.train.precision,
        };
        let pl = placement(&fp32, group);
        let params = stage_params(&fp32, 0);
        let exposed = |plan: &Plan| {
            let st = stage_time(plan, 0, &dev, &pl);
            dp_exposed_parts(plan, 0, params, &st, &pl).0
        };
        assert!(exposed(&bf16) < exposed(&fp32));
    }

    #[test]
    fn the_optimizer_streams_megatrons_passes_over_gradients_and_parameters() {
        let d = a100();
        let params = 1e9;
        let rate = d.gpu.hbm_bandwidth * d.gpu.memory_efficiency;
        let t = |plan: &Plan| optimizer_time(plan, 0, params, 0.0, &d) - KERNEL_RAMP_S;
        // fp16: zero the buffer 4, unscale 8, norm 4, Adam 28, master to model 6.
        let fp16 = t(&a100_plan("fp16", 0, 1));
        assert!(
            (fp16 * rate / params - 50.0).abs() < 1e-6,
            "{}",
            fp16 * rate / params
        );
        // bf16 has no loss scale to undo.
        let bf16 = t(&a100_plan("bf16", 0, 1));
        assert!((bf16 * rate / params - 42.0).abs() < 1e-6);
        // The distributed optimizer steps its shard but clears the whole gradient buffer.
        let sharded = t(&a100_plan("bf16", 1, 4));
        assert!((sharded * rate / params - (38.0 / 4.0 + 4.0)).abs() < 1e-6);
        // Master weights as remainders: joined to the bf16 weights in the update (28), no
        // copy to the model; a bf16 optimizer over bf16 gradients: read 2, the weights and
        // moments read and written (12).
        let with = |dtype| {
            let mut p = a100_plan("bf16", 0, 1);
            p.parallel.optimizer_dtype = Some(dtype);
            p.parallel.grad_dtype = Some(crate::plan::GradDtype::Bf16);
            t(&p) * rate / params
        };
        // Each: the update, the norm (2) and zeroing (2) of the bf16 buffer.
        assert!((with(OptimizerDtype::Fp32Remainders) - (28.0 + 4.0)).abs() < 1e-6);
        assert!((with(OptimizerDtype::Bf16) - (14.0 + 4.0)).abs() < 1e-6);
        // planc's update writes the bf16 weights in its one pass (30, not 28 + 6), and
        // zeroes only the gradients its first products do not overwrite.
        let mut planc = a100_plan("bf16", 0, 1);
        planc.framework = Framework::Planc;
        let share = super::super::buffers::zeroed_gradient_share(&planc, 0);
        assert!(
            share > 0.0 && share < 0.2,
            "{share}: the embedding, norms and biases"
        );
        let want = 30.0 + 4.0 + 4.0 * share;
        assert!(
            (t(&planc) * rate / params - want).abs() < 1e-6,
            "{}",
            t(&planc) * rate / params
        );
        // Without clipping no norm is taken (Megatron-LM without --clip-grad, planc's
        // runtime outside fp16), but planc's fp16 still reads the gradients for overflows.
        let unclipped = |mut p: Plan, precision| {
            p.train.run.grad_clip = 0.0;
            p.train.precision = precision;
            t(&p) * rate / params
        };
        assert!((unclipped(planc.clone(), Precision::Bf16) - (want - 4.0)).abs() < 1e-6);
        assert!((unclipped(a100_plan("bf16", 0, 1), Precision::Bf16) - 38.0).abs() < 1e-6);
        let planc16 = |clip| {
            let mut p = planc.clone();
            p.train.precision = Precision::Fp16;
            p.train.run.grad_clip = clip;
            t(&p)
        };
        assert_eq!(planc16(0.0), planc16(1.0));
    }
}
