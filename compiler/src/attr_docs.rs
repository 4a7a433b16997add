//! One line about every attribute the schema accepts: what it means, its unit and its
//! default. Editors show it on hover; a test keeps it complete against `schema::SCHEMAS`.

pub fn doc(block: &str, attr: &str) -> Option<&'static str> {
    Some(match (block, attr) {
        ("cluster", "nodes") => {
            "number of nodes; a list (`[1, 2, 4]`) leaves the cluster's size to `solve` (planc extension)"
        }
        ("group", "nodes") => "number of nodes",
        ("cluster" | "group", "gpus_per_node") => "GPUs in each node",
        ("cluster" | "group", "gpu") => {
            "the GPU: a catalog name (`H100_SXM_80GB`, `A100_SXM_80GB`, ...) or a `gpu` block of this plan"
        }
        ("intra_node" | "inter_node", "kind") => {
            "the link: nvlink, pcie (inside a node); infiniband, roce, ethernet (between nodes)"
        }
        ("intra_node", "bandwidth") => {
            "GPU-to-GPU bandwidth inside a node, per GPU, one direction (e.g. `450 GB/s`); default from the GPU"
        }
        ("inter_node", "bandwidth") => "bandwidth of one NIC (e.g. `400 Gb/s`)",
        ("intra_node" | "inter_node", "latency") => "one message's latency (e.g. `5 us`)",
        ("inter_node", "nics_per_node") => "NICs per node; the node's GPUs share them",
        ("cluster", "price") => {
            "money per GPU-hour (e.g. `2.49 USD/h`; USD, EUR, GBP, CNY, JPY): the cost of a step and of the training run (planc extension)"
        }
        ("group", "price") => {
            "money per GPU-hour of this group's GPUs; default `cluster.price` (planc extension)"
        }
        ("cluster", "profile") => {
            "a device profile from `planc calibrate` (TOML, relative to the plan): measured curves instead of the catalog's constants"
        }
        ("model", "preset") => {
            "a published architecture from the catalog (`\"llama3-70b\"`); attributes written here override it"
        }
        ("model", "layers") => "transformer layers",
        ("model", "hidden") => "hidden size",
        ("model", "heads") => "attention heads",
        ("model", "kv_heads") => "key/value heads (grouped-query attention); default: heads",
        ("model", "head_dim") => {
            "width of one attention head; default hidden / heads (Qwen3-32B: 128 with hidden 5120, 64 heads) (planc extension)"
        }
        ("model", "ffn_hidden") => "feed-forward inner size; default 4 × hidden",
        ("model", "vocab") => "vocabulary size",
        ("model", "seq_len") => "sequence length in tokens",
        ("model", "mlp") => "gelu or swiglu",
        ("model", "norm") => "layernorm or rmsnorm (planc extension)",
        ("model", "position") => "learned or rope position embeddings (planc extension)",
        ("model", "bias") => "whether linear layers have biases; default true (planc extension)",
        ("model", "tied_embeddings") => "input and output embeddings share weights; default true",
        ("model", "experts") => "experts per MoE layer; 1 = dense",
        ("model", "top_k") => "experts each token is routed to",
        ("model", "expert_ffn_hidden") => {
            "inner size of each routed and shared expert's MLP; default ffn_hidden (planc extension)"
        }
        ("model", "shared_experts") => {
            "experts every token runs besides its routed ones, each of expert_ffn_hidden; default 0 (planc extension)"
        }
        ("model", "first_dense_layers") => {
            "the first layers of an MoE model have a dense MLP of ffn_hidden; default 0 (planc extension)"
        }
        ("model", "capacity_factor") => {
            "expert capacity as a multiple of the balanced load, buffers padded to it; default: none, dropless (planc extension)"
        }
        ("model", "moe_imbalance") => {
            "busiest expert-parallel rank's routed tokens over the mean, measured; default: the fluctuation of balanced routing (planc extension)"
        }
        ("model", "sliding_window") => {
            "tokens a query attends in a windowed layer, itself included (HF `sliding_window`, Megatron-LM `--window-size W,0`); default none: every layer attends the whole sequence (planc extension)"
        }
        ("model", "full_attention_every") => {
            "with sliding_window: every Nth layer attends the whole sequence, the others their window (Megatron-LM `--window-attn-skip-freq N`: GPT-OSS 2, Gemma 3 6); default none: every layer windowed (planc extension)"
        }
        ("model", "rope_theta") => "rope base frequency; default 10000 (planc extension)",
        ("train", "global_batch") => "sequences per optimizer step",
        ("train", "precision") => "fp32, fp16, bf16 or fp8",
        ("train", "optimizer") => "adam, adamw or sgd",
        ("train", "tokens") => "tokens to train on, for the time to train",
        ("train", "method") => {
            "what trains: full (default, every weight), lora (low-rank adapters beside frozen \
             weights) or frozen (the first frozen_layers layers, the embedding and the output \
             layer frozen)"
        }
        ("train", "lora_rank") => "LoRA's rank r: an adapter of r × (in + out) per matrix; default 8",
        ("train", "lora_alpha") => "LoRA's scale numerator (alpha / r); default 2 × lora_rank",
        ("train", "lora_targets") => {
            "the matrices LoRA adapts in every layer: a list of q, k, v, o, gate, up, down, or \
             all (default)"
        }
        ("train", "frozen_layers") => "method = frozen: the first layers whose weights do not train",
        ("train", "dropout") => {
            "attention and hidden dropout probability; default 0 (Megatron-LM's own default is 0.1)"
        }
        ("train", "data") => {
            "token file for `planc run` (uint16/uint32 ids, no header), relative to the plan; default: the synthetic corpus"
        }
        ("train", "seed") => "seeds the initial weights and the synthetic corpus; default 1234",
        ("train", "steps") => "optimizer steps `planc run` takes; default 10",
        ("train", "lr") => "peak learning rate; default 3e-4",
        ("train", "min_lr") => "final learning rate of the cosine schedule; default lr / 10",
        ("train", "lr_schedule") => "constant or cosine (after warm-up); default cosine",
        ("train", "warmup_steps") => "linear learning-rate warm-up steps; default 0",
        ("train", "weight_decay") => "decoupled weight decay on 2-D weights; default 0.1",
        ("train", "grad_clip") => {
            "clip the global gradient norm to this; default 1.0; 0 = off, and (outside fp16) the \
             step takes no norm: one pass over the gradients less, grad_norm not reported"
        }
        ("train", "adam_beta1") => "Adam's first-moment decay; default 0.9",
        ("train", "adam_beta2") => "Adam's second-moment decay; default 0.95",
        ("train", "adam_eps") => "Adam's epsilon; default 1e-8",
        ("train", "attention") => {
            "flash (default: scores not stored) or standard (planc extension)"
        }
        ("parallel", "tp") => "tensor-parallel size (inside a node, on NVLink, as a rule)",
        ("parallel", "pp") => "pipeline stages",
        ("parallel", "dp") => "data-parallel replicas; `auto` = world size / (tp × pp × cp)",
        ("parallel", "cp") => "context-parallel size: the sequence split over GPUs",
        ("parallel", "ep") => "expert-parallel size (MoE)",
        ("parallel", "vpp") => "model chunks per pipeline stage (interleaved schedule)",
        ("parallel", "micro_batch") => "sequences per micro-batch on one GPU",
        ("parallel", "schedule") => "1f1b, gpipe, interleaved, or zb_h1 (planc extension)",
        ("parallel", "sequence_parallel") => {
            "shard norms and dropout over the tensor-parallel group; default false"
        }
        ("parallel", "zero") => "0–3: what is sharded over data parallelism (1 = Megatron's distributed optimizer)",
        ("parallel", "recompute") => "none, selective (attention) or full activation recomputation",
        ("parallel", "offload") => "none, optimizer or params: state kept in host memory",
        ("parallel", "first_stage_layers") => {
            "layers on the first pipeline stage (it also holds the embedding); default: the even split; `auto`: the count that evens the stages' work"
        }
        ("parallel", "last_stage_layers") => {
            "layers on the last pipeline stage (it also holds the output layer); default: the even split; `auto`: the count that evens the stages' work"
        }
        ("parallel", "overlap_grad_reduce") => {
            "reduce data-parallel gradients during backward, bucket by bucket (Megatron-LM's --overlap-grad-reduce); false: after it, exposed; default true (planc extension)"
        }
        ("parallel", "overlap_p2p") => {
            "overlap pipeline sends and receives with the passes (Megatron-LM, interleaved schedule only); default: on when interleaved (planc extension)"
        }
        ("parallel", "overlap_tp_backward") => {
            "run the column-parallel products' backward collectives (the input's re-gather, the input gradient's reduction) beside their own gradient products (Megatron-LM since 2021-09, Transformer Engine); false: exposed, as in the forward; default: on for framework = megatron (planc extension)"
        }
        ("parallel", "grad_accumulation_fusion") => {
            "weight-gradient products accumulate straight into the fp32 gradient buffer (Megatron-LM's --gradient-accumulation-fusion); false: a pass over the gradients per micro-batch adds them in (Megatron-LM before 2022-09); default true (planc extension)"
        }
        ("parallel", "scatter_gather_p2p") => {
            "without sequence parallelism, each tensor-parallel rank sends 1/tp of a pipeline transfer and the receivers all-gather it (Megatron-LM before Megatron-core); default false (planc extension)"
        }
        ("parallel", "grad_dtype") => {
            "the gradient buffer's type, fp32 | bf16 | fp16: its memory and the optimizer's passes over it; default (auto) fp32, as Megatron-LM (bf16 accumulates in fp32), PyTorch DDP/FSDP2 (the fp32 parameters' type) and DeepSpeed hold it; bf16 as NeMo's distributed fused Adam (planc extension)"
        }
        ("parallel", "optimizer_dtype") => {
            "the optimizer state's type, fp32 | fp32_remainders | bf16: fp32 master weights and moments (12 bytes for Adam); the master kept as bf16 weights' remainders (10); bf16 moments and no master (4), as NeMo's distributed fused Adam; default (auto) fp32 (planc extension)"
        }
        ("parallel", "reduce_dtype") => {
            "the type of the data-parallel reduction, fp32 | bf16 | fp16: the bytes it moves; default (auto) the gradient buffer's (Megatron-LM, torchtitan's float32 reduce, Composer's DEFAULT) (planc extension)"
        }
        ("job", "name") => "the job's name, in every launcher",
        ("job", "framework") => {
            "what the launch scripts run: megatron (default), deepspeed, torch, torchtitan, or planc \
             (`planc run`); \
             the cost model prices the step as that framework runs it (the loss: fp32 upcast in \
             Megatron-LM and the others, fused in the storage type in planc)"
        }
        ("job", "scheduler") => "the scheduler the job is submitted to",
        ("job", "partition") => "Slurm partition",
        ("job", "time_limit") => "wall-clock limit of one attempt (e.g. `48 h`)",
        ("job", "image") => "container image (needed by the k8s target)",
        ("job", "checkpoint_dir") => "where checkpoints are saved and resumed from",
        ("job", "retries") => "attempts after a failure (Slurm requeue, Kubernetes backoff limit)",
        ("job", "entrypoint") => {
            "what the launchers start: the training script (default pretrain_gpt.py; train.py for \
             deepspeed and torch, which planc writes when the plan names none) or, for framework planc, the planc binary (default `planc` on PATH); \
             planc extension"
        }
        ("job", "entrypoint_args") => {
            "the flags the entrypoint takes: planc (default; planc's training scripts' flags, \
             DeepSpeed's config as `--deepspeed --deepspeed_config FILE`) or hf_trainer (Hugging \
             Face TrainingArguments, DeepSpeed's config as `--deepspeed FILE`); planc extension"
        }
        ("job", "kernels") => {
            "the kernels the framework runs a layer with: fused (Transformer Engine and apex, or \
             planc's own) or eager (its unfused PyTorch path, one kernel an operation, priced \
             pass by pass); default fused for megatron and planc, eager for torchtitan and for \
             torch and deepspeed running the train.py planc writes; planc extension"
        }
        ("job", "attention_kernel") => {
            "whose fused attention kernel the framework runs, for `attention = flash`: flash2 \
             (FlashAttention-2: flash-attn, PyTorch SDPA), cudnn (Transformer Engine's on \
             Hopper) or triton (FlashAttention in Triton, priced at FlashAttention-2's rate \
             over Dao 2023's measured 1.4x forward and 2x backward); default cudnn for \
             megatron with fused kernels, flash2 otherwise; planc extension"
        }
        ("job", "volume") => {
            "a Kubernetes PersistentVolumeClaim mounted at checkpoint_dir in every pod, so \
             checkpoints outlive the pods; planc extension"
        }
        ("search", "objective") => {
            "what `solve` ranks by: throughput, memory, or cost (money per token with `cluster.price`, else GPU-hours per token)"
        }
        ("search", "memory_headroom") => "memory left free on every GPU; default 10 %",
        ("search", "top") => "layouts `solve` shows; default 5",
        ("gpu", "preset") => {
            "a built-in GPU to start from (`H100_SXM_80GB`): every attribute not written is its"
        }
        ("gpu", "memory") => {
            "device memory as the device reports it (e.g. `79.6 GiB`; nvidia-smi's MiB / 1024)"
        }
        ("gpu", "hbm_bandwidth") => "memory bandwidth (e.g. `5.3 TB/s`)",
        ("gpu", "fp32" | "fp16" | "bf16" | "fp8") => "dense peak in that precision (e.g. `989 TFLOPS`)",
        ("gpu", "gemm_efficiency") => {
            "fraction of the peak large matrix products reach; default 0.75 (`planc run` measures it)"
        }
        ("gpu", "memory_efficiency") => {
            "fraction of the bandwidth streaming kernels reach; default 0.85 (`planc run` measures it)"
        }
        ("gpu", "host_link") => {
            "the device's link to its host, one direction (offloaded state crosses it); default 31.5 GB/s, PCIe Gen4 x16"
        }
        ("gpu", "nvlink_domain") => {
            "GPUs one NVLink fabric joins (8 on an HGX board, 72 in an NVL72 rack); a node should be one"
        }
        ("gpu", "host_memory_bandwidth") => {
            "host memory bandwidth per GPU (an offloaded optimizer steps at it); default 51.2 GB/s, DGX A100's share"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::schema::SCHEMAS;

    #[test]
    fn every_attribute_is_documented() {
        for s in SCHEMAS {
            for a in s.attrs {
                assert!(super::doc(s.kind, a).is_some(), "no doc for {}.{a}", s.kind);
            }
        }
    }
}
