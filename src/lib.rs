//! The `planc` command line, as a library: the binary (`src/bin/planc.rs`) and the Python
//! module's console script (`python/`) run the same `main_with_args`, so both accept the same
//! commands; [`api`] offers the commands as calls that return JSON.

pub mod api;
mod calibrate;
mod diff;
mod emit;
mod fmt;
mod gpus;
mod import;
mod launch;
mod load;
mod lsp;
mod output;
mod render;
mod report;
mod run;
mod simulate;
mod solve;
mod train;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};

/// planc: check, cost and compile parallel training plans.
///
/// A `.tp` file describes the cluster, the model, the training settings and the parallel
/// layout of one training job. planc tells you, before any GPU is allocated, whether the
/// plan is valid, how much memory each GPU needs, and how long a step takes.
#[derive(Parser)]
#[command(
    name = "planc",
    version,
    propagate_version = true,
    after_help = "Start with an example:\n  planc check examples/gpt3-175b.tp\n  planc check examples/oom-llama3-70b-8xa100.tp   (a plan that does not fit)\n  planc explain P0401\n\nThe guide: docs/guide/README.md (a first plan: README.md). The language: docs/language.md.\nDiagnostics carry codes; `planc explain` lists them."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a plan and predict its memory, step time and throughput.
    ///
    /// Exit status: 0 when the plan is valid (warnings allowed), 1 when it has errors,
    /// 2 when the command was misused (missing file, unknown flag).
    ///
    /// Examples:
    ///   planc check examples/gpt3-175b.tp
    ///   planc check plan.tp --format json | jq .time.step_s
    #[command(verbatim_doc_comment)]
    Check {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// `human`: summary and diagnostics with source snippets; `json`: the report
        /// contract of docs/spec/report.md on standard output.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// When to colour human output.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Simulate one training step event by event and draw its timeline.
    ///
    /// Every pass, pipeline send and gradient reduction of the plan runs on a model of the
    /// cluster's compute streams and links; the output says where the step's time goes and
    /// which rank is the busiest. Files are never overwritten unless --force is given.
    ///
    /// Examples:
    ///   planc simulate examples/gpt3-175b.tp --svg gpt3.svg      (open it in a browser)
    ///   planc simulate plan.tp --trace step.json                (ui.perfetto.dev)
    #[command(verbatim_doc_comment)]
    Simulate {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// Write a Chrome/Perfetto trace (JSON) of the step here.
        #[arg(long, value_name = "PATH")]
        trace: Option<PathBuf>,
        /// Write the pipeline timeline as SVG here.
        #[arg(long, value_name = "PATH")]
        svg: Option<PathBuf>,
        /// Replace existing output files.
        #[arg(long)]
        force: bool,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Write one self-contained HTML page of the plan, to show people who will not read a
    /// terminal.
    ///
    /// The page holds the summary numbers (step time, tokens/s, MFU, compute, exposed
    /// communication, bubble), the simulated timeline per pipeline stage (zoomable; a step
    /// of many micro-batches has its repeating steady state folded into one labelled band),
    /// memory per stage as stacked bars against the GPU's capacity, the solver's candidates
    /// and Pareto front with the chosen layout marked (when the plan has `auto` holes), and
    /// the diagnostics with their source lines. CSS, JavaScript and SVG are inline: the
    /// file opens offline and can be sent as it is. A plan with errors still gets its page
    /// (the diagnostics), with exit status 1. Files are never overwritten unless --force.
    ///
    /// Examples:
    ///   planc report examples/gpt3-175b-batch4096.tp              (gpt3-175b-batch4096.report.html)
    ///   planc report examples/llama3-70b-solve.tp -o solve.html --force
    #[command(verbatim_doc_comment)]
    Report {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// Where to write the page (default: <plan name>.report.html in the current folder).
        #[arg(short = 'o', long = "out", value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
        /// When to colour the diagnostics printed to the terminal.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Fill the plan's holes (`auto`, candidate lists) with the best layout, and rank the rest.
    ///
    /// Every layout of the space is checked against the rules `check` applies and the
    /// device memory (with `search.memory_headroom`), the valid ones are costed, and the
    /// best few are simulated. When no layout is valid, planc names the conflicting rules
    /// (from z3's unsat core) and the smallest changes that make one valid.
    ///
    /// Examples:
    ///   planc solve examples/llama3-70b-solve.tp
    ///   planc solve plan.tp --top 10 --format json | jq .best.plan
    #[command(verbatim_doc_comment)]
    Solve {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// `human`: a ranked table, the Pareto front and the best plan; `json`: `best` (the
        /// check report of the best plan), `candidates`, `pareto` and `search`.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// How many layouts to show (default: `search.top` of the plan, else 5).
        #[arg(long)]
        top: Option<usize>,
        /// Also write the best plan's launch artifacts for this target (as `planc emit`).
        #[arg(long, value_name = "TARGET", value_parser = parse_target)]
        emit: Option<planc_targets::Target>,
        /// With --emit: the output folder (default: planc-out/<target>/).
        #[arg(short = 'o', long = "out", value_name = "DIR", requires = "emit")]
        out: Option<PathBuf>,
        /// With --emit: replace existing files.
        #[arg(long, requires = "emit")]
        force: bool,
        /// With --emit: a folder of your own copies of the templates (by file name).
        #[arg(long, value_name = "DIR", requires = "emit")]
        templates: Option<PathBuf>,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Write the launch artifacts of a plan: Megatron-LM, DeepSpeed, torchrun, torchtitan,
    /// Slurm or Kubernetes (Kubeflow PyTorchJob).
    ///
    /// The plan is checked first and refused if it has errors; holes are filled with the
    /// best layout of `planc solve`. Every value from the plan is quoted for the shell or
    /// YAML it lands in. Files are written atomically, never over existing ones unless
    /// --force is given.
    ///
    /// Examples:
    ///   planc emit examples/llama3-70b-64xh100.tp --target slurm
    ///   planc emit plan.tp --target megatron -o launch/ --force
    #[command(verbatim_doc_comment)]
    Emit {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// megatron, deepspeed, torchrun, torchtitan, slurm or k8s.
        #[arg(long, short = 't', value_parser = parse_target)]
        target: planc_targets::Target,
        /// Output folder (default: planc-out/<target>/).
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
        /// A folder of your own copies of the templates (by file name) to use instead.
        #[arg(long, value_name = "DIR")]
        templates: Option<PathBuf>,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Bring a job in: its launch script and configs as a plan.
    ///
    /// Reads a Megatron-LM launch script or command line (pretrain_gpt.py flags through
    /// torchrun, python -m torch.distributed.run, srun, deepspeed or mpirun; variables,
    /// `${VAR:-default}`, arrays and exported NCCL_/CUDA_ variables), a DeepSpeed JSON and
    /// its hostfile, a torchtitan job TOML and its launch's --section.option flags, a
    /// LLaMA-Factory YAML (and the DeepSpeed JSON it names), a NeMo 1.0 or Megatron Bridge
    /// YAML config (Megatron-Core's fields under `model`), a Hugging Face config.json (the
    /// model block), or several of them for one job. The plan says where each value came
    /// from, and lists at its top every flag or key it could not place and everything it
    /// assumed. What the files do not hold (the GPU, the network) comes from --cluster or
    /// --nodes/--gpus-per-node/--gpu, else is assumed and said. The plan is checked; one that
    /// does not check is written all the same, with its diagnostics. -o never replaces a file
    /// without --force.
    ///
    /// Exit status: 0 the plan checks, 1 written but it has errors, 2 misuse or an input
    /// planc cannot read.
    ///
    /// Examples:
    ///   planc import train_llama.sh --cluster examples/llama3-70b-64xh100.tp -o llama.tp
    ///   planc import ds_config.json hostfile config.json --gpu A100_SXM_80GB
    ///   planc import llama3_8b.toml --nodes 2 --gpus-per-node 8
    ///   planc import sft.yaml config.json --format json | jq .unplaced
    ///   planc import conf/training/llama/llama3_70b.yaml --gpu H100_SXM_80GB
    ///   echo 'torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 ...' | planc import -
    #[command(verbatim_doc_comment)]
    Import {
        /// The job's files (`-` reads a script from standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the plan here (default: standard output).
        #[arg(short = 'o', long = "out", value_name = "PLAN")]
        out: Option<PathBuf>,
        /// Take the cluster (and its gpu blocks) from this plan, as written.
        #[arg(long, value_name = "PLAN", conflicts_with_all = ["nodes", "gpus_per_node", "gpu"])]
        cluster: Option<PathBuf>,
        /// Nodes of the cluster, when the inputs do not say.
        #[arg(long, value_name = "N")]
        nodes: Option<u64>,
        /// GPUs in each node, when the inputs do not say.
        #[arg(long, value_name = "N")]
        gpus_per_node: Option<u64>,
        /// The GPU, a catalog name (H100_SXM_80GB, A100_SXM_80GB, ...); default H100_SXM_80GB.
        #[arg(long, value_name = "NAME")]
        gpu: Option<String>,
        /// Replace an existing -o file.
        #[arg(long)]
        force: bool,
        /// `human`: the plan (without -o) and a summary on standard error; `json`: the plan,
        /// the placed and unplaced values, the assumptions and the check's diagnostics.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Compare two plans side by side: layout, memory per stage, the step's split,
    /// throughput, MFU, the time to train, and the launch settings that differ.
    ///
    /// Each plan is checked as `planc check` checks it (the step simulated). B is a second
    /// file, or, when only A is given, A with the --set settings over it (--set always
    /// applies to B). The table gives B's change against A: relative for quantities,
    /// percentage points for MFU. The launch settings are those of --target (default: the
    /// target of A's job.framework), flag by flag.
    ///
    /// Exit status: 0 when both plans check, 1 when either has errors (what is known is
    /// still shown), 2 misuse.
    ///
    /// Examples:
    ///   planc diff examples/llama3-70b-64xh100.tp examples/llama3-70b-64xh100-tp4.tp
    ///   planc diff plan.tp --set parallel.tp=4 --set parallel.pp=8
    ///   planc diff a.tp b.tp --format json | jq '.rows[] | select(.name == "step")'
    #[command(verbatim_doc_comment)]
    Diff {
        /// The first plan (`.tp`).
        a: PathBuf,
        /// The second plan; default: A with the --set settings.
        b: Option<PathBuf>,
        #[command(flatten)]
        sets: load::Sets,
        /// Whose launch settings to compare: megatron, deepspeed, torchrun, torchtitan,
        /// slurm or k8s (default: A's job.framework's).
        #[arg(long, short = 't', value_parser = parse_target)]
        target: Option<planc_targets::Target>,
        /// `human`: one aligned table; `json`: both reports, the rows and the settings.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Rewrite plan files in the one layout (or check that they are).
    ///
    /// Four-space indentation, one entry per line, one blank line between blocks; numbers,
    /// units, strings and comments stay as written. One-line blocks that fit stay on one
    /// line. Files with syntax errors are left alone. With no file (or `-`), formats
    /// standard input to standard output.
    ///
    /// Exit status: 0 formatted (or already formatted), 1 a file has syntax errors or, with
    /// --check, would change; 2 misuse.
    ///
    /// Examples:
    ///   planc fmt plan.tp
    ///   planc fmt --check examples/*.tp
    ///   planc fmt < plan.tp
    #[command(verbatim_doc_comment)]
    Fmt {
        /// The plan files; none or `-` for standard input.
        files: Vec<PathBuf>,
        /// Change nothing: list the files that would change and exit 1 if any would.
        #[arg(long)]
        check: bool,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Train the plan's model on the local GPUs (and nodes), laid out as the plan says, and
    /// compare the run with the prediction.
    ///
    /// The model of the `model` block (GPT or Llama family) trains natively through CUDA,
    /// cuBLAS, NCCL and kernels compiled at start with NVRTC: forward, backward, loss,
    /// AdamW/SGD, gradient accumulation over micro-batches, recompute, in fp32, bf16 or
    /// fp16, on the data of `train.data` (a token file) or the synthetic corpus. The step
    /// executes the same per-rank program `planc simulate` prices. Each step prints a line
    /// (loss, tokens/s, MFU, memory); at the end the measured step time and peak memory
    /// stand next to planc's prediction for this plan on this GPU, and the last step by
    /// kind of work (linear layers, attention, norms, communication, pipeline wait, ...)
    /// next to the prediction from the device profile and from the constants.
    /// Contract: docs/spec/run.md.
    ///
    /// A plan of several GPUs starts one process per local GPU: tensor parallelism (with
    /// or without sequence_parallel), pipeline parallelism (gpipe, 1f1b, interleaved,
    /// uneven end stages) and data parallelism (zero 0 or 1) run; other layouts are
    /// refused before any rank starts (P0901). On several nodes, every node runs the same
    /// command with --nnodes, --node-rank and --master (or under Slurm or torchrun). A
    /// rank that dies stops the others with its name; a rank that waits longer than
    /// PLANC_TIMEOUT_S seconds (default 300) in a collective, a transfer or a step prints
    /// what it waits in and where its GPU is, aborts NCCL and exits 1. Checkpoints are the
    /// whole model whatever the layout: a run saved under tp 2 resumes on one GPU.
    ///
    /// A run keeps its work. A loss or gradient norm that is not finite stops it at that
    /// step with exit 1, naming the first non-finite tensor; no checkpoint of such weights
    /// is written (fp16's overflow steps are skipped, counted in the summary). SIGTERM or
    /// SIGUSR1 (Slurm's --signal, preemption, Kubernetes' pod deletion) finishes the
    /// current step on every rank, saves it with --save, and exits 75 (EX_TEMPFAIL:
    /// preempted, requeue); --resume DIR then continues after that step. The launcher
    /// forwards both signals to its ranks and exits 75 with them.
    ///
    /// Flash attention (`train.attention = flash`) in bf16 or fp16 runs cuDNN's fused
    /// attention where libcudnn 9 loads (libcudnn.so.9 on the library path, or the file in
    /// PLANC_CUDNN) and takes the shape, with its deterministic backward; elsewhere planc's
    /// own kernels, after a one-line note. PLANC_CUDNN_ATTENTION=off always runs planc's,
    /// =require makes a missing cuDNN an error, =nondeterministic takes cuDNN's atomic
    /// backward.
    ///
    /// Needs an NVIDIA GPU and the CUDA libraries (libcuda, libcublas, libnvrtc, and
    /// libnccl for several GPUs) on the library path: exit 2 without them. A plan too big
    /// for the GPU is refused with its predicted memory and the `--layers K` that fits;
    /// exit 1 for plan and run errors.
    ///
    /// Examples:
    ///   planc run examples/gpt2-124m-1gpu.tp --steps 50
    ///   planc run plan.tp --save ckpt --save-every 100 --metrics m.jsonl
    ///   planc run plan.tp --resume ckpt --steps 100
    ///   planc run examples/llama3.2-1b-2gpu-tp2.tp --steps 30 --trace run.json
    ///   planc run plan.tp --nnodes 2 --node-rank 0 --master node0:29500   # on each node
    ///   planc run examples/llama3-8b-1x8h100.tp --layers 2 --steps 5
    ///   planc run plan.tp --ops            # time one layer's operations instead
    #[command(verbatim_doc_comment)]
    Run {
        /// The plan file (`.tp`).
        file: PathBuf,
        #[command(flatten)]
        sets: load::Sets,
        /// Optimizer steps to run (default: `train.steps`, else 10).
        #[arg(long)]
        steps: Option<u64>,
        /// Save checkpoints into DIR: the initial weights, every --save-every steps, the end.
        #[arg(long, value_name = "DIR")]
        save: Option<PathBuf>,
        /// Steps between checkpoints (with --save).
        #[arg(long, value_name = "K")]
        save_every: Option<u64>,
        /// Continue from the newest complete checkpoint in DIR.
        #[arg(long, value_name = "DIR")]
        resume: Option<PathBuf>,
        /// Append one JSON object per step to FILE.
        #[arg(long, value_name = "FILE")]
        metrics: Option<PathBuf>,
        /// Write a Chrome/Perfetto trace of the real run (per-operation times from CUDA
        /// events): every operation on one row, the passes as `planc simulate --trace`
        /// draws them on another. Rank 0's goes to FILE, every other rank's beside it
        /// (run.json: run.rank1.json, …; each node writes its own ranks').
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Run K of the model's layers (every other dimension as planned): the plan is checked,
        /// predicted and traced as a K-layer model, so a model too large for the GPU whole
        /// is measured a few layers at a time.
        #[arg(long, value_name = "K")]
        layers: Option<usize>,
        /// Replace an existing --trace file.
        #[arg(long)]
        force: bool,
        /// Launch every step's kernels from the host. By default a one-GPU run records its
        /// step's passes once as a CUDA graph and replays it each step (the first step and
        /// the timed ones excepted), the same kernels in the same order with one launch.
        #[arg(long)]
        no_graphs: bool,
        /// Nodes of the run (each runs `planc run` with its --node-rank); default: Slurm's
        /// SLURM_NNODES, else 1.
        #[arg(long, value_name = "N")]
        nnodes: Option<usize>,
        /// This node's index, 0 to N−1; default: Slurm's SLURM_NODEID, else 0.
        #[arg(long, value_name = "R")]
        node_rank: Option<usize>,
        /// HOST:PORT where rank 0 (on node 0) meets the others; default on one node: a free
        /// loopback port; else MASTER_ADDR:MASTER_PORT.
        #[arg(long, value_name = "HOST:PORT")]
        master: Option<String>,
        /// Instead of training, time one layer's operations (cuBLAS products at the plan's
        /// per-GPU shapes, the norms and the attention core with the training kernels (the fused core backward too),
        /// other memory-bound kernels as copies, collectives with NCCL) next to the
        /// model's predictions.
        #[arg(long)]
        ops: bool,
        /// With --ops: timed runs per operation (the median is reported).
        #[arg(long, default_value_t = 20)]
        repeat: usize,
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// When to colour diagnostics.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
    },
    /// Measure this machine and write a device profile (TOML) for the cost model.
    ///
    /// Times, with the runtime's own code paths: matrix products over a grid of shapes
    /// (including the thin ones of tensor-parallel shards), memory-bound kernels by size,
    /// the norms and the MLP activations (GELU, SwiGLU) by width and size, the attention
    /// core (standard, and the fused kernel by head size, sequence and number of heads),
    /// and NCCL all-reduce / all-gather / reduce-scatter / send-receive by message size for
    /// each group size the machine has; on GPUs with fp8, the products in fp8 too; and how
    /// much slower products and memory-bound kernels run at the board's power limit, in
    /// steady mixes at 30-100 % of the products' burst rate (what a busy training step
    /// holds the GPU at; a plan is priced at its own step's share). The profile records the
    /// device, driver, NVRTC and NCCL versions and the date. Needs an NVIDIA GPU (exit 2 without).
    /// A plan then prices its operations from the measurement with
    /// `cluster { profile = "h200-node.toml" ... }` (relative to the plan file).
    ///
    /// Examples:
    ///   planc calibrate
    ///   planc calibrate --gpus 2 -o h200-node.toml
    #[command(verbatim_doc_comment)]
    Calibrate {
        /// Where to write the profile (default: <catalog gpu>.profile.toml).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Largest group for the collectives (default: every local GPU).
        #[arg(long, value_name = "N")]
        gpus: Option<usize>,
        /// Precision of the products and kernels.
        #[arg(long, default_value = "bf16", value_parser = ["bf16", "fp16", "fp32"])]
        precision: String,
        /// Replace an existing profile file.
        #[arg(long)]
        force: bool,
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Serve editors: a language server (LSP) on standard input and output.
    ///
    /// Diagnostics as you type (the same check as `planc check`, imports included), hover
    /// (diagnostic codes explained, the plan's prediction on a block header, what `auto`
    /// became), completion (attributes, built-in GPUs, model presets) and formatting
    /// (`planc fmt`). Point your editor's LSP client at `planc lsp` for `*.tp` files.
    #[command(verbatim_doc_comment)]
    Lsp,
    /// List the built-in GPUs, or show where each figure of one comes from.
    ///
    /// Without NAME, a line per GPU of the catalog (compiler/catalog/gpus.toml): the memory
    /// it reports, what it is sold as, its dense peaks, HBM, GPU link and NVLink domain. With
    /// a NAME (or alias), every figure of that GPU under its source (a datasheet, the device's
    /// own report, a published measurement) or under why no source gives it. A `gpu` block
    /// may start from any of them: `gpu mine { preset = H100_SXM_80GB ... }`.
    ///
    /// Examples:
    ///   planc gpus
    ///   planc gpus H800_SXM_80GB
    ///   planc gpus GB200 --format json
    #[command(verbatim_doc_comment)]
    Gpus {
        /// A built-in GPU's name or alias.
        name: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Explain a diagnostic code, e.g. `planc explain P0301`.
    Explain {
        /// The code (P0001...).
        code: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Human,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives
/// it) and returns its exit status; what it prints goes to this process's standard output
/// and error.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Check {
            file,
            sets,
            format,
            color,
        } => check(file, &sets.set, format, color),
        Command::Simulate {
            file,
            sets,
            trace,
            svg,
            force,
            color,
        } => simulate::run(
            &file,
            &sets.set,
            trace.as_deref(),
            svg.as_deref(),
            force,
            color_choice(color),
        ),
        Command::Report {
            file,
            sets,
            out,
            force,
            color,
        } => report::run(&file, &sets.set, out.as_deref(), force, color_choice(color)),
        Command::Solve {
            file,
            sets,
            format,
            top,
            emit,
            out,
            force,
            templates,
            color,
        } => {
            let args = emit.map(|target| emit::EmitArgs {
                target,
                out: out.as_deref(),
                force,
                templates: templates.as_deref(),
            });
            solve::run(
                &file,
                &sets.set,
                format == Format::Json,
                top,
                args.as_ref(),
                color_choice(color),
            )
        }
        Command::Emit {
            file,
            sets,
            target,
            out,
            force,
            templates,
            color,
        } => emit::run(
            &file,
            &sets.set,
            &emit::EmitArgs {
                target,
                out: out.as_deref(),
                force,
                templates: templates.as_deref(),
            },
            color_choice(color),
        ),
        Command::Fmt {
            files,
            check,
            color,
        } => fmt::run(&files, check, color_choice(color)),
        Command::Run {
            file,
            sets,
            ops: true,
            repeat,
            format,
            color,
            ..
        } => run::run(
            &file,
            &sets.set,
            repeat,
            format == Format::Json,
            color_choice(color),
        ),
        Command::Run {
            file,
            sets,
            steps,
            save,
            save_every,
            resume,
            metrics,
            trace,
            layers,
            force,
            no_graphs,
            nnodes,
            node_rank,
            master,
            format,
            color,
            ..
        } => train::run(
            &file,
            train::Args {
                sets: sets.set,
                steps,
                save,
                save_every,
                resume,
                metrics,
                trace,
                layers,
                json: format == Format::Json,
                force,
                no_graphs,
                nnodes,
                node_rank,
                master,
            },
            color_choice(color),
        ),
        Command::Calibrate {
            output,
            gpus,
            precision,
            force,
            format,
        } => calibrate::run(
            output,
            gpus,
            planc_compiler::plan::Precision::parse(&precision).expect("clap checked it"),
            force,
            format == Format::Json,
        ),
        Command::Import {
            files,
            out,
            cluster,
            nodes,
            gpus_per_node,
            gpu,
            force,
            format,
        } => import::run(import::Args {
            files,
            out,
            cluster,
            nodes,
            gpus_per_node,
            gpu,
            force,
            json: format == Format::Json,
        }),
        Command::Diff {
            a,
            b,
            sets,
            target,
            format,
            color,
        } => diff::run(&diff::Args {
            a: &a,
            b: b.as_deref(),
            sets: &sets.set,
            target,
            json: format == Format::Json,
            color: color_choice(color),
        }),
        Command::Lsp => lsp::run(),
        Command::Gpus { name, format } => gpus::run(name.as_deref(), format),
        Command::Explain { code } => explain(code),
    }
}

fn check(file: PathBuf, sets: &[String], format: Format, color: Color) -> ExitCode {
    let checked = match load::checked_with(&file, sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ok = checked.ok();
    match format {
        Format::Json => {
            let report = checked.report();
            let text = serde_json::to_string_pretty(&report).expect("the report serialises");
            println!("{text}");
        }
        Format::Human => {
            let mut err = StandardStream::stderr(color_choice(color));
            let _ = render::diagnostics(&mut err, &checked);
            if let Some(s) = render::summary(&checked) {
                let _ = std::io::stdout().write_all(s.as_bytes());
            }
            let errors = checked.diagnostics.iter().filter(|d| d.is_error()).count();
            if errors > 0 {
                eprintln!(
                    "{} has {errors} error{}",
                    file.display(),
                    if errors == 1 { "" } else { "s" }
                );
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Refused before the plan is read, with the list of targets, as clap refuses any bad value.
fn parse_target(s: &str) -> Result<planc_targets::Target, String> {
    s.parse()
        .map_err(|e: planc_targets::EmitError| format!("{e} [{}]", e.code().id))
}

fn color_choice(color: Color) -> ColorChoice {
    match color {
        Color::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => ColorChoice::Auto,
        Color::Auto | Color::Never => ColorChoice::Never,
        Color::Always => ColorChoice::Always,
    }
}

fn explain(code: Option<String>) -> ExitCode {
    match code {
        None => {
            for c in planc_lang::codes::ALL {
                println!("{}  {:<7}  {}", c.id, c.severity.as_str(), c.title);
            }
            ExitCode::SUCCESS
        }
        Some(id) => match planc_lang::codes::lookup(&id) {
            Some(c) => {
                println!(
                    "{} ({}): {}\n\n{}",
                    c.id,
                    c.severity.as_str(),
                    c.title,
                    c.explanation
                );
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("error: no diagnostic code `{id}`; `planc explain` lists them");
                ExitCode::from(2)
            }
        },
    }
}
