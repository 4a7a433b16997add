//! fp8 training (`train.precision = fp8`) as Transformer Engine runs it under Megatron-Core
//! and NeMo: which products run in fp8, the casts around them, and the memory of the fp8
//! copies.
//!
//! - **In fp8**: the transformer layers' linear layers (TE's `Linear`, `LayerNormLinear`,
//!   `LayerNormMLP`, `GroupedLinear`): each product's forward and both of its backward
//!   products (input and weight gradients), at the device's fp8 peak. Weights and inputs are
//!   E4M3, gradients E5M2 (`Format.HYBRID`, the default of TE's `DelayedScaling`,
//!   `transformer_engine/common/recipe/__init__.py`).
//! - **In bf16**: the attention core (`fp8_dpa = False` by default in the same recipe: "FP8
//!   DPA" is opt-in), the output layer (Megatron-Core builds it as its own
//!   `tensor_parallel.ColumnParallelLinear`, not a TE module, unless MXFP8 is on:
//!   `megatron/core/models/gpt/gpt_model.py`, `output_layer_cls`, at d98e8a64dd), the
//!   router, norms, activations and every memory-bound pass: they keep bf16 tensors.
//! - **Casts** (memory-bound passes, each with its amax reduced in the same kernel): a
//!   product's input is quantized to fp8 with a transposed copy for the weight gradient
//!   (Hopper's fp8 products take both operands K-major): read 2 bytes, write 1 + 1. In
//!   backward each product's output gradient is cast and transposed the same way (4 bytes an
//!   element). Megatron-Core builds the qkv and the MLP's first product as
//!   `TELayerNormColumnParallelLinear`, whose norm writes fp8 itself (`apply_normalization`
//!   with the input quantizer, `module/layernorm_linear.py`): the norm's write shrinks by a
//!   byte and only the transpose is added (read 1, write 1), 1 byte net. The attention
//!   output and the MLP's second product are `TERowParallelLinear`, and the activation
//!   between the MLP's products is Megatron's own in 16 bits (`MLP` with
//!   `MLPSubmodules(linear_fc1, linear_fc2)` in `get_mlp_module_spec_for_backend`,
//!   `megatron/core/models/gpt/gpt_layer_specs.py` at d98e8a64dd; TE's fused MLP behind
//!   `use_te_op_fuser` is opt-in): the second product's input and the first product's output
//!   gradient arrive in 16 bits and take the full 4 bytes. Frameworks that swap `te.Linear`
//!   in for each product and keep their own norms (llm-foundry's `fc_type: te`, which its
//!   fp8 benchmarks set in `scripts/train/benchmarking/submit_benchmarks.py`) cast every
//!   product's input that way too. The weights are cast (and transposed) once a step and
//!   cached for the other micro-batches: Megatron-Core passes `is_first_microbatch` to TE
//!   (`megatron/core/extensions/transformer_engine.py`, `_is_first_microbatch`).
//! - **Communication**: with sequence parallelism the norm's output is gathered over the
//!   tensor-parallel group already in fp8 (`gather_along_first_dim(..., quantizer=...)` in
//!   `LayerNormLinear`), one byte an element; the other collectives move bf16.
//! - **Memory**: the cached fp8 weights and their transposes, 2 bytes a parameter of the
//!   fp8 products; the inputs a product keeps for its weight gradient in fp8 (one byte: TE
//!   keeps the column-wise copy and drops the row-wise one, `module/linear.py`) where
//!   Korthikanti et al. count two.
//!
//! Every other framework planc prices is taken to run fp8 through Transformer Engine's
//! modules as above, except planc's own runtime (`runtime/src/device/fp8.rs`), which runs
//! the same products in the same formats with separate cast passes: a product's input is
//! cast in forward (read 2 bytes, write 1) and its transposed copy cast again in backward
//! from the 16-bit input the layer keeps (read 2, write 1: no activation kept in fp8), the
//! output gradient cast and transposed in backward (4 bytes), the weights once a step (4
//! bytes a weight); its gathers under sequence parallelism move bf16.

use super::ops::{Op, OpId, OpKind};
use crate::plan::{Framework, Plan, Precision};

/// Whether the plan trains in fp8.
pub fn on(plan: &Plan) -> bool {
    plan.train.precision == Precision::Fp8
}

/// Whether the layer operation `id` is one of the products that run in fp8 (the
/// transformer layers' linear layers); everything else keeps 16-bit.
pub fn runs_in_fp8(id: OpId) -> bool {
    id.fp8_cast().is_some()
}

/// Bytes per element the casts around the fp8 product `id` move: (its input, in forward;
/// its output gradient, in backward; its input again, in backward). See the module doc.
fn cast_bytes(plan: &Plan, id: OpId) -> (f64, f64, f64) {
    if plan.framework() == Framework::Planc {
        return (3.0, 4.0, 3.0);
    }
    let (input, grad) = match (plan.framework(), id) {
        // `TELayerNormColumnParallelLinear`: the norm writes fp8, only the transpose is
        // added; the output gradient comes in 16-bit (from the attention core's backward,
        // or from Megatron's own activation backward for the MLP's first product).
        (Framework::Megatron, OpId::QkvProj | OpId::MlpUpProj) => (1.0, 4.0),
        // Plain `Linear`/`GroupedLinear` (`TERowParallelLinear`, the experts', and every
        // product of a framework that swaps in `te.Linear`): a cast and transpose each way.
        _ => (4.0, 4.0),
    };
    (input, grad, 0.0)
}

/// The casts around a layer's fp8 products `ops` for one micro-batch, one operation per
/// product: its input's cast in forward and its output gradient's in backward, and its
/// share of the weights' cast once a step (4 bytes a weight, over the step's
/// micro-batches).
pub fn casts(plan: &Plan, ops: &[Op]) -> Vec<Op> {
    let micro_batches = plan.parallel.grad_accum(plan.train.global_batch).max(1) as f64;
    ops.iter()
        .filter_map(|o| {
            let cast = o.id.fp8_cast()?;
            let (count, m, n, k) = match o.kind {
                OpKind::Gemm { m, n, k } => (1.0, m, n, k),
                OpKind::GroupedGemm { count, m, n, k } => (count, m, n, k),
                _ => return None,
            };
            let (input, grad, input_again) = cast_bytes(plan, o.id);
            let weights = 4.0 * count * n * k / micro_batches;
            Some(Op {
                id: cast,
                kind: OpKind::Cast {
                    bytes: input * count * m * k + weights,
                    backward_bytes: grad * count * m * n + input_again * count * m * k,
                },
            })
        })
        .collect()
}

/// Bytes an element of the norm's output takes in the sequence-parallel all-gathers before
/// the fp8 products: one in fp8 (TE quantizes before gathering; planc's runtime gathers
/// bf16 and casts after), else the training precision's.
pub fn gathered_bytes(plan: &Plan) -> f64 {
    if on(plan) && plan.framework() != Framework::Planc {
        1.0
    } else {
        plan.train.precision.bytes()
    }
}

/// Bytes of the cached fp8 weights and their transposes per parameter of the fp8 products.
pub const WEIGHT_CACHE_BYTES: f64 = 2.0;

/// Whether the framework keeps a product's input for its weight gradient in fp8 (TE) rather
/// than in 16-bit: every framework but planc's runtime, which keeps its 16-bit inputs and
/// casts them again in backward.
pub fn keeps_fp8_inputs(plan: &Plan) -> bool {
    on(plan) && plan.framework() != Framework::Planc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;
    use crate::cost::ops::layer_forward;

    fn plan(precision: &str, parallel: &str) -> Plan {
        plan_in(precision, parallel, "")
    }

    /// Llama 3 8B at tp 2 with sequence parallelism, trained by `framework` ("" for the
    /// default).
    fn plan_in(precision: &str, parallel: &str, framework: &str) -> Plan {
        let job = if framework.is_empty() {
            String::new()
        } else {
            format!("job j {{ framework = {framework} }}")
        };
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ preset = \"llama3-8b\" }}
             train {{ global_batch = 32, precision = {precision}, attention = flash }}
             parallel {{ tp = 2, pp = 1, dp = 4, micro_batch = 1, sequence_parallel = true {parallel} }}
             {job}"
        );
        let c = check_source("t.tp", &text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    #[test]
    fn each_fp8_product_gets_its_casts_and_bf16_plans_none() {
        let fp8 = layer_forward(&plan("fp8", ""));
        let casts: Vec<&Op> = fp8
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Cast { .. }))
            .collect();
        assert_eq!(casts.len(), 4, "{casts:?}");
        let bf16 = layer_forward(&plan("bf16", ""));
        assert!(bf16.iter().all(|o| !matches!(o.kind, OpKind::Cast { .. })));
        // The attention output's cast: 4 bytes an element of its input (tokens × h / tp)
        // and of its output gradient (tokens × h), and the weight's once a step (8 micro-
        // batches).
        let tokens = 8192.0;
        let (h, t) = (4096.0, 2.0);
        let proj = fp8
            .iter()
            .find(|o| o.id == OpId::AttentionOutProjFp8Cast)
            .unwrap();
        let weights = 4.0 * h * h / t / 8.0;
        assert_eq!(
            proj.kind,
            OpKind::Cast {
                bytes: 4.0 * tokens * h / t + weights,
                backward_bytes: 4.0 * tokens * h,
            }
        );
    }

    #[test]
    fn only_megatrons_layernorm_linears_write_fp8_and_its_mlp_activation_stays_16_bit() {
        let bytes = |job: &str| {
            let ops = layer_forward(&plan_in("fp8", "", job));
            let cast = |id: OpId| match ops.iter().find(|o| o.id == id).map(|o| &o.kind) {
                Some(OpKind::Cast {
                    bytes,
                    backward_bytes,
                }) => (*bytes, *backward_bytes),
                other => panic!("{id:?}: {other:?}"),
            };
            [
                OpId::QkvProjFp8Cast,
                OpId::AttentionOutProjFp8Cast,
                OpId::MlpUpProjFp8Cast,
                OpId::MlpDownProjFp8Cast,
            ]
            .map(cast)
        };
        // Llama 3 8B at tp 2, 8192 tokens, 8 micro-batches a step; the weights' share is
        // the same under both frameworks.
        let (tokens, h, t) = (8192.0, 4096.0, 2.0);
        let (qkv, up, down) = (48.0 * 128.0 / t, 2.0 * 14336.0 / t, h);
        let weight = |n: f64, k: f64| 4.0 * n * k / 8.0;
        let megatron = bytes("megatron");
        // The norm before qkv and before the MLP writes fp8 (1 byte net); the attention
        // output's input, the MLP's activation output and every output gradient take 4.
        assert_eq!(
            megatron,
            [
                (tokens * h + weight(qkv, h), 4.0 * tokens * qkv),
                (4.0 * tokens * h / t + weight(h, h / t), 4.0 * tokens * h),
                (tokens * h + weight(up, h), 4.0 * tokens * up),
                (
                    4.0 * tokens * 14336.0 / t + weight(down, 14336.0 / t),
                    4.0 * tokens * h
                ),
            ]
        );
        // A framework that swaps te.Linear in keeps its own norms: 4 bytes every input.
        let torch = bytes("torch");
        assert_eq!(torch[0], (4.0 * tokens * h + weight(qkv, h), megatron[0].1));
        assert_eq!(torch[2], (4.0 * tokens * h + weight(up, h), megatron[2].1));
        assert_eq!((torch[1], torch[3]), (megatron[1], megatron[3]));
    }

    #[test]
    fn plancs_runtime_casts_each_input_again_in_backward_and_gathers_bf16() {
        let planc = |precision: &str| plan_in(precision, "", "planc");
        let p = planc("fp8");
        let ops = layer_forward(&p);
        let qkv = ops.iter().find(|o| o.id == OpId::QkvProjFp8Cast).unwrap();
        // Llama 3 8B at tp 2: qkv from h = 4096 to (32 + 2·8)·128 / 2 outputs, 8192 tokens,
        // 8 micro-batches a step.
        let (tokens, h, o) = (8192.0, 4096.0, 48.0 * 128.0 / 2.0);
        let weights = 4.0 * h * o / 8.0;
        assert_eq!(
            qkv.kind,
            OpKind::Cast {
                bytes: 3.0 * tokens * h + weights,
                backward_bytes: 4.0 * tokens * o + 3.0 * tokens * h,
            }
        );
        assert_eq!(gathered_bytes(&p), 2.0);
        assert!(!keeps_fp8_inputs(&p));
        assert_eq!(gathered_bytes(&planc("bf16")), 2.0);
    }

    #[test]
    fn the_sequence_parallel_gathers_before_the_fp8_products_move_fp8() {
        let gather = |p: &Plan| -> f64 {
            layer_forward(p)
                .iter()
                .filter_map(|o| match (o.id, &o.kind) {
                    (
                        OpId::AttentionAllGather | OpId::MlpAllGather,
                        OpKind::Collective { bytes, .. },
                    ) => Some(*bytes),
                    _ => None,
                })
                .sum()
        };
        let (fp8, bf16) = (gather(&plan("fp8", "")), gather(&plan("bf16", "")));
        assert_eq!(2.0 * fp8, bf16);
    }

    #[test]
    fn only_the_linear_layers_run_faster_and_the_casts_cost_memory_passes() {
        use crate::cost::kinds::{layer_by_kind, WorkKind};
        use crate::cost::time::{pieces, placement, Device};
        let by_kind = |precision: &str| {
            let p = plan(precision, "");
            let group = &p.cluster.groups[0];
            let dev = Device {
                gpu: &group.gpu,
                precision: p.train.precision,
            };
            let pl = placement(&p, group);
            let kinds = layer_by_kind(&p, &dev, &pl);
            let head = pieces(&p, &dev, &pl).head_fwd;
            (kinds, head)
        };
        let ((fp8, fp8_head), (bf16, bf16_head)) = (by_kind("fp8"), by_kind("bf16"));
        let of = |kinds: &[(
            WorkKind,
            crate::cost::time::PassTime,
            crate::cost::time::PassTime,
        )],
                  k: WorkKind| {
            kinds
                .iter()
                .find(|x| x.0 == k)
                .map(|x| (x.1.compute, x.2.compute))
                .unwrap()
        };
        // The attention core and the output layer keep bf16.
        assert_eq!(
            of(&fp8, WorkKind::Attention),
            of(&bf16, WorkKind::Attention)
        );
        assert_eq!(fp8_head.compute, bf16_head.compute);
        // The linear layers: products at twice the rate, casts on top.
        let (f8, b8) = of(&fp8, WorkKind::Linear);
        let (f16, b16) = of(&bf16, WorkKind::Linear);
        assert!(f8 < 0.75 * f16 && b8 < 0.75 * b16, "{f8} {f16} {b8} {b16}");
        assert!(f8 > 0.5 * f16, "the casts cost something: {f8} vs {f16}");
    }

    #[test]
    fn fp8_keeps_cached_weight_copies_and_one_byte_inputs() {
        use crate::cost::memory::{layer_activation_bytes, stage_linear_params, stage_memory};
        let (fp8, bf16) = (plan("fp8", ""), plan("bf16", ""));
        let (a, b) = (stage_memory(&fp8, 0, 8), stage_memory(&bf16, 0, 8));
        let cache = 2.0 * stage_linear_params(&fp8, 0);
        assert!((a.weights_bytes - b.weights_bytes - cache).abs() < 1.0);
        // Llama 3 8B, tp 2 with sequence parallelism, no recompute: the QKV and FC1 inputs
        // (2·sbh/t each), the attention output (2·sbh/t) and SwiGLU's output (2·sbf/t) in
        // one byte instead of two.
        let (s, h, f, t) = (8192.0, 4096.0, 14336.0, 2.0);
        let saved = (2.0 * s * h / t + s * h / t + s * f / t) * 1.0;
        let fewer = layer_activation_bytes(&bf16) - layer_activation_bytes(&fp8);
        assert!((fewer - saved).abs() < 1.0, "{fewer} vs {saved}");
    }
}
