//! Every diagnostic code planc emits, with its default severity and an explanation.
//!
//! Codes are defined here, in one table, so that `planc explain CODE` and the docs can list
//! them and no two phases reuse a number. Ranges: `P00xx` syntax, `P01xx` files and imports,
//! `P02xx` blocks, attributes, types and units, `P03xx` the parallel layout, `P04xx` memory.

use crate::diagnostic::Severity;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    pub id: &'static str,
    pub severity: Severity,
    pub title: &'static str,
    pub explanation: &'static str,
}

macro_rules! codes {
    ($($name:ident $sev:ident $title:literal $expl:literal;)*) => {
        $(
            #[doc = $title]
            pub const $name: Code = Code {
                id: stringify!($name),
                severity: Severity::$sev,
                title: $title,
                explanation: $expl,
            };
        )*
        /// All codes, in order.
        pub const ALL: &[Code] = &[$($name),*];
    };
}

codes! {
    P0001 Error "unexpected character"
        "A character that cannot start any token: only identifiers, numbers, quantities, strings, \
         `{ } [ ] ( ) = , ; + - * / .` and `#` comments may appear in a plan.";
    P0002 Error "unterminated string"
        "A string opened with `\"` has no closing quote on the same line.";
    P0003 Error "unknown unit"
        "A number is followed by letters that are not a unit. Units: B KB MB GB TB KiB MiB GiB TiB, \
         B/s KB/s MB/s GB/s TB/s Kb/s Mb/s Gb/s Tb/s Gbps, ns us ms s min h, TFLOPS PFLOPS, %.";
    P0004 Error "malformed number"
        "Numbers are digits with optional `_` separators, a fraction and an exponent: `42`, `1_536`, `0.5`, `1.5e9`.";
    P0005 Error "syntax error"
        "The parser expected something else here; the message says what. Attributes are \
         `name = value`, ended by a newline, `;` or `,`; blocks are `kind name? { ... }`.";
    P0006 Error "unclosed delimiter"
        "A `{`, `[` or `(` is never closed. The error points at the opening one.";
    P0007 Error "invalid escape"
        "Strings accept only the escapes `\\\"` and `\\\\`.";
    P0008 Error "nested too deeply"
        "Blocks, brackets (`(`, `[`) and signs nest at most 256 levels deep, references between \
         attributes (`a = b`, `b = c`, ...) and imports likewise. Real plans use a handful; the \
         limit keeps planc (and the editor's language server) from exhausting its stack on \
         generated or damaged text. The part nested deeper is skipped; write it with fewer levels.";
    P0009 Note "too many diagnostics"
        "planc lists the first diagnostics of a file (100 syntax errors, 200 others) and counts the \
         rest, so that a damaged or generated file gives a readable answer instead of millions of \
         lines. Fix the errors shown and check again.";
    P0101 Error "cannot read file"
        "An imported file does not exist or cannot be read. Import paths are relative to the importing file.";
    P0102 Error "import cycle"
        "Files import each other in a cycle. Move the shared blocks into a file both import.";
    P0103 Error "file is not UTF-8"
        "Plans are UTF-8 text. The file has a byte sequence that is not UTF-8, usually a comment \
         saved in another encoding (Latin-1, Windows-1252, GBK, Shift-JIS) or a file saved as \
         UTF-16. The error points at the first bad byte; save the file as UTF-8 (without \
         converting, the editor may show that character wrongly) and check again.";
    P0104 Error "cannot use the device profile"
        "`cluster.profile` names a file that cannot be read or is not a device profile written by \
         `planc calibrate`, one that holds an impossible measurement (a size of 0, or a time or \
         rate that is not a positive number: an edited or damaged file), or one measured on \
         another GPU than the plan's. Paths are relative to the plan file. Measure the machine \
         with `planc calibrate -o FILE`.";
    P0105 Warning "the token file is malformed"
        "`train.data` names a file that is here but is not a token file `planc run` can read: its \
         size is not a whole number of tokens, it holds fewer tokens than one sample \
         (seq_len + 1), or it holds an id at or above `model.vocab`. The format (the run \
         contract's \"Data\"): a flat array of little-endian token ids without a header, uint16 \
         when `model.vocab` ≤ 65536, else uint32, relative to the plan file. An id out of range \
         usually means a file of another tokenizer, or uint32 ids read as uint16; `check` reads \
         the first 16 MiB for ids, `planc run` the whole file.";
    P0106 Note "the token file is not here"
        "`train.data` names a file that does not exist on this machine. That is fine when the \
         file lives on the cluster the plan runs on: `planc run` reads it there, relative to the \
         plan file. Without `data`, `planc run` trains on its synthetic corpus.";
    P0201 Error "unknown block"
        "Top-level blocks are `cluster`, `model`, `train`, `parallel`, `job`, `search` and `gpu`; \
         `cluster` may hold `intra_node`, `inter_node` and `group`; `job` may hold `env`.";
    P0202 Error "duplicate block"
        "A plan has exactly one `cluster`, `model`, `train` and `parallel`, and at most one `job` and \
         `search`, after imports are merged; a `gpu` name may be defined once.";
    P0203 Error "missing block"
        "A plan needs one `cluster`, one `model`, one `train` and one `parallel` block.";
    P0204 Error "unknown attribute"
        "The block has no attribute of this name. The message suggests the closest one.";
    P0205 Error "attribute set twice"
        "An attribute may be set once per block; the later value would silently win.";
    P0206 Error "missing attribute"
        "A required attribute has no value and no default.";
    P0207 Error "wrong type"
        "The value has the wrong type for this attribute (a string where a number is expected, say).";
    P0208 Error "wrong unit"
        "The quantity measures the wrong thing for this attribute: a bandwidth written in `GiB`, or a \
         plain number where a unit is needed. planc never guesses units.";
    P0209 Error "unknown value"
        "The identifier is not one of the values this attribute accepts. Where it is another \
         tool's name for one of them (`framework = nemo`, `precision = bfloat16`, \
         `attention = sdpa`), the help names planc's own and why; an editor offers it as a \
         quick fix. planc keeps one name for each value, so that a plan reads the same \
         wherever it goes.";
    P0210 Error "unknown reference"
        "The identifier or path does not name an attribute. A bare name refers to an attribute of the \
         same block; `block.attr` to another block's.";
    P0211 Error "reference cycle"
        "Attributes refer to each other in a cycle, so none has a value.";
    P0212 Error "value out of range"
        "The value is outside the range this attribute accepts (a count must be a positive whole number).";
    P0213 Error "hole outside parallel"
        "`auto` and candidate lists are allowed only in the `parallel` block, and there not for \
         `first_stage_layers` and `last_stage_layers` (how the layers are split is written, never searched) \
         nor for `overlap_grad_reduce`, `overlap_p2p`, `overlap_tp_backward`, \
         `grad_accumulation_fusion` and `scatter_gather_p2p` (what the framework overlaps, fuses or splits describes it).";
    P0214 Error "unknown GPU"
        "The GPU is neither in the built-in catalog nor defined by a `gpu` block in the plan.";
    P0215 Error "unknown model preset"
        "The `preset` names no built-in model. The help line names the closest preset, or lists them \
         all; they are defined in `compiler/catalog/models.toml` and listed with the `model` block \
         in docs/language.md.";
    P0216 Error "invalid arithmetic"
        "Arithmetic between incompatible values (adding a size to a time), or division by zero.";
    P0217 Error "block name"
        "This block kind needs a name (`gpu NAME { ... }`, `group NAME { ... }`) or takes none.";
    P0218 Error "cluster shape"
        "A cluster is either uniform (`nodes`, `gpus_per_node`, `gpu`) or made of `group` blocks, not both.";
    P0219 Error "missing inter-node network"
        "A cluster of more than one node needs an `inter_node { ... }` block: planc will not guess the network.";
    P0220 Warning "device memory in decimal units"
        "A `gpu` block's `memory` is written in KB, MB, GB or TB, which are powers of ten: \
         `memory = 80 GB` is 80 × 10⁹ bytes, 74.5 GiB. Vendors sell memory in binary \
         gigabytes under the name GB, and a device reports a little less than that (an H100 \
         sold as 80 GB reports 79.6 GiB). planc takes the value as written and warns; write \
         the GiB the device reports (nvidia-smi's MiB / 1024), which the help names when a \
         built-in GPU is sold as that size, or leave `memory` out under a `preset`.";
    P0221 Warning "node and NVLink domain disagree"
        "planc prices the GPUs of one node on `intra_node` and the nodes on `inter_node`, so a \
         node should be one NVLink domain: the GPUs one NVLink fabric joins (the catalog's \
         `nvlink_domain`: 8 on an HGX board, 72 in a GB200 NVL72 rack). A node of more GPUs \
         prices traffic between domains at NVLink speed; nodes smaller than a domain that \
         spans hosts (an NVL72 rack of 18 trays) price traffic inside it on the network. \
         Write one node per domain, or give a `gpu` block its own `nvlink_domain`.";
    P0226 Warning "setting of another training method"
        "`lora_rank`, `lora_alpha` and `lora_targets` belong to `train.method = lora`, \
         `frozen_layers` to `train.method = frozen`. Under another method they change nothing: \
         the plan is priced without them (`--set train.method=full` on a LoRA plan, say, prices \
         full training). Write the method they belong to, or remove them.";
    P0227 Warning "full-attention layers without a window"
        "`model.full_attention_every = N` says which layers of a sliding-window model attend the \
         whole sequence (every Nth; the others attend `sliding_window` tokens). Without \
         `sliding_window` every layer attends the whole sequence, so it changes nothing. Write \
         the window, or remove the attribute.";
    P0230 Error "`--set` names no attribute"
        "`--set PATH=VALUE` changes one attribute of the plan without editing it: PATH is the \
         block, its nested blocks and the attribute, separated by dots (`parallel.tp`, \
         `cluster.inter_node.bandwidth`, `cluster.group.NAME.nodes`, `gpu.NAME.memory`). A path \
         that stops at a block, or before the name a `gpu` or `group` block needs, names nothing \
         to set.";
    P0301 Error "world size mismatch"
        "tp × pp × dp × cp must equal the number of GPUs in the cluster.";
    P0302 Error "expert parallelism does not fit"
        "Expert parallelism is carved out of data parallelism: ep must divide dp and the number of experts.";
    P0303 Error "heads not divisible by tp"
        "Tensor parallelism splits attention heads: tp must divide `heads`.";
    P0304 Error "kv_heads not divisible by tp"
        "Tensor parallelism splits key/value head groups: tp must divide `kv_heads` (Megatron-LM requires it).";
    P0305 Error "layers not divisible by stages"
        "Each pipeline stage (and each virtual chunk) gets the same number of layers: pp × vpp must divide \
         `layers`. Without interleaving, `first_stage_layers` and `last_stage_layers` split them unevenly \
         instead (Megatron-LM's --decoder-first/last-pipeline-num-layers); the help suggests values.";
    P0306 Error "batch not divisible"
        "Gradient accumulation is global_batch / (dp × micro_batch) and must be a whole number.";
    P0307 Error "schedule and vpp disagree"
        "The interleaved schedule needs vpp > 1 and pp > 1; vpp > 1 needs the interleaved schedule.";
    P0308 Error "sequence parallelism needs tp"
        "Sequence parallelism splits the work that tensor parallelism replicates: it needs tp > 1.";
    P0309 Error "precision not supported by the device"
        "The device has no tensor-core support for this precision (bf16 needs Ampere or newer; fp8 needs Hopper or Ada).";
    P0310 Warning "tensor parallel group spans nodes"
        "tp is larger than the GPUs of one node, so every layer's collectives cross the inter-node \
         network, usually many times slower. Keep tp ≤ gpus_per_node.";
    P0311 Warning "fewer micro-batches than stages"
        "With fewer micro-batches than pipeline stages, stages idle most of the step. Raise global_batch \
         or lower micro_batch or pp.";
    P0312 Error "sequence not divisible"
        "Context parallelism splits the sequence into 2 × cp chunks (for load balance); sequence \
         parallelism splits it by tp: seq_len must be divisible by both.";
    P0313 Error "heads not divisible by kv_heads"
        "Grouped-query attention shares each key/value head among heads / kv_heads query heads.";
    P0314 Error "holes need planc solve"
        "Retired: `planc check` now fills `auto` and candidate lists itself (see P0502 and P0801). The \
         code is kept so that its number is not reused.";
    P0315 Error "mixed cluster does not map"
        "In a cluster of groups, each group must hold whole pipeline stages: every group's GPU count must be \
         a multiple of tp × dp × cp.";
    P0316 Error "experts not divisible by ep"
        "Expert parallelism places experts / ep experts on each rank.";
    P0317 Error "ZeRO-3 with pipeline parallelism"
        "ZeRO-3 shards the parameters too, so every pass of every micro-batch would gather its chunk's \
         parameters first; DeepSpeed's pipeline engine refuses it and Megatron-LM has no such mode. Use \
         zero = 1 (the distributed optimizer) or zero = 2 (gradients sharded too, reduce-scattered after \
         every micro-batch's backward, as FSDP with pipelines does) with pipeline parallelism, or pp = 1.";
    P0318 Error "offload needs ZeRO"
        "`offload = optimizer` needs zero ≥ 1 and `offload = params` needs zero = 3, as in DeepSpeed.";
    P0319 Error "top_k larger than experts"
        "Each token is routed to top_k distinct experts.";
    P0320 Warning "precision falls back"
        "fp32 training runs on the device's fp32 (or tf32) units, far below its tensor-core peak.";
    P0321 Error "uneven stages without a pipeline"
        "`first_stage_layers` and `last_stage_layers` set the layers of the first and last pipeline \
         stages; with pp = 1 there is one stage holding every layer. Remove them or raise pp.";
    P0322 Error "uneven stages do not add up"
        "With `first_stage_layers` and/or `last_stage_layers`, the other stages share the remaining \
         layers evenly, at least one each, as Megatron-LM splits them: layers − first − last must be a \
         positive multiple of the number of those stages (pp − 2 when both are set). With pp = 2 and \
         both set, first + last must equal `layers`. An end left unset counts as one of the others.";
    P0323 Error "uneven stages do not split into chunks"
        "With the interleaved schedule each stage holds vpp model chunks. The end stages set by \
         `first_stage_layers`/`last_stage_layers` split their layers into chunks as evenly as they can, \
         lighter chunks outermost (Megatron-LM's `--pipeline-model-parallel-layout`, as Llama 3 405B \
         was trained); the other stages' share must split into vpp equal chunks, as Megatron-LM \
         requires of them. Choose vpp dividing that share, or change the ends.";
    P0324 Warning "pipeline overlap without interleaving"
        "`overlap_p2p = true` asks for pipeline sends and receives overlapped with the passes, which \
         Megatron-LM does only in its interleaved schedule (it turns the option off otherwise). The \
         plan is priced with the transfers on the critical path.";
    P0325 Warning "no fused attention on this device"
        "Fused (flash) attention kernels need an Ampere or newer GPU (compute capability 8.0): \
         FlashAttention and cuDNN's fused attention do not run on V100 or T4. A plan that asks for \
         `attention = flash` there is priced, and launched, with standard attention, which stores the \
         s×s scores (more memory, more time). Write `attention = standard`, or use newer GPUs.";
    P0326 Warning "pipeline scatter-gather without effect"
        "`scatter_gather_p2p = true` splits a pipeline transfer over the tensor-parallel ranks and \
         all-gathers it on arrival. There is nothing to split with one pipeline stage or one \
         tensor-parallel rank, and under sequence parallelism each rank already holds and sends \
         1/tp of the tokens. The plan is priced as if the attribute were absent.";
    P0327 Warning "no fused attention on the eager path"
        "Megatron-LM's unfused path (`job.kernels = eager`: `--transformer-impl local`, a site \
         without Transformer Engine) has no fused attention: its core attention \
         (`DotProductAttention`) stores the s×s scores and runs the scale, mask and softmax as \
         PyTorch kernels of their own. A plan that asks for `attention = flash` there is priced \
         as standard attention (more memory, more time). Write `attention = standard`, or \
         `kernels = fused` where Transformer Engine is installed.";
    P0330 Warning "planc cannot emit this layout for the framework"
        "The plan's `job.framework` cannot run this part of the layout as planc writes its launch: \
         DeepSpeed's config has no pipeline, context or expert parallelism (the model code would \
         have to provide them, as Megatron-DeepSpeed's does, and the training script planc \
         generates splits data only), Megatron-LM has no ZB-H1 schedule, no parameter offload \
         and (as planc emits it) no FSDP with pipeline stages, torchtitan has no ZeRO-1, and \
         `planc run` (framework planc) runs no context or expert parallelism, no ZeRO-2/3, no \
         offload and no zero-bubble schedule. The plan is priced as written (a published run \
         may have had such model code), but `planc emit` refuses the layout (P0706; `planc \
         run`: P0901), and `planc solve` searches only layouts the framework runs. \
         Change the attribute, or the framework, to emit it.";
    P0331 Warning "the framework does not run this model or training method"
        "The plan's `job.framework` has no code for part of the model or of the training method \
         it describes: `planc run` (framework planc) trains heads of hidden / heads (no \
         `head_dim` of their own), full training only and no dropout; torchtitan's Llama 3 has no \
         `head_dim` of its own either; no launch planc writes carries a fine-tuning method (`method = lora` or \
         `frozen`): Megatron-LM, torchtitan and the script planc generates train every weight, \
         and a job's own script takes the method in flags of its own (LLaMA-Factory's \
         `--finetuning_type`), which planc does not write. No layout changes that, so `planc solve` does not search \
         around it; the plan is priced as written, and `planc emit` and `planc run` refuse it \
         (P0706, P0901). Use a framework that runs it, or change the attribute.";
    P0332 Warning "planc's runtime has one kernel path"
        "`job.kernels = eager` describes a framework's unfused PyTorch path; `planc run` \
         (framework planc) always runs its own kernels, so the attribute has no effect there and \
         the plan is priced with planc's kernels. Remove it, or name the framework that runs \
         the eager path.";
    P0333 Warning "the stated attention kernel does not run"
        "`job.attention_kernel` names whose fused attention the job's code runs, and the step is \
         priced with it. It prices nothing under framework planc (its runtime runs its own \
         attention) or where no fused attention runs (`attention = standard`, or flash priced as \
         standard); and `triton` does not describe the code planc launches when the job names no \
         `entrypoint` of its own (Megatron-LM runs Transformer Engine's or its own attention, the \
         `train.py` planc writes and torchtitan run PyTorch's SDPA). The plan is priced as \
         written; remove the attribute, or name the script that runs the kernel.";
    P0401 Error "out of memory"
        "The predicted peak memory of a GPU exceeds its capacity. The help line says which change \
         helps most: recompute, a smaller micro-batch, more tp/pp, a higher ZeRO stage.";
    P0402 Warning "memory inside the headroom"
        "The predicted peak memory fits the device but not with the headroom kept free \
         (`search.memory_headroom`, 10 % by default) for fragmentation, NCCL buffers and the CUDA context.";
    P0501 Note "hole resolved"
        "`dp = auto` (or another hole) was filled; the note says with what.";
    P0502 Note "holes filled by planc solve"
        "The plan has `auto` or candidate-list attributes; `check` (and `emit`) filled them with the \
         best layout `planc solve` finds, and say which. Run `planc solve` to see the alternatives.";
    P0801 Error "no layout satisfies the plan"
        "`planc solve` found no layout in the space of the plan's holes that passes every rule and fits in \
         memory. The labels show the rules that conflict (a minimal unsatisfiable core found by z3), and \
         the help lines the smallest changes that make a layout valid.";
    P0802 Error "search space too large"
        "The plan's holes (`auto`, candidate lists) span more layouts than `planc solve` searches \
         (2,000,000; real plans have thousands). The error points at the attribute with the most \
         candidates: list fewer, or write some of the attributes.";
    P0601 Error "the schedule would hang"
        "Simulating the step found ranks that would wait for each other forever: a send without its \
         receive, collectives issued in different orders, or passes that wait on each other in a cycle. \
         With NCCL this is a hang until the watchdog timeout, not an error.";
    P0602 Note "too large to simulate"
        "The step would have millions of tasks (pipeline stages × micro-batches, each a forward, \
         a backward and their messages): more than planc simulates event by event. The step time \
         reported is the closed form, usually within a few percent of the simulation. A plan that \
         large is often a typo in `global_batch` or `micro_batch`.";
    P0701 Warning "unknown environment variable"
        "A `job.env` variable that NCCL and PyTorch do not read (NCCL_TIMEOUT, say: the NCCL timeout is \
         set in `init_process_group(timeout=...)`). It has no effect; the help names the closest real one. \
         planc's table of variables is `compiler/catalog/env.toml`.";
    P0702 Warning "removed environment variable"
        "A `job.env` variable that NCCL or PyTorch once read and no longer does; the help says what \
         replaced it, if anything.";
    P0703 Warning "renamed environment variable"
        "A `job.env` variable under its old name: PyTorch moved its NCCL settings to `TORCH_NCCL_*` \
         (NCCL_ASYNC_ERROR_HANDLING is now TORCH_NCCL_ASYNC_ERROR_HANDLING). The old name may stop \
         working in a later release; use the new one.";
    P0704 Warning "invalid environment variable value"
        "The variable takes one of a fixed set of values (NCCL_DEBUG, NCCL_P2P_LEVEL, NCCL_PROTO, ...) \
         or a number, and this value is not one of them; NCCL ignores it or falls back to its default.";
    P0705 Error "emit refuses a plan with errors"
        "`planc emit` writes launch artifacts only for a plan that `planc check` accepts: fix the \
         errors it reports first.";
    P0706 Error "the target cannot express the plan"
        "The launcher or framework of `--target` has no way to run part of the layout (a ZB-H1 \
         schedule under Megatron-LM, pipeline parallelism in a DeepSpeed config, node groups with \
         different GPU counts under torchrun, ZeRO-1 or dropout under torchtitan, model parallelism in \
         the training script planc generates), or the plan's `job.framework = planc` under a target \
         that would start something else than `planc run` (megatron, deepspeed, torchrun: use \
         slurm or k8s). Change the plan or choose another target.";
    P0707 Error "the target needs a job attribute"
        "The target cannot be written without an attribute of the `job` block, such as `image` for \
         a Kubernetes PyTorchJob.";
    P0708 Error "template error"
        "A template of `planc emit` (the embedded one or a copy given with `--templates`) failed to \
         parse or render; the message says where.";
    P0709 Error "cannot read templates"
        "The `--templates` folder, or a template file in it, could not be read.";
    P0710 Error "artifact exists"
        "`planc emit` never overwrites a file unless given `--force`. It checks every file before \
         writing any, so nothing was written.";
    P0711 Error "cannot write artifact"
        "Writing an artifact (a temporary file in the output folder, then renamed) failed.";
    P0712 Error "unknown target"
        "`--target` takes megatron, deepspeed, torchrun, torchtitan, slurm or k8s.";
    P0713 Error "command substitution in an environment value"
        "A `job.env` value contains `$(...)`, a backquote, or `${...}` with more than a variable \
         name in it. planc writes each value in every target's own syntax (a shell export, the \
         kubelet's `$(NAME)`, DeepSpeed's `.deepspeed_env`) with `$NAME` and `${NAME}` taken \
         from the node's environment and everything else literal; a command cannot be carried \
         into all of them, and would run on every node at every start. Compute the value \
         beforehand and write it, or refer to a variable the node sets.";
    P0714 Warning "every kernel launch blocks"
        "`job.env` sets `CUDA_LAUNCH_BLOCKING`: every CUDA kernel launch then returns only once \
         its kernel has finished. It is a debugging setting (an asynchronous kernel's error then \
         points at the launch that caused it): the host can no longer run ahead of the GPU, so \
         each kernel waits for the host's dispatch of the next operation (30 us a product, \
         8-16 us another kernel, measured on an H200 host), and collectives no longer overlap \
         compute. planc prices the step that way; where kernels are short the step slows most (a \
         chain of small ops: 10.4 us an op without it, 19.6 with it). Remove it once the failure it was set to find is found.";
    P0901 Error "`planc run` does not run this part of the plan yet"
        "`planc run` trains tensor parallelism (with or without sequence parallelism), pipeline \
         parallelism with the gpipe, 1f1b and interleaved schedules (uneven end stages \
         included) and data parallelism with zero 0 or 1, without dropout. A plan that asks for \
         context or expert parallelism, zero 2 or 3, a zero-bubble schedule or dropout is \
         refused before any rank starts, never run as something else: the message names the \
         attribute to change. `planc check`, `simulate` and `emit` take such plans.";
}

/// The code with this id (case-insensitive), for `planc explain`.
pub fn lookup(id: &str) -> Option<Code> {
    ALL.iter().copied().find(|c| c.id.eq_ignore_ascii_case(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for c in ALL {
            assert!(seen.insert(c.id), "duplicate code {}", c.id);
            assert!(c.id.len() == 5 && c.id.starts_with('P'), "bad id {}", c.id);
            assert!(!c.explanation.is_empty());
        }
        assert_eq!(lookup("p0301").unwrap().id, "P0301");
    }

    #[test]
    fn limits_in_explanations_are_the_limits_in_code() {
        let limit = crate::parser::MAX_NESTING.to_string();
        assert!(P0008.explanation.contains(&format!("{limit} levels")));
        let syntax = format!("{} syntax errors", crate::parser::MAX_SYNTAX_ERRORS);
        assert!(P0009.explanation.contains(&syntax));
        let others = format!("{} others", crate::diagnostic::MAX_DIAGNOSTICS);
        assert!(P0009.explanation.contains(&others));
    }
}
