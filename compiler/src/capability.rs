//! What each framework can run, as layouts: the one statement of the limits that `planc
//! emit` enforces per target (P0706), which `validate` warns of (P0330: a published run may
//! have had model code that did more, so the plan is still priced) and `solve`'s rule
//! `FrameworkRuns` ask too, so that a plan whose `job.framework` is set is only ever given a
//! layout its framework runs.
//!
//! Only an explicit `job.framework` constrains: without a `job` block the plan is priced
//! as Megatron-LM but not tied to it (the published layouts of Meta's 405B, say, are
//! Megatron-priced FSDP-with-pipeline runs). What a framework has no code for in the model
//! (a `head_dim` of its own) is [`model_limit`]: no layout avoids it, so `check` warns of it
//! (P0331) and `solve` does not search around it. Other limits of the model or the training
//! values that only the launch meets (a GPT-2 layout under torchtitan, fp16) stay with the
//! targets.

use crate::plan::{Framework, Model, Offload, Parallel, PlanSpec, Schedule, Train};

/// One limit a framework puts on the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The framework's name, as `job.framework` spells it.
    pub framework: &'static str,
    /// What the layout asks and why the framework cannot, in words.
    pub reason: String,
    /// The `parallel` attribute to change.
    pub attr: &'static str,
}

/// The framework whose limits apply: `job.framework` when the plan sets it.
pub fn framework_of(spec: &PlanSpec) -> Option<Framework> {
    spec.job.as_ref().map(|j| j.framework)
}

/// Whether planc writes the training script (no `job.entrypoint`): its script splits data
/// only (`targets/src/script.rs`).
fn generated_script(spec: &PlanSpec) -> bool {
    spec.job.as_ref().is_some_and(|j| j.entrypoint.is_none())
}

/// The first limit of the plan's framework that layout `p` breaks, if any.
pub fn limit(spec: &PlanSpec, p: &Parallel) -> Option<Limit> {
    let framework = framework_of(spec)?;
    layout_limit(framework, generated_script(spec), p)
}

/// The first limit of `framework` that `p` breaks; `generated` when the job runs the
/// training script planc writes.
pub fn layout_limit(framework: Framework, generated: bool, p: &Parallel) -> Option<Limit> {
    let lim = |attr, reason: String| {
        Some(Limit {
            framework: framework.as_str(),
            reason,
            attr,
        })
    };
    match framework {
        Framework::Deepspeed => {
            for (attr, v) in [("pp", p.pp), ("cp", p.cp), ("ep", p.ep)] {
                if v > 1 {
                    return lim(
                        attr,
                        format!(
                            "{attr} = {v}: DeepSpeed's config has no {} (the model code would \
                             have to provide it)",
                            match attr {
                                "pp" => "pipeline stages",
                                "cp" => "context parallelism",
                                _ => "expert parallelism",
                            }
                        ),
                    );
                }
            }
            if generated && p.tp > 1 {
                return lim(
                    "tp",
                    format!(
                        "tp = {}: the training script planc generates splits data only (name \
                         your own with job.entrypoint)",
                        p.tp
                    ),
                );
            }
            None
        }
        Framework::Megatron => {
            if p.schedule == Schedule::ZeroBubble && p.pp > 1 {
                return lim(
                    "schedule",
                    "schedule = zb_h1: Megatron-LM has no ZB-H1 schedule".into(),
                );
            }
            if p.zero >= 2 && p.pp > 1 {
                return lim(
                    "zero",
                    format!(
                        "zero = {} with pp = {}: planc does not emit Megatron-LM's FSDP with \
                         pipeline stages (zero = 1 is its distributed optimizer)",
                        p.zero, p.pp
                    ),
                );
            }
            if p.offload == Offload::Params {
                return lim(
                    "offload",
                    "offload = params: Megatron-LM cannot offload parameters".into(),
                );
            }
            if p.schedule == Schedule::Interleaved
                && p.vpp > 1
                && p.overlap_p2p == Some(false)
                && p.pp <= 2
            {
                return lim(
                    "pp",
                    format!(
                        "pp = {} with `overlap_p2p = false`: Megatron-LM's interleaved schedule \
                         without p2p overlap needs pp > 2",
                        p.pp
                    ),
                );
            }
            None
        }
        Framework::Torchtitan => {
            if p.zero == 1 {
                return lim(
                    "zero",
                    "zero = 1: torchtitan has no optimizer-only sharding (zero = 0 is DDP, 2 and \
                     3 FSDP2)"
                        .into(),
                );
            }
            if p.offload == Offload::Optimizer {
                return lim(
                    "offload",
                    "offload = optimizer: torchtitan's FSDP2 offloads parameters, gradients and \
                     optimizer state together (offload = params)"
                        .into(),
                );
            }
            if p.offload == Offload::Params && p.zero < 2 {
                return lim(
                    "offload",
                    "offload = params: torchtitan offloads through FSDP2, which zero = 2 or 3 use"
                        .into(),
                );
            }
            if p.schedule == Schedule::ZeroBubble && p.pp > 1 {
                return lim(
                    "schedule",
                    "schedule = zb_h1: torch's pipelining has zero-bubble schedules only for \
                     several stages per rank; use 1f1b or interleaved"
                        .into(),
                );
            }
            if p.ep > 1 {
                return lim(
                    "ep",
                    format!("ep = {}: torchtitan's Llama 3 is a dense model", p.ep),
                );
            }
            None
        }
        Framework::Planc => {
            // What `planc run` executes (`runtime::train::step::refuse` asks this first).
            for (attr, v, what) in [
                ("cp", p.cp, "context parallelism"),
                ("ep", p.ep, "expert parallelism"),
            ] {
                if v > 1 {
                    return lim(
                        attr,
                        format!(
                            "{attr} = {v}: `planc run` runs tensor, pipeline and data \
                             parallelism; {what} is not run yet"
                        ),
                    );
                }
            }
            if p.zero >= 2 {
                return lim(
                    "zero",
                    format!(
                        "zero = {}: `planc run` shards the optimizer state (zero = 1), not \
                         gradients or weights",
                        p.zero
                    ),
                );
            }
            if p.offload != Offload::None {
                return lim(
                    "offload",
                    format!(
                        "offload = {}: `planc run` keeps every state on the GPU",
                        p.offload.as_str()
                    ),
                );
            }
            // Refused on one stage too: the runtime's program has no zero-bubble schedule.
            if p.schedule == Schedule::ZeroBubble {
                return lim(
                    "schedule",
                    "schedule = zb_h1: `planc run` runs the gpipe, 1f1b and interleaved \
                     schedules (zero-bubble splits backward into input and weight passes)"
                        .into(),
                );
            }
            None
        }
        Framework::Torch => None,
    }
}

/// A part of the model or of the training method the framework has no code for: not a
/// layout, so no layout avoids it and `solve` does not search around it. `check` warns of it
/// (P0331) at `block.attr`; `emit` (P0706) and `planc run` (P0901) refuse it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLimit {
    pub framework: &'static str,
    pub reason: String,
    pub block: &'static str,
    pub attr: &'static str,
}

/// The first part of the plan's model or training method its framework does not run.
pub fn model_limit(spec: &PlanSpec) -> Option<ModelLimit> {
    let framework = framework_of(spec)?;
    framework_model_limit(framework, &spec.model).or_else(|| method_limit(framework, &spec.train))
}

/// The training method (`train.method`) when the launch planc writes for `framework`
/// cannot carry it: none does. `planc run`, Megatron-LM (as planc emits it), torchtitan and
/// the training script planc generates train every weight; a job's own script
/// (`job.entrypoint`) takes a method in flags of its own (LLaMA-Factory's
/// `--finetuning_type lora --lora_rank`), which planc does not write, so its launch would
/// train every weight as silently as the others.
pub fn method_limit(framework: Framework, train: &Train) -> Option<ModelLimit> {
    if framework == Framework::Planc && train.dropout > 0.0 {
        return Some(ModelLimit {
            framework: framework.as_str(),
            reason: format!(
                "dropout = {}: `planc run` trains without dropout",
                train.dropout
            ),
            block: "train",
            attr: "dropout",
        });
    }
    if train.method.is_full() {
        return None;
    }
    let method = train.method.method();
    let who = match framework {
        Framework::Planc => "`planc run` trains every weight (full training)",
        Framework::Megatron => {
            "Megatron-LM's pretrain_gpt.py, which planc emits, trains every weight: it has no \
             LoRA adapters or frozen layers (NeMo's and Megatron-Bridge's PEFT add them)"
        }
        Framework::Torchtitan => "torchtitan trains every weight of its Llama 3",
        Framework::Torch | Framework::Deepspeed => {
            "planc's launch trains every weight: the script it generates has no adapters, and \
             a job's own script takes the method in flags of its own (LLaMA-Factory's \
             --finetuning_type lora), which planc does not write"
        }
    };
    Some(ModelLimit {
        framework: framework.as_str(),
        reason: format!("method = {method}: {who}"),
        block: "train",
        attr: "method",
    })
}

/// The first part of `model` that `framework` does not run.
pub fn framework_model_limit(framework: Framework, model: &Model) -> Option<ModelLimit> {
    let lim = |block, attr, reason: String| {
        Some(ModelLimit {
            framework: framework.as_str(),
            reason,
            block,
            attr,
        })
    };
    let own_head = model.attention_width() != model.hidden;
    match framework {
        Framework::Planc | Framework::Torchtitan if own_head => lim(
            "model",
            "head_dim",
            format!(
                "head_dim = {}: {} takes a head to be hidden / heads = {} wide",
                model.head_dim,
                if framework == Framework::Planc {
                    "`planc run`"
                } else {
                    "torchtitan's Llama 3"
                },
                model.hidden / model.heads.max(1)
            ),
        ),
        Framework::Planc | Framework::Torchtitan if model.windowed_layers() > 0 => lim(
            "model",
            "sliding_window",
            format!(
                "sliding_window = {}: {} attends every layer over the whole sequence",
                model.sliding_window.unwrap_or_default(),
                if framework == Framework::Planc {
                    "`planc run`"
                } else {
                    "torchtitan's Llama 3"
                }
            ),
        ),
        _ => None,
    }
}

/// The limits of `framework` in one sentence, for `solve`'s rule list and its explanations.
pub fn sentence(framework: Framework, generated: bool) -> String {
    match framework {
        Framework::Deepspeed => format!(
            "DeepSpeed's config runs pp = 1, cp = 1, ep = 1{}",
            if generated {
                ", and the training script planc generates tp = 1"
            } else {
                ""
            }
        ),
        Framework::Megatron => "Megatron-LM runs no zb_h1 schedule, no zero = 2 or 3 with pp > 1, \
                                no offload = params, and interleaving without p2p overlap only with pp > 2"
            .into(),
        Framework::Torchtitan => "torchtitan runs zero = 0, 2 or 3 (not 1), offload = params only \
                                  with FSDP2, no zb_h1 schedule, ep = 1"
            .into(),
        Framework::Torch | Framework::Planc => format!("{framework} runs any layout"),
    }
}

/// The `parallel` attributes the framework's limits are about.
pub fn attrs(framework: Framework) -> &'static [&'static str] {
    match framework {
        Framework::Deepspeed => &["pp", "cp", "ep", "tp"],
        Framework::Megatron => &["schedule", "zero", "offload", "pp"],
        Framework::Torchtitan => &["zero", "offload", "schedule", "ep"],
        Framework::Torch | Framework::Planc => &[],
    }
}

/// Whether planc writes the job's training script, for [`sentence`].
pub fn generates_script(spec: &PlanSpec) -> bool {
    generated_script(spec)
}

#[cfg(test)]
mod tests {
    use z3::ast::Int;
    use z3::{SatResult, Solver};

    use crate::check::check_source;
    use crate::solve::rules::{encode, offload_index, Rule, Vars};
    use crate::solve::space::Space;
    use crate::validate::validate;

    /// Every layout of a mixture-of-experts plan with everything left open, under `job`.
    fn layouts(job: &str) -> (crate::plan::PlanSpec, Vec<crate::plan::Parallel>) {
        let text = format!(
            "cluster c {{ nodes = 4, gpus_per_node = 8, gpu = H100_SXM_80GB
                 inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }} }}
             model m {{ preset = \"mixtral-8x7b\" }}
             train {{ global_batch = 256, precision = bf16, optimizer = adamw }}
             parallel {{ tp = auto, pp = auto, dp = auto, cp = auto, ep = auto,
                         schedule = [1f1b, interleaved, zb_h1], vpp = auto, micro_batch = [1, 2],
                         zero = [0, 1, 2, 3], offload = [none, optimizer, params] }}
             job {{ {job} }}"
        );
        let c = check_source("t.tp", &text);
        let spec = c.spec.expect("a spec");
        let all = Space::of(&spec).layouts(spec.cluster.world_size());
        (spec, all)
    }

    #[test]
    fn check_shows_what_planc_run_refuses_at_the_attribute_before_anything_starts() {
        let diags = |parallel: &str, train: &str| {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                 model m {{ layers = 8, hidden = 512, heads = 8, vocab = 1024, seq_len = 256 }}
                 train {{ global_batch = 64, precision = bf16 {train} }}
                 parallel {{ micro_batch = 1, {parallel} }}
                 job {{ framework = planc }}"
            );
            let c = check_source("t.tp", &text);
            c.diagnostics
                .iter()
                .map(|d| (d.code.to_string(), d.message.clone()))
                .collect::<Vec<_>>()
        };
        for (parallel, code, said) in [
            ("tp = 1, pp = 1, dp = 4, cp = 2", "P0330", "cp = 2"),
            ("tp = 1, pp = 1, dp = 8, zero = 3", "P0330", "zero = 3"),
            (
                "tp = 1, pp = 1, dp = 8, zero = 1, offload = optimizer",
                "P0330",
                "offload",
            ),
            ("tp = 1, pp = 2, dp = 4, schedule = zb_h1", "P0330", "zb_h1"),
        ] {
            let d = diags(parallel, "");
            assert!(
                d.iter().any(|(c, _)| c == code),
                "{parallel}: {d:?} (wanted {code}, {said})"
            );
            let limit = super::layout_limit(crate::plan::Framework::Planc, false, &{
                let c = check_source(
                    "t.tp",
                    &format!(
                        "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                         model m {{ layers = 8, hidden = 512, heads = 8, vocab = 1024, seq_len = 256 }}
                         train {{ global_batch = 64, precision = bf16 }}
                         parallel {{ micro_batch = 1, {parallel} }}"
                    ),
                );
                c.plan.expect("a plan").parallel
            })
            .expect("refused");
            assert!(limit.reason.contains(said), "{}", limit.reason);
        }
        let d = diags("tp = 1, pp = 1, dp = 8", ", dropout = 0.1");
        assert!(
            d.iter()
                .any(|(c, m)| c == "P0331" && m.contains("training setting")),
            "{d:?}"
        );
        // What runs warns of nothing.
        for parallel in [
            "tp = 2, pp = 2, dp = 2",
            "tp = 1, pp = 2, dp = 4, schedule = interleaved, vpp = 2",
        ] {
            let d = diags(parallel, "");
            assert!(
                !d.iter().any(|(c, _)| c == "P0330" || c == "P0331"),
                "{parallel}: {d:?}"
            );
        }
    }

    #[test]
    fn validate_the_rule_and_its_formula_agree_for_every_framework() {
        for job in [
            "framework = deepspeed",
            "framework = deepspeed, entrypoint = \"mine.py\"",
            "framework = megatron",
            "framework = torchtitan",
            "framework = torch",
            "framework = planc",
        ] {
            let (spec, all) = layouts(job);
            assert!(all.len() > 5000, "{job}: {}", all.len());
            let (mut runs, mut refused) = (0, 0);
            let v = Vars::new();
            let formula = encode(Rule::FrameworkRuns, &spec, &v);
            for p in all.iter().step_by(41) {
                let holds = Rule::FrameworkRuns.holds(&spec, p);
                let p0330 = validate(&spec, p).iter().any(|d| d.code == "P0330");
                assert_eq!(holds, !p0330, "{job}: {p:?}");
                if p.schedule == crate::plan::Schedule::ZeroBubble {
                    // A schedule among candidates is a variable only as interleaved or not
                    // (`encode_framework`): zb_h1 is read from a plan that fixes it.
                    continue;
                }
                let s = Solver::new();
                for (var, x) in [
                    (&v.tp, p.tp as i64),
                    (&v.pp, p.pp as i64),
                    (&v.cp, p.cp as i64),
                    (&v.ep, p.ep as i64),
                    (&v.zero, p.zero as i64),
                    (&v.offload, offload_index(p.offload)),
                ] {
                    s.assert(var.eq(Int::from_i64(x)));
                }
                s.assert(v.interleaved.eq(z3::ast::Bool::from_bool(p.vpp > 1)));
                s.assert(&formula);
                assert_eq!(s.check() == SatResult::Sat, holds, "{job}: z3 on {p:?}");
                if holds {
                    runs += 1;
                } else {
                    refused += 1;
                }
            }
            if job == "framework = torch" {
                assert_eq!(refused, 0, "a torch job's own script may run anything");
            } else {
                assert!(
                    runs > 0 && refused > 0,
                    "{job}: {runs} run, {refused} refused"
                );
            }
        }
    }
}
