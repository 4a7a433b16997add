//! The cluster of an imported plan. Formats hold pieces of it (a hostfile's nodes and slots,
//! `torchrun --nnodes`, `#SBATCH --gres=gpu:8`, `mpirun -np`); none holds the GPU or the
//! network. The command line's `--cluster PLAN` (its `cluster` block as written) or
//! `--nodes`, `--gpus-per-node` and `--gpu` say what the inputs do not; what is still
//! missing is assumed, and the plan's header says so.

use planc_compiler::catalog::Catalog;

use super::draft::{Origin, V};
use super::launch::{slurm_time, Means, Said};
use super::{Ctx, ImportError, Options};

/// What an input says about the cluster's shape. A higher `rank` is the more direct
/// statement (a hostfile over a launcher, the launcher nearest the program over an outer
/// one).
#[derive(Clone, Debug)]
pub struct Hint {
    pub what: Means,
    pub value: u64,
    pub rank: u8,
    pub from: Origin,
}

/// The GPU assumed when nothing names one.
pub const DEFAULT_GPU: &str = "H100_SXM_80GB";

/// A launcher's options: cluster hints, the Slurm job, exported variables; the rest listed.
pub fn said(cx: &mut Ctx, said: &[Said], file: &str) {
    let n = said.len();
    for (i, s) in said.iter().enumerate() {
        let from = Origin::new(file, Some(s.line), format!("{} {}", s.launcher, s.key));
        let v = s.value.clone().unwrap_or_default();
        let num = super::flags::int(&v);
        // Later launchers are nearer the program.
        let rank = 2 + (i * 2 / n.max(1)) as u8;
        let mut hint = |what, value: Option<u64>, rank| match value {
            Some(value) => cx.pending.hints.push(Hint {
                what,
                value,
                rank,
                from: from.clone(),
            }),
            None => cx.draft.unplaced(
                from.clone(),
                s.value.clone(),
                "not a number planc can read (set by the site when the job runs?)",
            ),
        };
        match s.means {
            Means::Nodes => hint(Means::Nodes, elastic_max(&v), rank),
            Means::GpusPerNode => hint(Means::GpusPerNode, num, rank + 1),
            Means::TasksPerNode => hint(Means::TasksPerNode, num, 1),
            Means::World => hint(Means::World, num, rank),
            Means::Gres => hint(Means::GpusPerNode, v.rsplit(':').next().and_then(super::flags::int), rank),
            Means::MapBy => match v.strip_prefix("ppr:").and_then(|r| r.split(':').next()) {
                Some(k) => hint(Means::GpusPerNode, super::flags::int(k), rank),
                None => cx.draft.unplaced(from, s.value.clone(), "process placement, not the cluster's shape"),
            },
            Means::Hosts => {
                let hosts: Vec<&str> = v.split(',').collect();
                hint(Means::Nodes, Some(hosts.len() as u64), rank + 1);
                if let Some(k) = hosts[0].split_once(':').and_then(|(_, k)| super::flags::int(k)) {
                    hint(Means::GpusPerNode, Some(k), rank + 1);
                }
            }
            Means::Env => env(cx, &v, from),
            Means::Hostfile => {
                cx.pending.hostfiles.push((v, from));
            }
            Means::Partition => cx.draft.set("job", "partition", V::Str(v), from),
            Means::JobName => cx.draft.set("job", "name", V::Str(v), from),
            Means::Time => match slurm_time(&v) {
                Some(t) => cx.draft.set("job", "time_limit", V::Raw(t), from),
                None => cx.draft.unplaced(from, s.value.clone(), "not a Slurm time"),
            },
            Means::Site => cx.draft.unplaced(from, s.value.clone(), "a launcher setting (rendezvous, placement, site): planc's emitted launch writes its own"),
        }
        if s.launcher == "#SBATCH" || s.launcher == "srun" {
            cx.pending.slurm = Some(Origin::new(file, Some(s.line), s.launcher));
        }
    }
}

/// `--nnodes 2` or an elastic range `1:4` (its largest size).
fn elastic_max(v: &str) -> Option<u64> {
    super::flags::int(v.rsplit(':').next().unwrap_or(v))
}

/// An exported variable (`-x NAME=value`, `export NAME=value`) into `job.env` when it is one
/// the plan carries; listed otherwise.
pub fn env(cx: &mut Ctx, assignment: &str, from: Origin) {
    let (name, value) = match assignment.split_once('=') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (assignment.to_string(), None),
    };
    match value {
        Some(v) => place_env(cx, &name, &v, false, from),
        // `-x NAME`: exported as the script set it, placed from the script's assignment.
        None => cx.pending.exported.push(name),
    }
}

/// Variables the plan's `job.env` carries: NCCL's, CUDA's and PyTorch's.
pub fn carried(name: &str) -> bool {
    [
        "NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "NVTE_", "UCX_", "NVSHMEM_", "CUBLAS_", "CUDNN_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

pub fn place_env(cx: &mut Ctx, name: &str, value: &str, unresolved: bool, from: Origin) {
    if !carried(name) {
        cx.draft.unplaced(from, Some(format!("{name}={value}")), "a variable of the site or the launcher, not NCCL's, CUDA's or PyTorch's: the plan's job.env carries those");
        return;
    }
    if unresolved
        || value.contains("$(")
        || value.contains('`')
        || value.contains("${") && value.contains(":-")
    {
        cx.draft.unplaced(from, Some(format!("{name}={value}")), "its value is only known when the script runs; job.env takes literal values and $NAME references");
        return;
    }
    let from = Origin {
        key: name.to_string(),
        ..from
    };
    cx.draft
        .set("job.env", name, V::Str(value.to_string()), from);
}

/// Builds the cluster: `--cluster`'s block, or the flags and the inputs' hints.
pub fn assemble(cx: &mut Ctx, opts: &Options) -> Result<(), ImportError> {
    if let Some((name, text)) = &opts.cluster {
        from_plan(cx, name, text)?;
        list_hints(cx);
        return Ok(());
    }
    let flag = |k: &str| Origin::new("command line", None, k.to_string());
    let pick = |cx: &Ctx, what: Means| best(cx, what);
    let world = pick(cx, Means::World);
    let mut gpn = opts
        .gpus_per_node
        .map(|n| (n, flag("--gpus-per-node")))
        .or_else(|| pick(cx, Means::GpusPerNode));
    let mut nodes = opts
        .nodes
        .map(|n| (n, flag("--nodes")))
        .or_else(|| pick(cx, Means::Nodes));
    if gpn.is_none() {
        gpn = pick(cx, Means::TasksPerNode);
    }
    if let (None, Some((w, o)), Some((g, _))) = (&nodes, &world, &gpn) {
        if *g > 0 && w % g == 0 {
            nodes = Some((w / g, o.clone()));
        }
    }
    if let (Some((w, o)), None) = (&world, &gpn) {
        let n = nodes.as_ref().map_or(1, |n| n.0.max(1));
        if w % n == 0 {
            gpn = Some((w / n, o.clone()));
        }
    }
    let d = &mut cx.draft;
    match nodes {
        Some((n, o)) => d.set("cluster", "nodes", V::Int(n), o),
        None => d.assume(
            "cluster",
            "nodes",
            V::Int(1),
            flag("assumed"),
            "no input says how many nodes; pass --nodes or --cluster",
        ),
    }
    match gpn {
        Some((n, o)) => d.set("cluster", "gpus_per_node", V::Int(n), o),
        None => d.assume(
            "cluster",
            "gpus_per_node",
            V::Int(8),
            flag("assumed"),
            "no input says how many GPUs a node has; pass --gpus-per-node or --cluster",
        ),
    }
    match &opts.gpu {
        Some(g) => {
            if Catalog::builtin().gpu(g).is_none() {
                d.note(format!("cluster.gpu = {g}: not a GPU of planc's catalog (the check below says which are)"));
            }
            d.set("cluster", "gpu", V::Ident(g.clone()), flag("--gpu"));
        }
        None => d.assume(
            "cluster",
            "gpu",
            V::Ident(DEFAULT_GPU.into()),
            flag("assumed"),
            "no input names the GPU; pass --gpu or --cluster",
        ),
    }
    cx.pending.world = Some(
        d.u64("cluster", "nodes").unwrap_or(1) * d.u64("cluster", "gpus_per_node").unwrap_or(1),
    );
    if d.u64("cluster", "nodes").unwrap_or(1) > 1 {
        let nics = d.u64("cluster", "gpus_per_node").unwrap_or(8);
        let o = flag("assumed");
        d.note(format!("cluster.inter_node: no input describes the network; assumed InfiniBand, {nics} NICs a node of 400 Gb/s (pass --cluster with your network)"));
        d.set(
            "cluster.inter_node",
            "kind",
            V::Ident("infiniband".into()),
            o.clone(),
        );
        d.set(
            "cluster.inter_node",
            "nics_per_node",
            V::Int(nics),
            o.clone(),
        );
        d.set(
            "cluster.inter_node",
            "bandwidth",
            V::Raw("400 Gb/s".into()),
            o.clone(),
        );
        d.set("cluster.inter_node", "latency", V::Raw("5 us".into()), o);
    }
    list_hints(cx);
    Ok(())
}

/// The hint of the highest rank for `what`.
fn best(cx: &Ctx, what: Means) -> Option<(u64, Origin)> {
    let top = cx
        .pending
        .hints
        .iter()
        .filter(|h| h.what == what)
        .max_by_key(|h| h.rank)?;
    Some((top.value, top.from.clone()))
}

/// Every hint that did not become a cluster attribute, listed with what the plan has.
fn list_hints(cx: &mut Ctx) {
    let hints = std::mem::take(&mut cx.pending.hints);
    for h in hints {
        let attr = match h.what {
            Means::Nodes => "nodes",
            Means::World => "the world size",
            _ => "gpus_per_node",
        };
        let used = ["nodes", "gpus_per_node"]
            .iter()
            .any(|a| cx.draft.origin("cluster", a) == Some(&h.from));
        if used {
            continue;
        }
        let why = match (&cx.draft.cluster_text, attr) {
            (Some(_), _) => "the cluster is --cluster's block, as written".to_string(),
            (None, "the world size") => format!(
                "the world size: the plan's is nodes × gpus_per_node = {}",
                cx.pending.world.unwrap_or(0)
            ),
            (None, a) => format!(
                "cluster.{a} is {} from {}",
                cx.draft
                    .get("cluster", a)
                    .map(|v| v.text())
                    .unwrap_or_default(),
                cx.draft
                    .origin("cluster", a)
                    .map(|o| o.to_string())
                    .unwrap_or_default()
            ),
        };
        cx.draft.unplaced(h.from, Some(h.value.to_string()), why);
    }
}

/// `--cluster PLAN`: its `cluster` block and `gpu` blocks, as written.
fn from_plan(cx: &mut Ctx, name: &str, text: &str) -> Result<(), ImportError> {
    let parsed = planc_lang::parse(text, planc_lang::FileId(0));
    if parsed.diagnostics.iter().any(|d| d.is_error()) {
        return Err(ImportError::Cluster(format!(
            "{name} has syntax errors (planc check {name})"
        )));
    }
    let mut blocks = Vec::new();
    let mut cluster = None;
    for item in &parsed.file.items {
        if let planc_lang::syntax::Item::Block(b) = item {
            match b.kind.text.as_str() {
                "gpu" => blocks.push(text[b.span.start as usize..b.span.end as usize].to_string()),
                "cluster" => cluster = Some(b),
                _ => {}
            }
        }
    }
    let Some(c) = cluster else {
        return Err(ImportError::Cluster(format!("{name} has no cluster block")));
    };
    blocks.push(text[c.span.start as usize..c.span.end as usize].to_string());
    // What the inputs said of the cluster's shape, against the block's.
    let number = |b: &planc_lang::syntax::Block, attr: &str| {
        b.attrs()
            .find(|a| a.name.text == attr)
            .and_then(|a| match a.value.kind {
                planc_lang::syntax::ExprKind::Number(x) => Some(x as u64),
                _ => None,
            })
    };
    for (attr, what) in [
        ("nodes", Means::Nodes),
        ("gpus_per_node", Means::GpusPerNode),
    ] {
        if let (Some(w), Some((v, o))) = (number(c, attr), best(cx, what)) {
            if w != v {
                cx.draft.note(format!(
                    "cluster.{attr}: {o} says {v}; {name} has {w}, kept"
                ));
            }
        }
    }
    let groups: Vec<u64> = c
        .blocks()
        .filter(|g| g.kind.text == "group")
        .map(|g| number(g, "nodes").unwrap_or(0) * number(g, "gpus_per_node").unwrap_or(0))
        .collect();
    cx.pending.world = if groups.is_empty() {
        number(c, "nodes")
            .zip(number(c, "gpus_per_node"))
            .map(|(n, g)| n * g)
    } else {
        Some(groups.iter().sum())
    };
    if c.attrs().any(|a| a.name.text == "profile") {
        cx.draft.note(format!(
            "cluster.profile is relative to {name}; the imported plan names it as written there"
        ));
    }
    cx.draft
        .note(format!("cluster: {name}'s cluster block, as written"));
    cx.draft.cluster_text = Some(blocks.join("\n\n"));
    Ok(())
}
