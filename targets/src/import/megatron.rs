//! Megatron-LM's `pretrain_gpt.py` flags (`megatron/training/arguments.py`, core_r0.13 and
//! later, as `args.rs` writes them) into the plan. Megatron-LM's own defaults differ from
//! planc's in places (dropout 0.1, Adam's β2 0.999, linear decay, no overlapped gradient
//! reduction without `--overlap-grad-reduce`): a flag's absence imports as Megatron-LM runs
//! it, and the header says which values came from those defaults.

use super::draft::{Origin, V};
use super::flags::{self, flag, Arity::*, Flag, Given, Kind::*, To::*};
use super::Ctx;

const DERIVED: &str = "planc's launch derives it (from the steps and the plan)";
const NO_EVAL: &str = "planc plans no evaluation";
const DATA: &str = "the data pipeline: planc prices the step, whatever the data";
const TUNING: &str = "an implementation choice planc does not price";
const LOGGING: &str = "logging and monitoring, not the step";

/// The flags placed, and the known flags planc does not place (with why).
pub const TABLE: &[Flag] = &[
    // model
    flag(&["--num-layers"], One, Attr("model", "layers", Int)),
    flag(&["--hidden-size"], One, Attr("model", "hidden", Int)),
    flag(&["--ffn-hidden-size"], One, Attr("model", "ffn_hidden", Int)),
    flag(&["--num-attention-heads"], One, Attr("model", "heads", Int)),
    flag(&["--kv-channels"], One, Attr("model", "head_dim", Int)),
    flag(&["--num-query-groups"], One, Attr("model", "kv_heads", Int)),
    flag(&["--group-query-attention"], Switch, Special("gqa")),
    flag(&["--seq-length"], One, Attr("model", "seq_len", Int)),
    flag(&["--max-position-embeddings"], One, Special("max_positions")),
    flag(&["--swiglu"], Switch, Set("model", "mlp", "swiglu")),
    flag(&["--position-embedding-type"], One, Special("position")),
    flag(&["--use-rotary-position-embeddings"], Switch, Set("model", "position", "rope")),
    flag(&["--normalization"], One, Special("norm")),
    flag(&["--disable-bias-linear"], Switch, Set("model", "bias", "false")),
    flag(&["--untie-embeddings-and-output-weights"], Switch, Set("model", "tied_embeddings", "false")),
    flag(&["--rotary-base"], One, Attr("model", "rope_theta", Float)),
    flag(&["--window-size"], One, Special("window_size")),
    flag(&["--window-attn-skip-freq"], One, Special("window_skip")),
    flag(&["--vocab-size"], One, Attr("model", "vocab", Int)),
    flag(&["--num-experts"], One, Attr("model", "experts", Int)),
    flag(&["--moe-router-topk"], One, Attr("model", "top_k", Int)),
    flag(&["--moe-ffn-hidden-size"], One, Attr("model", "expert_ffn_hidden", Int)),
    flag(&["--moe-shared-expert-intermediate-size"], One, Special("shared_experts")),
    flag(&["--moe-layer-freq"], One, Special("moe_layer_freq")),
    flag(&["--moe-expert-capacity-factor"], One, Attr("model", "capacity_factor", Float)),
    flag(&["--moe-pad-expert-input-to-capacity"], Switch, Skip("planc pads to the capacity whenever capacity_factor is set")),
    flag(&["--moe-token-dispatcher-type"], One, Special("dispatcher")),
    flag(&["--attention-backend"], One, Special("attention_backend")),
    flag(&["--use-flash-attn"], Switch, Set("train", "attention", "flash")),
    flag(&["--transformer-impl"], One, Special("transformer_impl")),
    flag(&["--attention-dropout"], One, Special("dropout")),
    flag(&["--hidden-dropout"], One, Special("dropout")),
    flag(&["--cross-entropy-loss-fusion"], Switch, Skip("planc prices the fused loss Megatron-LM runs with it")),
    flag(&["--make-vocab-size-divisible-by"], One, Special("vocab_divisor")),
    flag(&["--norm-epsilon", "--layernorm-epsilon"], One, Skip("numerics, not the step's cost")),
    flag(&["--init-method-std", "--rotary-percent", "--rotary-seq-len-interpolation-factor", "--apply-layernorm-1p", "--qk-layernorm", "--no-position-embedding", "--apply-query-key-layer-scaling", "--attention-softmax-in-fp32", "--use-rope-scaling", "--rope-scaling-factor", "--no-rope-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion", "--no-bias-gelu-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm", "--squared-relu", "--openai-gelu", "--onnx-safe", "--bert-no-binary-head", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-pre-softmax", "--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-dtype", "--moe-router-score-function", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "--moe-router-topk-scaling-factor", "--moe-router-num-groups", "--moe-router-group-topk", "--moe-shared-expert-overlap", "--moe-input-jitter-eps", "--moe-token-drop-policy", "--use-mcore-models", "--use-legacy-models", "--spec", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--no-gradient-accumulation-fusion-in-fp32"], Many, Skip(TUNING)),
    // parallelism
    flag(&["--tensor-model-parallel-size"], One, Attr("parallel", "tp", Int)),
    flag(&["--pipeline-model-parallel-size"], One, Attr("parallel", "pp", Int)),
    flag(&["--context-parallel-size"], One, Attr("parallel", "cp", Int)),
    flag(&["--expert-model-parallel-size"], One, Attr("parallel", "ep", Int)),
    flag(&["--decoder-first-pipeline-num-layers"], One, Attr("parallel", "first_stage_layers", Int)),
    flag(&["--decoder-last-pipeline-num-layers"], One, Attr("parallel", "last_stage_layers", Int)),
    flag(&["--num-layers-per-virtual-pipeline-stage"], One, Special("layers_per_chunk")),
    flag(&["--num-virtual-stages-per-pipeline-rank"], One, Special("vpp")),
    flag(&["--pipeline-model-parallel-layout"], One, Skip("planc splits layers by first_stage_layers, last_stage_layers and vpp; write them for this layout")),
    flag(&["--no-overlap-p2p-communication"], Switch, Set("parallel", "overlap_p2p", "false")),
    flag(&["--overlap-p2p-communication"], Switch, Set("parallel", "overlap_p2p", "true")),
    flag(&["--sequence-parallel"], Switch, Set("parallel", "sequence_parallel", "true")),
    flag(&["--use-distributed-optimizer"], Switch, Set("parallel", "zero", "1")),
    flag(&["--use-megatron-fsdp", "--use-torch-fsdp2"], Switch, Special("fsdp")),
    flag(&["--data-parallel-sharding-strategy"], One, Special("fsdp_strategy")),
    flag(&["--ckpt-format"], One, Skip("the checkpoint format, not the step")),
    flag(&["--no-gradient-accumulation-fusion"], Switch, Set("parallel", "grad_accumulation_fusion", "false")),
    flag(&["--no-async-tensor-model-parallel-allreduce"], Switch, Set("parallel", "overlap_tp_backward", "false")),
    flag(&["--overlap-grad-reduce"], Switch, Set("parallel", "overlap_grad_reduce", "true")),
    flag(&["--overlap-param-gather"], Switch, Skip("planc overlaps the parameter gather with overlap_grad_reduce")),
    flag(&["--grad-reduce-in-bf16"], Switch, Set("parallel", "grad_dtype", "bf16")),
    flag(&["--recompute-granularity"], One, Special("recompute")),
    flag(&["--recompute-activations"], Switch, Set("parallel", "recompute", "selective")),
    flag(&["--recompute-method"], One, Special("recompute_method")),
    flag(&["--recompute-num-layers"], One, Special("recompute_layers")),
    flag(&["--optimizer-cpu-offload"], Switch, Set("parallel", "offload", "optimizer")),
    flag(&["--use-precision-aware-optimizer"], Switch, Skip("planc prices the offloaded optimizer as Megatron-LM runs it with this flag")),
    flag(&["--tp-comm-overlap"], Switch, Skip("the tensor-parallel collectives overlapped through Userbuffers, which planc does not price: they stay exposed in its step")),
    flag(&["--batch-p2p-communication", "--no-batch-p2p-communication", "--overlap-moe-expert-parallel-comm", "--defer-embedding-wgrad-compute", "--align-grad-reduce", "--no-align-grad-reduce", "--align-param-gather", "--ddp-bucket-size", "--ddp-average-in-collective", "--delay-wgrad-compute", "--num-distributed-optimizer-instances", "--distributed-timeout-minutes", "--distributed-backend", "--use-cpu-initialization", "--empty-unused-memory-level", "--use-ring-exchange-p2p", "--cp-comm-type", "--hierarchical-context-parallel-sizes", "--expert-tensor-parallel-size", "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--tp-comm-overlap-cfg", "--check-for-nan-in-loss-and-grad", "--manual-gc", "--manual-gc-interval", "--deterministic-mode", "--use-dist-ckpt", "--async-save", "--nccl-communicator-config-path", "--use-tp-pp-dp-mapping", "--calculate-per-token-loss", "--accumulate-allreduce-grads-in-fp32", "--fp8-param-gather", "--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"], Many, Skip(TUNING)),
    // training
    flag(&["--micro-batch-size"], One, Attr("parallel", "micro_batch", Int)),
    flag(&["--global-batch-size"], One, Attr("train", "global_batch", Int)),
    flag(&["--bf16"], Switch, Set("train", "precision", "bf16")),
    flag(&["--fp16"], Switch, Set("train", "precision", "fp16")),
    flag(&["--fp8-format"], One, Special("fp8")),
    flag(&["--fp8-recipe", "--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-interval", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16", "--loss-scale", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis", "--fp32-residual-connection", "--no-fp8-wgrad"], Many, Skip("numerics of the precision planc prices")),
    flag(&["--optimizer"], One, Special("optimizer")),
    flag(&["--train-iters"], One, Attr("train", "steps", Int)),
    flag(&["--train-samples"], One, Special("train_samples")),
    flag(&["--lr"], One, Attr("train", "lr", Float)),
    flag(&["--min-lr"], One, Attr("train", "min_lr", Float)),
    flag(&["--lr-decay-style"], One, Special("lr_decay")),
    flag(&["--lr-warmup-iters"], One, Attr("train", "warmup_steps", Int)),
    flag(&["--lr-warmup-fraction"], One, Special("warmup_fraction")),
    flag(&["--lr-warmup-samples"], One, Special("warmup_samples")),
    flag(&["--lr-decay-iters", "--lr-decay-samples"], One, Skip("planc decays over the whole run (train.steps)")),
    flag(&["--lr-warmup-init", "--lr-wsd-decay-style", "--lr-wsd-decay-iters", "--lr-wsd-decay-samples", "--override-opt_param-scheduler", "--use-checkpoint-opt_param-scheduler", "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style", "--decoupled-lr", "--decoupled-min-lr"], One, Skip("a schedule detail planc's train block does not hold")),
    flag(&["--weight-decay"], One, Attr("train", "weight_decay", Float)),
    flag(&["--clip-grad"], One, Attr("train", "grad_clip", Float)),
    flag(&["--adam-beta1"], One, Attr("train", "adam_beta1", Float)),
    flag(&["--adam-beta2"], One, Attr("train", "adam_beta2", Float)),
    flag(&["--adam-eps"], One, Attr("train", "adam_eps", Float)),
    flag(&["--sgd-momentum"], One, Skip("planc's sgd has no momentum attribute")),
    flag(&["--seed"], One, Attr("train", "seed", Int)),
    flag(&["--save"], One, Special("checkpoint")),
    flag(&["--load"], One, Special("checkpoint")),
    flag(&["--save-interval"], One, Skip(DERIVED)),
    flag(&["--log-interval"], One, Skip(DERIVED)),
    flag(&["--eval-interval", "--eval-iters"], One, Skip(NO_EVAL)),
    flag(&["--exit-interval", "--exit-duration-in-mins", "--exit-signal-handler", "--no-load-optim", "--no-load-rng", "--no-save-optim", "--no-save-rng", "--finetune", "--pretrained-checkpoint", "--auto-detect-ckpt-format", "--dist-ckpt-strictness", "--non-persistent-save-interval", "--non-persistent-ckpt-type", "--ckpt-fully-parallel-load", "--no-ckpt-fully-parallel-save", "--ckpt-assume-constant-structure"], Many, Skip("checkpoint and run control, not the step")),
    // Megatron-DeepSpeed (Microsoft's fork): the DeepSpeed engine around Megatron-LM's model.
    flag(&["--deepspeed"], Many, Special("deepspeed")),
    flag(&["--deepspeed_config", "--deepspeed-config"], One, Special("deepspeed_config")),
    flag(&["--zero-stage"], One, Attr("parallel", "zero", Int)),
    flag(&["--deepspeed-activation-checkpointing", "--no-pipeline-parallel", "--checkpoint-activations", "--partition-activations"], Many, Skip("how Megatron-DeepSpeed wires DeepSpeed in; the recompute and pipeline flags say what runs")),
    // data
    flag(&["--data-path"], Many, Special("data")),
    flag(&["--mock-data"], Switch, Skip("synthetic data: planc's default when train.data is unset")),
    flag(&["--tokenizer-type"], One, Special("tokenizer")),
    flag(&["--merge-file"], One, Special("merge_file")),
    flag(&["--split", "--tokenizer-model", "--vocab-file", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path", "--num-workers", "--dataloader-type", "--no-create-attention-mask-in-dataloader", "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--data-args-path", "--per-split-data-args-path", "--mmap-bin-files", "--no-mmap-bin-files", "--object-storage-cache-path", "--sft", "--sft-tokenizer-prompt-format"], Many, Skip(DATA)),
    // logging
    flag(&["--log-throughput", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--log-num-zeros-in-grad", "--log-params-norm", "--log-progress", "--log-world-size-to-tensorboard", "--log-loss-scale-to-tensorboard", "--log-batch-size-to-tensorboard", "--tensorboard-dir", "--tensorboard-log-interval", "--tensorboard-queue-size", "--wandb-project", "--wandb-exp-name", "--wandb-save-dir", "--timing-log-level", "--timing-log-option", "--profile", "--profile-step-start", "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--record-memory-history", "--logging-level", "--barrier-with-L1-time", "--no-barrier-with-level-1-timing", "--log-straggler", "--enable-one-logger", "--no-one-logger", "--one-logger-project", "--one-logger-run-name", "--log-energy", "--log-interval-seconds"], Many, Skip(LOGGING)),
];

/// Places one Megatron-LM command's arguments.
pub fn read(cx: &mut Ctx, args: &[super::shell::Word], file: &str) {
    let deepspeed = args.iter().any(|w| w.text == "--deepspeed");
    cx.draft.assume(
        "job",
        "framework",
        V::Ident(if deepspeed { "deepspeed" } else { "megatron" }.into()),
        Origin::new(file, None, "pretrain_*.py"),
        if deepspeed {
            "Megatron-DeepSpeed: Megatron-LM's model in DeepSpeed's engine (--deepspeed)"
        } else {
            "a Megatron-LM launch"
        },
    );
    let (given, loose) = flags::parse(args, TABLE);
    for w in loose {
        cx.draft.unplaced(
            Origin::new(file, Some(w.line), w.text.clone()),
            None,
            "a word that belongs to no flag",
        );
    }
    place(cx, given, file);
}

/// Places Megatron-LM's flags, however the input wrote them (a command line, a YAML
/// config's Megatron-Core fields): its defaults apply where they are silent.
pub fn place(cx: &mut Ctx, given: Vec<Given>, file: &str) {
    cx.pending.megatron = Some(file.to_string());
    // The sharding strategy is Megatron-FSDP's, whichever flag comes first.
    cx.pending.fsdp |= given
        .iter()
        .any(|g| matches!(g.key.as_str(), "--use-megatron-fsdp" | "--use-torch-fsdp2"));
    if let Some(g) = given.iter().find(|g| g.key == "--merge-file") {
        // A merges file, whatever its path, is a BPE tokenizer's: GPT-2's.
        cx.pending
            .tokenizer_vocab
            .get_or_insert((50257, g.origin(file)));
    }
    let special = flags::place(
        given,
        TABLE,
        &mut cx.draft,
        file,
        "not a Megatron-LM flag planc knows",
    );
    for (name, g) in special {
        special_flag(cx, name, &g, file);
    }
}

fn special_flag(cx: &mut Ctx, name: &str, g: &Given, file: &str) {
    let from = g.origin(file);
    let v = g.value().unwrap_or("").to_string();
    let d = &mut cx.draft;
    let int = flags::int(&v);
    let float = v.parse::<f64>().ok();
    match name {
        "gqa" => cx.pending.gqa = true,
        "max_positions" => cx.pending.max_positions = int.map(|n| (n, from)),
        "position" => match v.as_str() {
            "rope" | "mrope" | "yarn" => d.set("model", "position", V::Ident("rope".into()), from),
            "learned_absolute" => d.set("model", "position", V::Ident("learned".into()), from),
            _ => d.unplaced(from, Some(v), "planc prices learned and rope positions"),
        },
        "norm" => match v.to_ascii_lowercase().as_str() {
            "rmsnorm" => d.set("model", "norm", V::Ident("rmsnorm".into()), from),
            "layernorm" => d.set("model", "norm", V::Ident("layernorm".into()), from),
            _ => d.unplaced(from, Some(v), "planc prices LayerNorm and RMSNorm"),
        },
        "shared_experts" => cx.pending.shared_expert_size = int.map(|n| (n, from)),
        "moe_layer_freq" => match first_dense(&v) {
            Some(n) => d.set("model", "first_dense_layers", V::Int(n), from),
            None => d.unplaced(from, Some(v), "planc's MoE models have dense layers first only (first_dense_layers)"),
        },
        // (left, right): the keys before a query and after it; a causal model has none after.
        "window_size" => match window_left(&v) {
            Some(w) => d.set("model", "sliding_window", V::Int(w), from),
            None => d.unplaced(from, Some(v), "planc prices causal windows: (left, 0)"),
        },
        "window_skip" => match int {
            Some(n) => d.set("model", "full_attention_every", V::Int(n), from),
            None => d.unplaced(from, Some(v), "planc states a period of full layers (an integer), not a list"),
        },
        "dispatcher" if v == "alltoall" => {
            d.unplaced(from, Some(v), "planc prices the all-to-all dispatcher, as given")
        }
        "dispatcher" => d.unplaced(from, Some(v), "planc prices the all-to-all dispatcher; this one is priced as it"),
        "attention_backend" => match v.as_str() {
            "unfused" | "local" => d.set("train", "attention", V::Ident("standard".into()), from),
            "flash" | "fused" | "auto" => d.set("train", "attention", V::Ident("flash".into()), from),
            _ => d.unplaced(from, Some(v), "not a Megatron-LM attention backend"),
        },
        // The local layers are Megatron-LM's unfused path (cost::eager); Transformer
        // Engine's, its default, the fused one.
        "transformer_impl" => match v.as_str() {
            "local" => d.set("job", "kernels", V::Ident("eager".into()), from),
            "transformer_engine" => d.set("job", "kernels", V::Ident("fused".into()), from),
            _ => d.unplaced(from, Some(v), "not a Megatron-LM transformer implementation"),
        },
        "dropout" => match float {
            Some(x) => cx.pending.dropout.push((x, from)),
            None => d.unplaced(from, Some(v), "not a probability"),
        },
        "layers_per_chunk" => cx.pending.layers_per_chunk = int.map(|n| (n, from)),
        "vpp" => {
            if let Some(n) = int {
                d.set("parallel", "vpp", V::Int(n), from.clone());
                if n > 1 {
                    d.set("parallel", "schedule", V::Ident("interleaved".into()), from);
                }
            }
        }
        "fsdp" => {
            cx.pending.fsdp = true;
            if !d.has("parallel", "zero") {
                // Megatron-FSDP's default strategy shards optimizer state, gradients and
                // parameters.
                d.set("parallel", "zero", V::Int(3), from);
            }
        }
        "fsdp_strategy" if !cx.pending.fsdp => d.unplaced(
            from,
            Some(v),
            "Megatron-FSDP's sharding, which applies only with --use-megatron-fsdp \
             (the distributed optimizer's is --use-distributed-optimizer)",
        ),
        "fsdp_strategy" => match v.as_str() {
            "no_shard" => d.set("parallel", "zero", V::Int(0), from),
            "optim" => d.set("parallel", "zero", V::Int(1), from),
            "optim_grads" => d.set("parallel", "zero", V::Int(2), from),
            "optim_grads_params" => d.set("parallel", "zero", V::Int(3), from),
            _ => d.unplaced(from, Some(v), "not a sharding strategy"),
        },
        "recompute" => match v.as_str() {
            "selective" | "full" => d.set("parallel", "recompute", V::Ident(v), from),
            _ => d.unplaced(from, Some(v), "planc recomputes selective or full"),
        },
        "recompute_method" if v == "uniform" => d.unplaced(from, Some(v), "planc's full recompute is uniform, one layer a checkpoint, as given"),
        "recompute_layers" if v == "1" => d.unplaced(from, Some(v), "planc's full recompute checkpoints every layer, as given"),
        "recompute_method" | "recompute_layers" => d.unplaced(from, Some(v), "planc prices full recompute as uniform over one layer a checkpoint (every layer recomputed)"),
        "fp8" => d.set("train", "precision", V::Ident("fp8".into()), from),
        "optimizer" => match v.as_str() {
            // Megatron-LM's Adam decouples its weight decay (AdamW).
            "adam" => d.set("train", "optimizer", V::Ident("adamw".into()), from),
            "sgd" => d.set("train", "optimizer", V::Ident("sgd".into()), from),
            _ => d.unplaced(from, Some(v), "planc prices adam, adamw and sgd"),
        },
        "train_samples" => cx.pending.train_samples = int.map(|n| (n, from)),
        "lr_decay" => match v.as_str() {
            "cosine" | "constant" => d.set("train", "lr_schedule", V::Ident(v), from),
            _ => {
                cx.pending.lr_decay_seen = true;
                d.unplaced(from, Some(v), "planc's schedules are cosine and constant; the plan keeps cosine")
            }
        },
        "warmup_fraction" => cx.pending.warmup_fraction = float.map(|x| (x, from)),
        "warmup_samples" => cx.pending.warmup_samples = int.map(|n| (n, from)),
        "checkpoint" => {
            let differs = d.get("job", "checkpoint_dir").is_some_and(|c| c != &V::Str(v.clone()));
            if g.key == "--load" && d.has("job", "checkpoint_dir") {
                if differs {
                    d.unplaced(from, Some(v), "checkpoints are loaded from where they are saved (--save)");
                }
            } else {
                d.set("job", "checkpoint_dir", V::Str(v), from);
            }
        }
        "data" => data_path(cx, g, from),
        "merge_file" => d.unplaced(from, Some(v), DATA),
        "deepspeed" => match g.value() {
            Some(path) => cx.pending.deepspeed_files.push((path.to_string(), from)),
            None => d.unplaced(from, None, "Megatron-DeepSpeed: job.framework = deepspeed"),
        },
        "deepspeed_config" => cx.pending.deepspeed_files.push((v, from)),
        "vocab_divisor" => {
            cx.pending.vocab_divisor = int;
            d.unplaced(from, Some(v), "vocabulary padding: model.vocab is the padded size (--vocab-size as given; a tokenizer's, padded by it × tp)");
        }
        "tokenizer" => {
            if v == "GPT2BPETokenizer" {
                cx.pending.tokenizer_vocab = Some((50257, from.clone()));
            }
            d.unplaced(from, Some(v), DATA);
        }
        _ => d.unplaced(from, Some(v), "planc has no attribute for it"),
    }
}

/// One dataset prefix is `train.data` (its `.bin` is a flat array of token ids); a blend of
/// several is listed.
fn data_path(cx: &mut Ctx, g: &Given, from: Origin) {
    match g.values.as_slice() {
        [prefix] => cx
            .draft
            .set("train", "data", V::Str(format!("{prefix}.bin")), from),
        _ => cx.draft.unplaced(
            from,
            g.joined(),
            "a blend of datasets: planc's train.data is one token file",
        ),
    }
}

/// The left extent of `--window-size` ("128,0", "(128, 0)"), where nothing is attended
/// after a query.
fn window_left(v: &str) -> Option<u64> {
    let inner = v.trim().trim_start_matches('(').trim_end_matches(')');
    let (left, right) = inner.split_once(',')?;
    let right: i64 = right.trim().parse().ok()?;
    if right != 0 {
        return None;
    }
    left.trim().parse().ok().filter(|&w| w > 0)
}

/// `([0]*3+[1]*58)` or `[0,0,0,1,1,…]`: the dense layers before the first MoE layer, when
/// every layer after them is MoE.
pub fn first_dense(v: &str) -> Option<u64> {
    let s: String = v.chars().filter(|c| !c.is_whitespace()).collect();
    let layers: Vec<u64> = if s.contains('*') {
        let mut out = Vec::new();
        for term in s.trim_start_matches('(').trim_end_matches(')').split('+') {
            let (list, times) = term.split_once('*')?;
            let item: u64 = list.trim_matches(|c| c == '[' || c == ']').parse().ok()?;
            let n: usize = times.parse().ok()?;
            out.extend(std::iter::repeat_n(item, n));
        }
        out
    } else {
        s.trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?
    };
    let dense = layers.iter().take_while(|&&x| x == 0).count();
    layers[dense..]
        .iter()
        .all(|&x| x == 1)
        .then_some(dense as u64)
}

/// Megatron-LM's defaults where a flag is absent and planc's default differs.
pub fn defaults(cx: &mut Ctx) {
    let Some(file) = cx.pending.megatron.clone() else {
        return;
    };
    let from = |k: &str| Origin::new(&file, None, format!("Megatron-LM's default without {k}"));
    let d = &mut cx.draft;
    d.assume(
        "train",
        "adam_beta2",
        V::Float(0.999),
        from("--adam-beta2"),
        "Megatron-LM's default (planc's is 0.95)",
    );
    d.assume(
        "train",
        "weight_decay",
        V::Float(0.01),
        from("--weight-decay"),
        "Megatron-LM's default (planc's is 0.1)",
    );
    d.assume(
        "train",
        "min_lr",
        V::Float(0.0),
        from("--min-lr"),
        "Megatron-LM's default (planc's is lr / 10)",
    );
    d.assume(
        "train",
        "optimizer",
        V::Ident("adamw".into()),
        from("--optimizer"),
        "Megatron-LM's Adam, which decouples weight decay",
    );
    if !cx.pending.lr_decay_seen && !d.has("train", "lr_schedule") {
        d.note("train.lr_schedule: Megatron-LM decays linearly without --lr-decay-style, a schedule planc does not have; the plan keeps cosine");
    }
    if !d.has("train", "precision") {
        d.assume(
            "train",
            "precision",
            V::Ident("fp32".into()),
            from("--bf16/--fp16"),
            "Megatron-LM trains in fp32 without --bf16 or --fp16",
        );
    }
    if !cx.pending.fsdp {
        d.assume(
            "parallel",
            "overlap_grad_reduce",
            V::Bool(false),
            from("--overlap-grad-reduce"),
            "Megatron-LM reduces gradients after the backward pass without --overlap-grad-reduce",
        );
    }
    if cx.pending.dropout.is_empty() {
        d.assume(
            "train",
            "dropout",
            V::Float(0.1),
            from("--attention-dropout/--hidden-dropout"),
            "Megatron-LM's default",
        );
    }
    if d.has("model", "kv_heads") && !cx.pending.gqa {
        if let Some((_, o)) = d.remove("model", "kv_heads") {
            d.unplaced(
                o,
                None,
                "Megatron-LM reads --num-query-groups only with --group-query-attention",
            );
        }
    }
}
