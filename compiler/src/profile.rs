//! Device profiles: what `planc calibrate` measured on a machine (products over a grid of
//! shapes, memory-bound kernels by size, planc's norms and MLP activations by width and
//! size, attention, collectives by message and group size), as TOML, and the curves the
//! cost model reads from them in place of the catalog's constants: interpolated in log
//! space, clamped at the measured ends.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The `op` of a profile's pipeline send/receive points (every GPU of the group sends to the
/// next and receives from the one before, as nccl-tests' sendrecv).
pub const SEND_RECV: &str = "SendRecv";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub device: String,
    pub catalog_gpu: String,
    pub driver_version: i32,
    pub nvrtc_version: String,
    pub nccl_version: Option<i32>,
    pub precision: String,
    pub measured_at_unix_s: u64,
    pub planc_version: String,
    pub seconds: f64,
    /// What ran the fused attention the profile measured: cuDNN's plans (its version and
    /// whether backward was deterministic) or planc's kernels. Absent from older profiles,
    /// all of which measured planc's kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_attention: Option<String>,
    /// A fingerprint of the CUDA kernels of planc's own that the profile timed (the
    /// runtime's `train::predict::kernels_fingerprint`): a run whose build's kernels differ
    /// says so, since the profile's norm, activation, attention and optimizer points timed
    /// other code. Absent from older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmPoint {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub seconds: f64,
    pub tflops: f64,
    /// Achieved / the catalog's dense peak at this precision.
    pub efficiency: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    /// Bytes read plus bytes written by one launch.
    pub bytes: usize,
    pub seconds: f64,
    pub gb_per_s: f64,
    /// Achieved / the catalog's HBM bandwidth.
    pub efficiency: f64,
}

/// One pass of the attention core at one shape. `kind` is `standard` (batched products
/// and the masked softmax, forward), `standard_backward` (its four products and the
/// softmax's backward from the kept probabilities; absent from profiles measured before
/// planc timed it), `flash` (the fused forward) or `flash_backward` (the fused backward,
/// which recomputes the scores).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionPoint {
    pub kind: String,
    pub batch_heads: usize,
    pub seq: usize,
    pub head_dim: usize,
    pub seconds: f64,
    /// The causal forward's FLOPs (QKᵀ and PV over the lower triangle) per second of this
    /// pass, whichever pass it is: a backward point's time is that work over this rate.
    pub tflops: f64,
}

/// One pass of planc's norm kernels (LayerNorm, `pass` `forward` or `backward`, the
/// backward with its weight-gradient sums) over `rows` rows of `width`. A norm is a row
/// reduction, not a stream: its rate depends on the row's width (threads a row, barriers
/// a row) and falls short of a copy's. `gb_per_s` is the bytes the cost model counts for
/// the pass (forward: the rows read and written; backward: twice that) over the time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NormPoint {
    pub pass: String,
    pub rows: usize,
    pub width: usize,
    pub seconds: f64,
    pub gb_per_s: f64,
}

/// One pass of planc's MLP activation kernels (`kind` `gelu` or `swiglu`, `pass`
/// `forward` or `backward`) over `rows` rows of the MLP's width `width` (F: GELU reads and
/// writes F a row, SwiGLU reads its gate and up halves, 2F, and writes F). Elementwise,
/// but not a copy: a tanh or an exponential an element, SwiGLU's row and column of each
/// element, and a backward that moves 1.5× (GELU) or 5/3× (SwiGLU) the forward's bytes,
/// not twice; priced from the streaming curve they ran 1.16–1.20× that on an H200 and
/// 0.87–0.90× on an H100. `gb_per_s` is the bytes the cost model counts for the pass
/// (forward: `cost::ops::activation_bytes`; backward: twice that) over the time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivationPoint {
    pub kind: String,
    pub pass: String,
    pub rows: usize,
    pub width: usize,
    pub seconds: f64,
    pub gb_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectivePoint {
    pub op: String,
    pub gpus: usize,
    pub bytes: usize,
    pub seconds: f64,
    /// nccl-tests' bus bandwidth: algorithm bandwidth times the op's bus factor.
    pub bus_gb_per_s: f64,
}

/// planc's AdamW update timed over one flat buffer of `params` parameters, as a training step
/// launches it: `bytes` is what it must move (gradient, master weight and both moments read
/// and written back, the 16-bit compute copy written), so `gb_per_s` set beside the
/// memory-bound kernel's rate says how close the optimizer runs to the device's bandwidth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerPoint {
    pub optimizer: String,
    pub params: usize,
    pub bytes: usize,
    pub seconds: f64,
    pub gb_per_s: f64,
    /// Against the catalog's HBM bandwidth.
    pub efficiency: f64,
}

/// Matrix products timed alone and with a collective issued beside them on another stream
/// of the same GPUs (as a data-parallel reduction is issued beside backward): the
/// collective's kernels take SMs and memory bandwidth, so an overlapped collective is not
/// free. On two H200s planc's GPT-2 products lost about half of each per-layer reduction's
/// own time beside it: hiding the reductions entirely priced that step 2 % fast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverlapPoint {
    pub op: String,
    pub gpus: usize,
    pub bytes: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub products_alone_s: f64,
    pub products_beside_s: f64,
    pub collective_alone_s: f64,
    /// One collective's time while the products ran beside it.
    pub collective_beside_s: f64,
}

impl OverlapPoint {
    /// The products' time lost per second of the collective (as it runs alone): 0, no
    /// contention; 1, none of the collective's time is hidden.
    pub fn slowdown(&self) -> f64 {
        ((self.products_beside_s - self.products_alone_s)
            / self.collective_alone_s.max(f64::MIN_POSITIVE))
        .clamp(0.0, 1.0)
    }
}

/// How the board's power limit slows a step's kernels, by how hard the step drives the
/// tensor cores (`runtime/src/probe/power.rs` measures it): `utilisation` is the share of
/// the square product's burst rate a steady mix of products and copies ran at, priced in
/// burst times; the slowdowns are the product's and the copies' time in the settled mix
/// over their burst times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerCurve {
    /// The square product's burst rate (TFLOP/s) the utilisations are shares of.
    pub product_tflops: f64,
    /// The SM clock (MHz) the burst ran at, where NVML could be read: a profile's burst
    /// times hold only at the clock they ran at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_clock_mhz: Option<f64>,
    pub points: Vec<PowerPoint>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerPoint {
    pub utilisation: f64,
    /// Copies a product in the mix's cycle.
    pub copies: usize,
    pub product_slowdown: f64,
    pub memory_slowdown: f64,
    /// The SM clock (MHz) and the board's power (W) the settled mix held, where NVML could
    /// be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
}

impl PowerCurve {
    /// The products' and the memory-bound kernels' slowdown at `utilisation`: linear
    /// between the measured points, from none at an idle GPU to the lightest point, and
    /// the heaviest point's beyond it. Never a speed-up: a mix timed faster than its
    /// burst is noise.
    pub fn slowdown(&self, utilisation: f64) -> (f64, f64) {
        let mut pts: Vec<(f64, f64, f64)> = vec![(0.0, 1.0, 1.0)];
        pts.extend(
            self.points
                .iter()
                .map(|p| (p.utilisation, p.product_slowdown, p.memory_slowdown)),
        );
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let u = utilisation.max(0.0);
        let last = pts[pts.len() - 1];
        let (g, m) = if u >= last.0 {
            (last.1, last.2)
        } else {
            let i = pts.iter().rposition(|p| p.0 <= u).unwrap_or(0);
            let (a, b) = (pts[i], pts[i + 1]);
            let t = (u - a.0) / (b.0 - a.0).max(f64::MIN_POSITIVE);
            (a.1 + t * (b.1 - a.1), a.2 + t * (b.2 - a.2))
        };
        (g.max(1.0), m.max(1.0))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub provenance: Provenance,
    pub gemm: Vec<GemmPoint>,
    pub memory: Vec<MemoryPoint>,
    pub attention: Vec<AttentionPoint>,
    /// Absent from profiles measured before planc timed its norms.
    #[serde(default)]
    pub norms: Vec<NormPoint>,
    /// Absent from profiles measured before planc timed its activations.
    #[serde(default)]
    pub activations: Vec<ActivationPoint>,
    pub collectives: Vec<CollectivePoint>,
    /// Absent from profiles measured before planc timed products beside collectives, and
    /// from one-GPU profiles.
    #[serde(default)]
    pub overlap: Vec<OverlapPoint>,
    /// Absent from profiles measured before planc timed its optimizer update.
    #[serde(default)]
    pub optimizer: Vec<OptimizerPoint>,
    /// Absent from profiles measured before planc timed the power limit's slowdown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerCurve>,
    /// fp8 products (E4M3 × E4M3 into bf16 through cuBLASLt, as `precision = fp8` runs a
    /// linear layer's forward; the input's cast not included), their efficiency against the
    /// catalog's dense fp8 peak: what fp8 products are priced at (`cost::time`). Absent
    /// from profiles measured before planc timed them and on GPUs without fp8.
    #[serde(default)]
    pub fp8_gemm: Vec<GemmPoint>,
}

/// The profiles planc ships (`compiler/catalog/profiles/`), measured on the lent machines with
/// `planc calibrate`: planc's own kernels (attention, norms, activations) are priced from
/// them when a plan trains with `framework = planc` and names no profile of its own, since
/// the catalog's constants describe other frameworks' kernels, not planc's.
const SHIPPED: [(&str, &str); 2] = [
    (
        "h100_sxm_80gb.bf16.toml",
        include_str!("../catalog/profiles/h100_sxm_80gb.bf16.toml"),
    ),
    (
        "h200_sxm_141gb.bf16.toml",
        include_str!("../catalog/profiles/h200_sxm_141gb.bf16.toml"),
    ),
];

fn shipped_profiles() -> &'static [(&'static str, std::sync::Arc<Profile>)] {
    static LOADED: std::sync::OnceLock<Vec<(&'static str, std::sync::Arc<Profile>)>> =
        std::sync::OnceLock::new();
    LOADED.get_or_init(|| {
        SHIPPED
            .iter()
            .map(|(name, text)| {
                let p: Profile = toml::from_str(text)
                    .unwrap_or_else(|e| panic!("the shipped profile {name} parses: {e}"));
                (*name, std::sync::Arc::new(p))
            })
            .collect()
    })
}

/// planc's shipped profile of the catalog GPU `gpu` measured at `precision`, if any. A plan
/// at `precision = fp8` takes the bf16 one: everything but its linear products runs in bf16,
/// and `planc calibrate` times those products in fp8 into the bf16 profile (`fp8_gemm`).
/// fp16 takes it too: planc's kernels are the same at 16 bits either way, and the GPUs
/// planc ships profiles for (H100, H200) have one dense peak for fp16 and bf16 products.
/// Without it a GPT-2 fp16 run on the H200 was priced from the catalog's constants at 27.8
/// ms and took 31.4 (1.13x; docs/measurements.md, 2026-11-29, twelfth session).
pub fn shipped(gpu: &str, precision: &str) -> Option<std::sync::Arc<Profile>> {
    let sixteen_bit = if precision == "fp8" {
        "bf16"
    } else {
        precision
    };
    shipped_profiles()
        .iter()
        .find(|(_, p)| {
            p.provenance.catalog_gpu == gpu && prices(&p.provenance.precision, sixteen_bit)
        })
        .map(|(_, p)| p.clone())
}

/// Whether a profile measured at `measured` prices a plan that trains at `precision`: its
/// own precision, and fp16 from bf16 (planc's kernels are the same at 16 bits either way,
/// and every GPU that multiplies in bf16 has one dense peak for both). fp8 plans price their
/// 16-bit kernels from the bf16 profile through `cost::time::Device::sixteen_bit`.
pub fn prices(measured: &str, precision: &str) -> bool {
    measured == precision || (measured == "bf16" && precision == "fp16")
}

/// The file name of `profile` when it is one planc ships (the same value, not a copy).
pub fn shipped_name(profile: &std::sync::Arc<Profile>) -> Option<&'static str> {
    shipped_profiles()
        .iter()
        .find(|(_, p)| std::sync::Arc::ptr_eq(p, profile))
        .map(|(name, _)| *name)
}

impl Profile {
    /// An empty profile of a bf16 H200 with test provenance, for tests to fill.
    #[cfg(test)]
    pub(crate) fn empty_for_tests() -> Profile {
        Profile {
            provenance: Provenance {
                device: "test".into(),
                catalog_gpu: "H200_SXM_141GB".into(),
                driver_version: 0,
                nvrtc_version: "13.0".into(),
                nccl_version: None,
                precision: "bf16".into(),
                measured_at_unix_s: 0,
                planc_version: "0".into(),
                seconds: 0.0,
                fused_attention: None,
                kernels: None,
            },
            gemm: vec![],
            memory: vec![],
            attention: vec![],
            norms: vec![],
            activations: vec![],
            collectives: vec![],
            overlap: vec![],
            optimizer: vec![],
            power: None,
            fp8_gemm: vec![],
        }
    }

    pub fn load(path: &Path) -> Result<Profile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the profile `{}`: {e}", path.display()))?;
        let p: Profile = toml::from_str(&text)
            .map_err(|e| format!("`{}` is not a planc device profile: {e}", path.display()))?;
        p.check()
            .map_err(|e| format!("`{}` holds an impossible measurement: {e}", path.display()))?;
        Ok(p)
    }

    /// Every measurement is of something (sizes of at least 1) that took a positive, finite
    /// time at a positive, finite rate: a zero or a NaN in an edited or damaged file would
    /// otherwise price a plan at nothing, infinity or NaN.
    pub fn check(&self) -> Result<(), String> {
        fn pos(what: &str, i: usize, name: &str, v: f64) -> Result<(), String> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("[[{what}]] point {} has {name} = {v}", i + 1))
            }
        }
        fn size(what: &str, i: usize, name: &str, v: usize) -> Result<(), String> {
            if v >= 1 {
                Ok(())
            } else {
                Err(format!("[[{what}]] point {} has {name} = 0", i + 1))
            }
        }
        for (what, points) in [("gemm", &self.gemm), ("fp8_gemm", &self.fp8_gemm)] {
            for (i, g) in points.iter().enumerate() {
                for (n, v) in [("m", g.m), ("n", g.n), ("k", g.k)] {
                    size(what, i, n, v)?;
                }
                for (n, v) in [
                    ("seconds", g.seconds),
                    ("tflops", g.tflops),
                    ("efficiency", g.efficiency),
                ] {
                    pos(what, i, n, v)?;
                }
            }
        }
        for (i, m) in self.memory.iter().enumerate() {
            size("memory", i, "bytes", m.bytes)?;
            for (n, v) in [
                ("seconds", m.seconds),
                ("gb_per_s", m.gb_per_s),
                ("efficiency", m.efficiency),
            ] {
                pos("memory", i, n, v)?;
            }
        }
        for (i, a) in self.attention.iter().enumerate() {
            for (n, v) in [
                ("batch_heads", a.batch_heads),
                ("seq", a.seq),
                ("head_dim", a.head_dim),
            ] {
                size("attention", i, n, v)?;
            }
            pos("attention", i, "seconds", a.seconds)?;
            pos("attention", i, "tflops", a.tflops)?;
        }
        for (i, r) in self.norms.iter().enumerate() {
            size("norms", i, "rows", r.rows)?;
            size("norms", i, "width", r.width)?;
            pos("norms", i, "seconds", r.seconds)?;
            pos("norms", i, "gb_per_s", r.gb_per_s)?;
        }
        for (i, r) in self.activations.iter().enumerate() {
            size("activations", i, "rows", r.rows)?;
            size("activations", i, "width", r.width)?;
            pos("activations", i, "seconds", r.seconds)?;
            pos("activations", i, "gb_per_s", r.gb_per_s)?;
        }
        for (i, c) in self.collectives.iter().enumerate() {
            size("collectives", i, "gpus", c.gpus)?;
            size("collectives", i, "bytes", c.bytes)?;
            pos("collectives", i, "seconds", c.seconds)?;
            pos("collectives", i, "bus_gb_per_s", c.bus_gb_per_s)?;
        }
        for (i, o) in self.overlap.iter().enumerate() {
            for (n, v) in [
                ("gpus", o.gpus),
                ("bytes", o.bytes),
                ("m", o.m),
                ("n", o.n),
                ("k", o.k),
            ] {
                size("overlap", i, n, v)?;
            }
            for (n, v) in [
                ("products_alone_s", o.products_alone_s),
                ("products_beside_s", o.products_beside_s),
                ("collective_alone_s", o.collective_alone_s),
                ("collective_beside_s", o.collective_beside_s),
            ] {
                pos("overlap", i, n, v)?;
            }
        }
        for (i, o) in self.optimizer.iter().enumerate() {
            size("optimizer", i, "params", o.params)?;
            size("optimizer", i, "bytes", o.bytes)?;
            pos("optimizer", i, "seconds", o.seconds)?;
            pos("optimizer", i, "gb_per_s", o.gb_per_s)?;
        }
        if let Some(c) = &self.power {
            if !(c.product_tflops.is_finite() && c.product_tflops > 0.0) {
                return Err(format!("[power] has product_tflops = {}", c.product_tflops));
            }
            for (i, p) in c.points.iter().enumerate() {
                pos("power.points", i, "product_slowdown", p.product_slowdown)?;
                pos("power.points", i, "memory_slowdown", p.memory_slowdown)?;
                if !(p.utilisation > 0.0 && p.utilisation <= 1.0) {
                    return Err(format!(
                        "[[power.points]] point {} has utilisation = {} (a share of the burst rate, above 0 and at most 1)",
                        i + 1,
                        p.utilisation
                    ));
                }
            }
        }
        Ok(())
    }

    /// The products' time lost per second of `op` run beside them over exactly `gpus` (the
    /// mean of the measured shapes and sizes); `None` where not measured.
    pub fn contention(&self, op: &str, gpus: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .overlap
            .iter()
            .filter(|o| o.op == op && o.gpus == gpus)
            .map(OverlapPoint::slowdown)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Product efficiency for an `m×n×k` product: the measured points weighted by the inverse
    /// fourth power of their distance in log-shape space (thin shapes are near thin shapes).
    /// The inverse square let a shape between grid points take much of the mean of far
    /// ones: each shipped grid point predicted from the others was off by 25 % on average
    /// (16 % this way), and planc's products in training ran 0.87-0.95x of what it priced.
    pub fn gemm_efficiency(&self, m: f64, n: f64, k: f64) -> Option<f64> {
        shape_efficiency(&self.gemm, m, n, k)
    }

    /// [`Self::gemm_efficiency`] of the fp8 products (`fp8_gemm`), against the fp8 peak.
    pub fn fp8_gemm_efficiency(&self, m: f64, n: f64, k: f64) -> Option<f64> {
        shape_efficiency(&self.fp8_gemm, m, n, k)
    }

    /// Memory-bound efficiency for a kernel moving `bytes`: piecewise linear in log bytes.
    pub fn memory_efficiency(&self, bytes: f64) -> Option<f64> {
        interpolate(
            self.memory
                .iter()
                .map(|p| (p.bytes as f64, p.efficiency))
                .collect(),
            bytes,
        )
    }

    /// Seconds of an attention pass of `kind` (`standard`, `standard_backward`, `flash`,
    /// `flash_backward`) for `flops` causal forward FLOPs (2·batch·heads·seq²·head_dim) at
    /// sequence `seq` and head size `head_dim`: the rate of the measured points of the nearest head size, at each
    /// measured sequence interpolated over log batch × heads where several were measured
    /// (fewer heads are fewer blocks: the GPU is filled less evenly), then over log sequence
    /// length (the diagonal tiles' waste and the per-tile fixed work shrink as sequences
    /// grow).
    pub fn attention_seconds(
        &self,
        kind: &str,
        flops: f64,
        seq: f64,
        head_dim: f64,
    ) -> Option<f64> {
        let pts: Vec<&AttentionPoint> = self.attention.iter().filter(|a| a.kind == kind).collect();
        let d = nearest_in_log(pts.iter().map(|a| a.head_dim), head_dim)?;
        let at_d: Vec<&&AttentionPoint> = pts.iter().filter(|a| a.head_dim == d).collect();
        let batch_heads = flops / (2.0 * seq * seq * head_dim).max(1.0);
        let mut seqs: Vec<usize> = at_d.iter().map(|a| a.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let by_seq = seqs
            .iter()
            .filter_map(|&t| {
                let rates = at_d
                    .iter()
                    .filter(|a| a.seq == t)
                    .map(|a| (a.batch_heads as f64, a.tflops * 1e12))
                    .collect();
                interpolate(rates, batch_heads).map(|r| (t as f64, r))
            })
            .collect();
        let rate = interpolate(by_seq, seq)?;
        (rate > 0.0).then(|| flops / rate)
    }

    /// Seconds of a norm `pass` (`forward`, `backward`) over rows of `width` counted as
    /// `bytes`: the rate of the measured points of the nearest width, interpolated over
    /// log bytes (small tensors do not fill the GPU).
    pub fn norm_seconds(&self, pass: &str, width: f64, bytes: f64) -> Option<f64> {
        let pts: Vec<(usize, f64, f64)> = self
            .norms
            .iter()
            .filter(|n| n.pass == pass)
            .map(|n| (n.width, n.seconds, n.gb_per_s))
            .collect();
        seconds_by_width_and_size(&pts, width, bytes)
    }

    /// Seconds of the MLP activation `kind` (`gelu`, `swiglu`) in `pass` (`forward`,
    /// `backward`) over rows of `width` (F) counted as `bytes`: as [`Self::norm_seconds`],
    /// from the points of that activation and pass.
    pub fn activation_seconds(
        &self,
        kind: &str,
        pass: &str,
        width: f64,
        bytes: f64,
    ) -> Option<f64> {
        let pts: Vec<(usize, f64, f64)> = self
            .activations
            .iter()
            .filter(|a| a.kind == kind && a.pass == pass)
            .map(|a| (a.width, a.seconds, a.gb_per_s))
            .collect();
        seconds_by_width_and_size(&pts, width, bytes)
    }

    /// Bus bandwidth (bytes/s) of `op` (`AllReduce`, `AllGather`, `ReduceScatter`,
    /// [`SEND_RECV`]) over exactly `gpus` for a message of `bytes`; `None` where that group
    /// size was not measured (small NVLink groups do not reach a larger one's bandwidth,
    /// so another size's curve is no measurement of this one).
    pub fn bus_bandwidth(&self, op: &str, gpus: usize, bytes: f64) -> Option<f64> {
        interpolate(
            self.collectives
                .iter()
                .filter(|c| c.op == op && c.gpus == gpus)
                .map(|c| (c.bytes as f64, c.bus_gb_per_s * 1e9))
                .collect(),
            bytes,
        )
    }
}

/// The value nearest `x` in log space (a head size or width between two measured ones
/// takes the one it is nearer in ratio).
fn nearest_in_log(values: impl Iterator<Item = usize>, x: f64) -> Option<usize> {
    let dist = |v: usize| ((v as f64).ln() - x.max(1.0).ln()).abs();
    values.min_by(|a, b| dist(*a).total_cmp(&dist(*b)))
}

/// Seconds to move `bytes` at the rate of the points `(width, seconds, GB/s)` of the
/// measured width nearest `width`, interpolated over the points' log bytes (small tensors
/// do not fill the GPU).
fn seconds_by_width_and_size(pts: &[(usize, f64, f64)], width: f64, bytes: f64) -> Option<f64> {
    let w = nearest_in_log(pts.iter().map(|p| p.0), width)?;
    let rate = interpolate(
        pts.iter()
            .filter(|p| p.0 == w)
            .map(|&(_, seconds, gb_per_s)| (gb_per_s * 1e9 * seconds, gb_per_s * 1e9))
            .collect(),
        bytes,
    )?;
    (rate > 0.0).then(|| bytes / rate)
}

/// Linear interpolation of `y` over `ln x`, clamped to the end points.
fn interpolate(mut pts: Vec<(f64, f64)>, x: f64) -> Option<f64> {
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = *pts.first()?;
    let last = *pts.last()?;
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    let lx = x.ln();
    pts.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (x >= x0 && x <= x1).then(|| {
            let t = (lx - x0.ln()) / (x1.ln() - x0.ln()).max(1e-12);
            y0 + t * (y1 - y0)
        })
    })
}

/// The efficiency of an `m×n×k` product from measured `points`, as
/// [`Profile::gemm_efficiency`] weighs them.
fn shape_efficiency(points: &[GemmPoint], m: f64, n: f64, k: f64) -> Option<f64> {
    let q = [m.max(1.0).ln(), n.max(1.0).ln(), k.max(1.0).ln()];
    let (mut w, mut acc) = (0.0, 0.0);
    for g in points {
        let p = [(g.m as f64).ln(), (g.n as f64).ln(), (g.k as f64).ln()];
        let d2: f64 = q.iter().zip(&p).map(|(a, b)| (a - b).powi(2)).sum();
        if d2 < 1e-12 {
            return Some(g.efficiency);
        }
        let wi = 1.0 / (d2 * d2);
        w += wi;
        acc += wi * g.efficiency;
    }
    (w > 0.0).then(|| acc / w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile {
            gemm: vec![
                GemmPoint {
                    m: 8192,
                    n: 8192,
                    k: 8192,
                    seconds: 0.0,
                    tflops: 0.0,
                    efficiency: 0.8,
                },
                GemmPoint {
                    m: 8192,
                    n: 256,
                    k: 4096,
                    seconds: 0.0,
                    tflops: 0.0,
                    efficiency: 0.4,
                },
            ],
            memory: vec![
                MemoryPoint {
                    bytes: 1 << 20,
                    seconds: 0.0,
                    gb_per_s: 0.0,
                    efficiency: 0.1,
                },
                MemoryPoint {
                    bytes: 1 << 30,
                    seconds: 0.0,
                    gb_per_s: 0.0,
                    efficiency: 0.7,
                },
            ],
            collectives: vec![
                CollectivePoint {
                    op: "AllReduce".into(),
                    gpus: 2,
                    bytes: 1 << 20,
                    seconds: 0.0,
                    bus_gb_per_s: 50.0,
                },
                CollectivePoint {
                    op: "AllReduce".into(),
                    gpus: 2,
                    bytes: 1 << 28,
                    seconds: 0.0,
                    bus_gb_per_s: 200.0,
                },
            ],
            ..Profile::empty_for_tests()
        }
    }

    #[test]
    fn a_product_between_grid_points_takes_its_neighbours_not_the_far_mean() {
        let point = |m: usize, n: usize, k: usize, efficiency: f64| GemmPoint {
            m,
            n,
            k,
            seconds: 0.0,
            tflops: 0.0,
            efficiency,
        };
        // One neighbour at log distance ln 2 and ten thin shapes three times as far.
        let mut gemm = vec![point(8192, 8192, 8192, 0.8)];
        for i in 0..10 {
            gemm.push(point(8192, 8192 >> 3, 8192 << (i % 2), 0.2));
        }
        let p = Profile {
            gemm,
            ..Profile::empty_for_tests()
        };
        let e = p.gemm_efficiency(16384.0, 8192.0, 8192.0).unwrap();
        // Inverse squares would give the far ten as much weight as the neighbour (0.5).
        assert!(e > 0.7, "{e}");
        assert_eq!(p.gemm_efficiency(8192.0, 8192.0, 8192.0), Some(0.8));
    }

    #[test]
    fn fp8_products_have_their_own_curve_checked_as_the_16_bit_one() {
        let point = |m: usize, e: f64| GemmPoint {
            m,
            n: 8192,
            k: 8192,
            seconds: 1e-3,
            tflops: 1.0,
            efficiency: e,
        };
        let mut p = Profile {
            gemm: vec![point(8192, 0.8)],
            fp8_gemm: vec![point(8192, 0.6), point(2048, 0.4)],
            ..Profile::empty_for_tests()
        };
        assert_eq!(p.gemm_efficiency(8192.0, 8192.0, 8192.0), Some(0.8));
        assert_eq!(p.fp8_gemm_efficiency(8192.0, 8192.0, 8192.0), Some(0.6));
        let mid = p.fp8_gemm_efficiency(4096.0, 8192.0, 8192.0).unwrap();
        assert!(mid > 0.4 && mid < 0.6, "{mid}");
        assert_eq!(
            Profile::empty_for_tests().fp8_gemm_efficiency(1.0, 1.0, 1.0),
            None
        );
        assert_eq!(p.check(), Ok(()));
        p.fp8_gemm[1].seconds = -1.0;
        assert_eq!(
            p.check(),
            Err("[[fp8_gemm]] point 2 has seconds = -1".into())
        );
        // Profiles written before fp8 was timed have none.
        let old = toml::to_string(&Profile::empty_for_tests())
            .unwrap()
            .replace("fp8_gemm = []\n", "");
        assert!(!old.contains("fp8_gemm"));
        let back: Profile = toml::from_str(&old).unwrap();
        assert!(back.fp8_gemm.is_empty());
    }

    #[test]
    fn curves_interpolate_in_log_space_and_clamp() {
        let p = profile();
        assert_eq!(p.memory_efficiency(1024.0), Some(0.1));
        assert_eq!(p.memory_efficiency(1e12), Some(0.7));
        let mid = p.memory_efficiency(2f64.powi(25)).unwrap();
        assert!((mid - 0.4).abs() < 1e-9, "{mid}");
        let bw = p.bus_bandwidth("AllReduce", 2, 2f64.powi(24)).unwrap();
        assert!((bw - 125e9).abs() < 1e3, "{bw}");
        assert_eq!(p.bus_bandwidth("AllGather", 2, 1e6), None);
    }

    fn flash(kind: &str, seq: usize, head_dim: usize, tflops: f64) -> AttentionPoint {
        AttentionPoint {
            kind: kind.into(),
            batch_heads: 64,
            seq,
            head_dim,
            seconds: 0.0,
            tflops,
        }
    }

    #[test]
    fn fused_attention_takes_the_rate_of_its_pass_and_nearest_head_size() {
        let mut p = profile();
        assert_eq!(p.attention_seconds("flash", 1e12, 2048.0, 128.0), None);
        p.attention = vec![
            flash("standard", 1024, 64, 1000.0),
            flash("flash", 1024, 64, 100.0),
            flash("flash", 4096, 64, 200.0),
            flash("flash", 1024, 128, 300.0),
            flash("flash_backward", 1024, 64, 50.0),
        ];
        // 2048 is halfway between 1024 and 4096 in log space: 150 TFLOP/s.
        let s = p.attention_seconds("flash", 150e12, 2048.0, 64.0).unwrap();
        assert!((s - 1.0).abs() < 1e-9, "{s}");
        // Head size 96 is nearer 128 than 64 in log space; 80 is nearer 64.
        assert_eq!(
            p.attention_seconds("flash", 300e12, 1024.0, 96.0),
            Some(1.0)
        );
        assert_eq!(
            p.attention_seconds("flash", 100e12, 1024.0, 80.0),
            Some(1.0)
        );
        assert_eq!(
            p.attention_seconds("flash_backward", 50e12, 1024.0, 64.0),
            Some(1.0)
        );
        assert_eq!(
            p.attention_seconds("flash_backward", 50e12, 1024.0, 128.0),
            Some(1.0)
        );
        assert_eq!(
            p.attention_seconds("standard", 1000e12, 1024.0, 64.0),
            Some(1.0)
        );
    }

    #[test]
    fn fused_attention_over_fewer_heads_takes_the_rate_measured_over_fewer() {
        let mut p = profile();
        let at = |batch_heads: usize, tflops: f64| AttentionPoint {
            batch_heads,
            ..flash("flash", 2048, 64, tflops)
        };
        p.attention = vec![at(256, 200.0), at(64, 100.0)];
        // The causal forward's FLOPs of `bh` heads of 2048 × 64.
        let flops = |bh: f64| 2.0 * bh * 2048.0 * 2048.0 * 64.0;
        let rate = |bh: f64| {
            flops(bh)
                / p.attention_seconds("flash", flops(bh), 2048.0, 64.0)
                    .unwrap()
        };
        // 128 heads: halfway between 64 and 256 in log space.
        assert!((rate(128.0) - 150e12).abs() < 1e3, "{}", rate(128.0));
        assert!((rate(256.0) - 200e12).abs() < 1e3);
        // Beyond what was measured: the nearest measurement's rate.
        assert!((rate(16.0) - 100e12).abs() < 1e3);
        assert!((rate(1024.0) - 200e12).abs() < 1e3);
    }

    #[test]
    fn a_norm_takes_the_rate_of_its_pass_and_nearest_width_by_size() {
        let mut p = profile();
        assert_eq!(p.norm_seconds("forward", 768.0, 1e8), None);
        let point = |pass: &str, width: usize, bytes: f64, gb_per_s: f64| NormPoint {
            pass: pass.into(),
            rows: 0,
            width,
            seconds: bytes / (gb_per_s * 1e9),
            gb_per_s,
        };
        p.norms = vec![
            point("forward", 768, 1e6, 100.0),
            point("forward", 768, 1e8, 300.0),
            point("forward", 4096, 1e8, 900.0),
            point("backward", 768, 1e8, 200.0),
        ];
        // 1e7 bytes is halfway in log space: 200 GB/s.
        let s = p.norm_seconds("forward", 768.0, 1e7).unwrap();
        assert!((s - 1e7 / 200e9).abs() < 1e-12, "{s}");
        // Clamped at the largest measured size; 2048 is nearer 4096 than 768 in log space.
        assert_eq!(p.norm_seconds("forward", 768.0, 1e9), Some(1e9 / 300e9));
        assert_eq!(p.norm_seconds("forward", 2048.0, 1e8), Some(1e8 / 900e9));
        assert_eq!(p.norm_seconds("backward", 4096.0, 1e8), Some(1e8 / 200e9));
    }

    #[test]
    fn an_activation_takes_the_rate_of_its_kind_pass_and_nearest_width_by_size() {
        let mut p = profile();
        assert_eq!(p.activation_seconds("gelu", "forward", 3072.0, 1e8), None);
        let point =
            |kind: &str, pass: &str, width: usize, bytes: f64, gb_per_s: f64| ActivationPoint {
                kind: kind.into(),
                pass: pass.into(),
                rows: 0,
                width,
                seconds: bytes / (gb_per_s * 1e9),
                gb_per_s,
            };
        p.activations = vec![
            point("gelu", "forward", 3072, 1e7, 1000.0),
            point("gelu", "forward", 3072, 1e9, 3000.0),
            point("gelu", "forward", 28672, 1e9, 2000.0),
            point("gelu", "backward", 3072, 1e9, 2500.0),
            point("swiglu", "forward", 8192, 1e9, 4000.0),
        ];
        // 1e8 bytes is halfway in log space: 2000 GB/s.
        let s = p
            .activation_seconds("gelu", "forward", 3072.0, 1e8)
            .unwrap();
        assert!((s - 1e8 / 2000e9).abs() < 1e-15, "{s}");
        // Clamped at the smallest measured size; 14336 is nearer 28672 than 3072 in log
        // space, 8192 nearer 3072.
        assert_eq!(
            p.activation_seconds("gelu", "forward", 3072.0, 1e6),
            Some(1e6 / 1000e9)
        );
        assert_eq!(
            p.activation_seconds("gelu", "forward", 14336.0, 1e9),
            Some(1e9 / 2000e9)
        );
        assert_eq!(
            p.activation_seconds("gelu", "forward", 8192.0, 1e9),
            Some(1e9 / 3000e9)
        );
        // Each kind and pass from its own points only.
        assert_eq!(
            p.activation_seconds("gelu", "backward", 28672.0, 1e9),
            Some(1e9 / 2500e9)
        );
        assert_eq!(
            p.activation_seconds("swiglu", "forward", 3072.0, 1e9),
            Some(1e9 / 4000e9)
        );
        assert_eq!(
            p.activation_seconds("swiglu", "backward", 8192.0, 1e9),
            None
        );
    }

    #[test]
    fn a_profile_with_an_impossible_measurement_is_refused_naming_it() {
        let shipped = super::Profile::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/catalog/profiles/h200_sxm_141gb.bf16.toml"
        )))
        .unwrap();
        assert_eq!(shipped.check(), Ok(()));
        let mut p = shipped.clone();
        p.gemm[0].tflops = f64::NAN;
        assert_eq!(p.check(), Err("[[gemm]] point 1 has tflops = NaN".into()));
        let mut p = shipped.clone();
        let n = p.attention.len();
        p.attention[n - 1].seq = 0;
        assert_eq!(
            p.check(),
            Err(format!("[[attention]] point {n} has seq = 0"))
        );
        let mut p = shipped;
        p.norms[2].gb_per_s = -1.0;
        assert_eq!(p.check(), Err("[[norms]] point 3 has gb_per_s = -1".into()));
    }

    #[test]
    fn contention_is_the_mean_share_lost_for_that_collective_and_group_size() {
        let point = |op: &str, gpus: usize, alone: f64, beside: f64| OverlapPoint {
            op: op.into(),
            gpus,
            bytes: 1 << 26,
            m: 8192,
            n: 4096,
            k: 4096,
            products_alone_s: alone,
            products_beside_s: beside,
            collective_alone_s: 1e-3,
            collective_beside_s: 1.2e-3,
        };
        let mut p = profile();
        assert_eq!(p.contention("AllReduce", 2), None);
        p.overlap = vec![
            // Per second of the collective (1 ms alone), not of the products.
            point("AllReduce", 2, 3.0e-3, 3.5e-3),
            point("AllReduce", 2, 1.0e-3, 1.25e-3),
            point("AllReduce", 4, 1.0e-3, 1.0e-3),
            // Faster beside a collective than alone (noise): no contention, not negative.
            point("AllGather", 2, 1.1e-3, 1.0e-3),
            // Slower by more than the collective's own time: at most all of it.
            point("SendRecv", 2, 1.0e-3, 3.0e-3),
        ];
        assert_eq!(p.contention("AllReduce", 2), Some(0.375));
        assert_eq!(p.contention("AllReduce", 4), Some(0.0));
        assert_eq!(p.contention("AllGather", 2), Some(0.0));
        assert_eq!(p.contention("SendRecv", 2), Some(1.0));
        assert_eq!(p.contention("ReduceScatter", 2), None);
        let mut p = Profile {
            overlap: p.overlap,
            ..Profile::empty_for_tests()
        };
        assert_eq!(p.check(), Ok(()));
        p.overlap[1].products_beside_s = 0.0;
        assert_eq!(
            p.check(),
            Err("[[overlap]] point 2 has products_beside_s = 0".into())
        );
    }

    #[test]
    fn a_curve_keeps_the_clocks_it_was_measured_at_and_older_curves_read_without_them() {
        let text = "product_tflops = 775.0\nburst_clock_mhz = 1755.0\n\
                    [[points]]\nutilisation = 0.5\ncopies = 21\nproduct_slowdown = 1.117\n\
                    memory_slowdown = 0.965\nclock_mhz = 1665.0\npower_w = 690.0\n";
        let c: PowerCurve = toml::from_str(text).unwrap();
        assert_eq!(c.burst_clock_mhz, Some(1755.0));
        assert_eq!(
            (c.points[0].clock_mhz, c.points[0].power_w),
            (Some(1665.0), Some(690.0))
        );
        let back: PowerCurve = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let old = "product_tflops = 786.0\n[[points]]\nutilisation = 0.3\ncopies = 50\n\
                   product_slowdown = 1.0\nmemory_slowdown = 0.92\n";
        let c: PowerCurve = toml::from_str(old).unwrap();
        assert_eq!((c.burst_clock_mhz, c.points[0].clock_mhz), (None, None));
        assert!(!toml::to_string(&c).unwrap().contains("clock"));
    }

    #[test]
    fn an_impossible_power_point_is_refused_naming_it() {
        let point = |utilisation: f64, product_slowdown: f64| PowerPoint {
            utilisation,
            copies: 1,
            product_slowdown,
            memory_slowdown: 1.0,
            clock_mhz: None,
            power_w: None,
        };
        let mut p = Profile {
            power: Some(PowerCurve {
                product_tflops: 786.0,
                burst_clock_mhz: None,
                points: vec![point(0.5, 1.09), point(1.0, 1.16)],
            }),
            ..Profile::empty_for_tests()
        };
        assert_eq!(p.check(), Ok(()));
        p.power.as_mut().unwrap().points[1].product_slowdown = f64::NAN;
        assert_eq!(
            p.check(),
            Err("[[power.points]] point 2 has product_slowdown = NaN".into())
        );
        p.power.as_mut().unwrap().points[1] = point(1.5, 1.16);
        assert!(p.check().unwrap_err().contains("utilisation = 1.5"));
    }

    #[test]
    fn a_measured_send_receive_prices_a_pipeline_transfer_inside_a_node_only() {
        use crate::cost::comm::{p2p_time, Fabric};
        use crate::plan::{Link, LinkKind};
        let mut p = profile();
        let point = |bytes: usize, gb: f64| CollectivePoint {
            op: SEND_RECV.into(),
            gpus: 2,
            bytes,
            seconds: bytes as f64 / (gb * 1e9),
            bus_gb_per_s: gb,
        };
        p.collectives = vec![point(1 << 20, 20.0), point(1 << 28, 300.0)];
        let link = |bandwidth: f64| Link {
            kind: LinkKind::Nvlink,
            bandwidth,
            latency: 2e-6,
        };
        let mut fabric = Fabric {
            intra: link(450e9),
            inter: Some(link(50e9)),
            inter_per_gpu: 50e9,
            pair_bus_bandwidth: None,
            pre_ampere: false,
            profile: None,
        };
        let bytes = (1u64 << 28) as f64;
        let modelled = p2p_time(bytes, false, &fabric);
        let across = p2p_time(bytes, true, &fabric);
        fabric.profile = Some(std::sync::Arc::new(p));
        // Inside the node: the measured 300 GB/s, latency included in the measurement.
        assert!((p2p_time(bytes, false, &fabric) - bytes / 300e9).abs() < 1e-12);
        assert!(p2p_time(bytes, false, &fabric) != modelled);
        // Across nodes the NIC's model stays: the profile measured one node.
        assert_eq!(p2p_time(bytes, true, &fabric), across);
    }

    #[test]
    fn a_measured_collective_replaces_the_model_for_its_group_size_only() {
        use crate::cost::comm::{collective_time, Collective, Fabric, GroupShape};
        use crate::plan::{Link, LinkKind};
        let p = std::sync::Arc::new(profile());
        let mut fabric = Fabric {
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
        };
        let pair = GroupShape {
            size: 2,
            per_node: 2,
        };
        let modelled = collective_time(Collective::AllReduce, 2f64.powi(24), pair, &fabric);
        fabric.profile = Some(p);
        let measured = collective_time(Collective::AllReduce, 2f64.powi(24), pair, &fabric);
        // 16 MiB at the interpolated 125 GB/s bus bandwidth, bus factor 1 for a pair.
        assert!(
            (measured - 2f64.powi(24) / 125e9).abs() < 1e-9,
            "{measured}"
        );
        assert!(measured != modelled);
        // Four GPUs were not measured: the model stays.
        let four = GroupShape {
            size: 4,
            per_node: 4,
        };
        let with = collective_time(Collective::AllReduce, 1e8, four, &fabric);
        fabric.profile = None;
        assert_eq!(
            with,
            collective_time(Collective::AllReduce, 1e8, four, &fabric)
        );
    }

    #[test]
    fn thin_products_take_the_thin_points_efficiency() {
        let p = profile();
        let thin = p.gemm_efficiency(8192.0, 300.0, 4096.0).unwrap();
        let square = p.gemm_efficiency(8000.0, 8000.0, 8000.0).unwrap();
        assert!(thin < 0.5 && square > 0.75, "{thin} {square}");
        assert_eq!(p.gemm_efficiency(8192.0, 8192.0, 8192.0), Some(0.8));
    }

    #[test]
    fn a_profile_round_trips_through_toml() {
        let mut p = profile();
        p.activations.push(ActivationPoint {
            kind: "swiglu".into(),
            pass: "backward".into(),
            rows: 8192,
            width: 8192,
            seconds: 2e-4,
            gb_per_s: 4026.5,
        });
        let text = toml::to_string(&p).unwrap();
        assert!(text.contains("[[activations]]"), "{text}");
        assert_eq!(toml::from_str::<Profile>(&text).unwrap(), p);
    }

    #[test]
    fn a_profile_measured_before_the_norms_and_activations_loads_without_them() {
        let p = profile();
        let text = toml::to_string(&p).unwrap();
        let old: String = text
            .lines()
            .filter(|l| !l.starts_with("norms") && !l.starts_with("activations"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_ne!(old, text);
        let loaded = toml::from_str::<Profile>(&old).unwrap();
        assert!(loaded.norms.is_empty() && loaded.activations.is_empty());
        assert_eq!(loaded, p);
    }
}

#[cfg(test)]
mod shipped {
    #[test]
    fn every_shipped_profile_is_found_by_its_gpu_and_precision() {
        for (gpu, file) in [
            ("H100_SXM_80GB", "h100_sxm_80gb.bf16.toml"),
            ("H200_SXM_141GB", "h200_sxm_141gb.bf16.toml"),
        ] {
            let p = super::shipped(gpu, "bf16").unwrap();
            assert_eq!(super::shipped_name(&p), Some(file));
        }
        // fp8 plans: the bf16 profile (whose fp8_gemm grid, where it has one, times their
        // products; the rest of their step runs in bf16); fp16 ones too (the same 16-bit
        // kernels, one peak); fp32 none.
        for precision in ["fp8", "fp16"] {
            let p = super::shipped("H200_SXM_141GB", precision).unwrap();
            assert_eq!(super::shipped_name(&p), Some("h200_sxm_141gb.bf16.toml"));
        }
        assert!(super::shipped("H200_SXM_141GB", "fp32").is_none());
        assert!(super::prices("bf16", "fp16") && super::prices("fp32", "fp32"));
        assert!(!super::prices("bf16", "fp32") && !super::prices("fp16", "bf16"));
        assert!(super::shipped("A100_SXM_80GB", "bf16").is_none());
        // A copy is not the shipped one.
        let copy = std::sync::Arc::new((*super::shipped("H100_SXM_80GB", "bf16").unwrap()).clone());
        assert_eq!(super::shipped_name(&copy), None);
    }

    #[test]
    fn the_shipped_h200_profile_loads() {
        let p = super::Profile::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/catalog/profiles/h200_sxm_141gb.bf16.toml"
        )))
        .unwrap();
        assert_eq!(p.provenance.catalog_gpu, "H200_SXM_141GB");
        let e = p.gemm_efficiency(16384.0, 2304.0, 768.0).unwrap();
        assert!(e > 0.3 && e < 1.0, "{e}");
    }

    #[test]
    fn every_shipped_profile_loads() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/catalog/profiles"));
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let p = super::Profile::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!p.gemm.is_empty(), "{}", path.display());
            n += 1;
        }
        assert!(n >= 2, "{n} profiles");
    }
}
