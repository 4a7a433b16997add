//! `planc solve` against brute force on small spaces, its rules against `validate`, and
//! its explanations of infeasible plans.

use planc_compiler::check::check_source;
use planc_compiler::cost::estimate;
use planc_compiler::plan::{Hole, PlanSpec};
use planc_compiler::solve::{self, broken_rule, memory_fraction, space::Space};
use planc_compiler::validate::validate;

fn spec(text: &str) -> PlanSpec {
    let checked = check_source("s.tp", text);
    checked
        .spec
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
}

fn plan_text(cluster: &str, model: &str, parallel: &str) -> String {
    format!(
        "{cluster}\n{model}\ntrain {{ global_batch = 64, precision = bf16, optimizer = adam }}\nparallel {{ {parallel} }}"
    )
}

const NODE: &str = "cluster c { nodes = 1, gpus_per_node = 8, gpu = A100_SXM_80GB }";
const FOUR_NODES: &str = "cluster c { nodes = 4, gpus_per_node = 8, gpu = H100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us } }";

/// Every combination of the domains, each checked the way `planc check` checks a plan
/// written out in full: validate, then memory with headroom, then the closed form.
fn brute_force(s: &PlanSpec) -> Option<(f64, planc_compiler::plan::Parallel)> {
    let space = Space::of(s);
    let world = s.cluster.world_size();
    let mut best: Option<(f64, planc_compiler::plan::Parallel)> = None;
    let sps: Vec<bool> = if space.sequence_parallel.is_empty() {
        vec![false, true]
    } else {
        space.sequence_parallel.clone()
    };
    for &tp in &space.tp {
        for &pp in &space.pp {
            for &cp in &space.cp {
                for &vpp in &space.vpp {
                    for &mb in &space.micro_batch {
                        for &schedule in &space.schedule {
                            for &sp in &sps {
                                for &zero in &space.zero {
                                    if pp > 1 && zero > space.zero_with_pipeline_max {
                                        continue; // `zero = auto` keeps ZeRO-2/3 off pipelines
                                    }
                                    for &recompute in &space.recompute {
                                        if space.sequence_parallel.is_empty() && sp != (tp > 1) {
                                            continue; // auto: on exactly when tp > 1
                                        }
                                        if !world.is_multiple_of(tp * pp * cp) {
                                            continue; // dp = auto has no value
                                        }
                                        let dp = world / (tp * pp * cp);
                                        let p = planc_compiler::plan::Parallel {
                                            tp,
                                            pp,
                                            dp,
                                            cp,
                                            ep: 1,
                                            vpp,
                                            micro_batch: mb,
                                            schedule,
                                            sequence_parallel: sp,
                                            zero,
                                            recompute,
                                            offload: planc_compiler::plan::Offload::None,
                                            first_stage_layers: s.parallel.first_stage_layers,
                                            last_stage_layers: s.parallel.last_stage_layers,
                                            overlap_grad_reduce: s.parallel.overlap_grad_reduce,
                                            overlap_p2p: s.parallel.overlap_p2p,
                                            overlap_tp_backward: s.parallel.overlap_tp_backward,
                                            grad_accumulation_fusion: s
                                                .parallel
                                                .grad_accumulation_fusion,
                                            scatter_gather_p2p: s.parallel.scatter_gather_p2p,
                                            grad_dtype: s.parallel.grad_dtype,
                                            reduce_dtype: s.parallel.reduce_dtype,
                                            optimizer_dtype: s.parallel.optimizer_dtype,
                                        };
                                        if validate(s, &p).iter().any(|d| d.is_error()) {
                                            continue;
                                        }
                                        let plan = s.plan_with(p.clone());
                                        if memory_fraction(&plan) > 1.0 - s.search.memory_headroom {
                                            continue;
                                        }
                                        let t = estimate(&plan).step_s;
                                        if best.as_ref().is_none_or(|(b, _)| t < *b) {
                                            best = Some((t, p));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    best
}

#[test]
fn solve_finds_what_brute_force_finds() {
    let cases = [
        (NODE, "model m { preset = \"llama2-7b\" }", "tp = auto, pp = auto, dp = auto, micro_batch = auto, zero = auto, recompute = auto"),
        (NODE, "model m { preset = \"llama2-13b\", seq_len = 4096 }", "tp = auto, pp = auto, dp = auto, schedule = auto, vpp = auto, recompute = auto"),
        (FOUR_NODES, "model m { preset = \"llama3-70b\" }", "tp = [4, 8], pp = auto, dp = auto, cp = [1, 2], micro_batch = [1, 2], zero = [0, 1], recompute = auto"),
        (NODE, "model m { layers = 24, hidden = 2048, heads = 16, vocab = 32000, seq_len = 2048 }", "tp = auto, pp = auto, dp = auto, cp = auto, schedule = auto, vpp = auto, micro_batch = auto"),
        // Uneven stages are kept as written; pp ranges over the splits they allow.
        (FOUR_NODES, "model m { layers = 30, hidden = 4096, heads = 32, vocab = 128000, seq_len = 4096 }", "tp = auto, pp = auto, dp = auto, schedule = auto, vpp = auto, micro_batch = [1, 2], recompute = auto, first_stage_layers = 6, last_stage_layers = 6"),
    ];
    for (cluster, model, parallel) in cases {
        let s = spec(&plan_text(cluster, model, parallel));
        let found = solve::search(&s, &|_, _| {});
        let brute = brute_force(&s);
        match (found.best(), brute) {
            (Some(c), Some((t, p))) => {
                assert!(
                    (c.estimate.step_s - t).abs() <= 1e-12 * t,
                    "{model}: solve {} vs brute {t} ({p:?})",
                    c.estimate.step_s
                );
            }
            (None, None) => {}
            (a, b) => panic!(
                "{model}: solve {:?} vs brute force {:?}",
                a.map(|c| &c.plan.parallel),
                b
            ),
        }
        assert!(found.ranked.len() > 1, "{model}: a real search");
    }
}

#[test]
fn the_rules_accept_exactly_what_validate_accepts() {
    let s = spec(&plan_text(FOUR_NODES, "model m { preset = \"mixtral-8x7b\" }", "tp = auto, pp = auto, dp = auto, cp = auto, ep = auto, schedule = auto, vpp = auto, micro_batch = auto, zero = auto"));
    let mut layouts = Space::of(&s).layouts(s.cluster.world_size());
    assert!(layouts.len() > 1000);
    // Include layouts that break the sequence-parallel rule too.
    for p in layouts.clone().iter().take(500) {
        let mut q = p.clone();
        q.sequence_parallel = !q.sequence_parallel;
        layouts.push(q);
    }
    for p in &layouts {
        let by_rules = broken_rule(&s, p).is_none();
        let by_validate = !validate(&s, p).iter().any(|d| d.is_error());
        assert_eq!(
            by_rules,
            by_validate,
            "{p:?}: rules {:?}, validate {:?}",
            broken_rule(&s, p),
            validate(&s, p)
        );
    }
}

#[test]
fn the_pareto_front_is_not_dominated() {
    let s = spec(&plan_text(
        FOUR_NODES,
        "model m { preset = \"llama3-70b\" }",
        "tp = auto, pp = auto, dp = auto, micro_batch = auto, zero = auto, recompute = auto",
    ));
    let found = solve::search(&s, &|_, _| {});
    assert!(found.pareto.len() >= 2);
    for &i in &found.pareto {
        let a = &found.ranked[i];
        for b in &found.ranked {
            let dominates =
                b.memory_fraction < a.memory_fraction && b.estimate.step_s < a.estimate.step_s;
            assert!(!dominates, "front member {i} is dominated");
        }
    }
    assert!(
        found.pareto.contains(&0),
        "the fastest plan is on the front"
    );
}

#[test]
fn the_cost_objective_ranks_by_money_per_token() {
    let priced = FOUR_NODES.replace(
        "gpu = H100_SXM_80GB",
        "gpu = H100_SXM_80GB, price = 2.49 USD/h",
    );
    let text = |objective: &str| {
        format!(
            "{}\nsearch {{ objective = {objective} }}",
            plan_text(
                &priced,
                "model m { preset = \"llama3-8b\" }",
                "tp = auto, pp = auto, dp = auto, micro_batch = auto, zero = auto, recompute = auto",
            )
        )
    };
    let s = spec(&text("cost"));
    let found = solve::search(&s, &|_, _| {});
    assert!(found.ranked.len() > 10);
    let costs: Vec<f64> = found
        .ranked
        .iter()
        .map(|c| planc_compiler::pricing::cost_per_token(&c.plan, &c.estimate))
        .collect();
    assert!(
        costs.windows(2).all(|w| w[0] <= w[1]),
        "ranked by cost per token: {costs:?}"
    );
    // Money per token is the step's time at the whole cluster's price: on one cluster the
    // cheapest layout is the fastest.
    let fastest = solve::search(&spec(&text("throughput")), &|_, _| {});
    assert_eq!(
        found.ranked[0].plan.parallel,
        fastest.ranked[0].plan.parallel
    );
    let c = &found.ranked[0];
    let per_million = planc_compiler::pricing::bill(&c.plan, &c.estimate)
        .money
        .expect("priced")
        .per_million_tokens;
    let tokens = 64.0 * c.plan.model.seq_len as f64;
    let want = 32.0 * 2.49 * c.estimate.step_s / 3600.0 / tokens * 1e6;
    assert!(
        (per_million - want).abs() < 1e-9 * want,
        "{per_million} vs {want}"
    );
}

/// Llama 3 8B with the cluster's size a hole: one, two or four nodes of eight H100s.
fn sized(objective: &str) -> String {
    let cluster = "cluster c { nodes = [4, 1, 2], gpus_per_node = 8, gpu = H100_SXM_80GB, price = 2.49 USD/h
        inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us } }";
    format!(
        "{}\nsearch {{ objective = {objective} }}",
        plan_text(
            cluster,
            "model m { preset = \"llama3-8b\" }",
            "tp = auto, pp = auto, dp = auto, micro_batch = auto, zero = auto, recompute = auto",
        )
    )
}

#[test]
fn with_the_cluster_size_open_cost_rents_fewer_gpus_than_throughput() {
    let fast = solve::search(&spec(&sized("throughput")), &|_, _| {});
    let cheap = solve::search(&spec(&sized("cost")), &|_, _| {});
    let gpus = |c: &solve::Candidate| c.plan.cluster.world_size();
    let sizes: std::collections::BTreeSet<u64> = fast.ranked.iter().map(gpus).collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![8, 16, 32]);
    let money =
        |c: &solve::Candidate| planc_compiler::pricing::cost_per_token(&c.plan, &c.estimate);
    let (f, c) = (&fast.ranked[0], &cheap.ranked[0]);
    // More GPUs finish a step sooner; each GPU-hour buys fewer tokens (more of the step
    // is communication and pipeline), so the cheapest run rents fewer.
    assert_eq!(gpus(f), 32);
    assert!(gpus(c) < gpus(f), "cost chose {} GPUs", gpus(c));
    assert!(f.estimate.step_s < c.estimate.step_s);
    assert!(money(c) < money(f));
    for other in &cheap.ranked {
        assert!(money(other) >= money(c));
    }
    // A layout's dp is the size's: every candidate tiles its own cluster.
    for x in &cheap.ranked {
        let p = &x.plan.parallel;
        assert_eq!(p.tp * p.pp * p.cp * p.dp, gpus(x));
    }
}

#[test]
fn check_fills_the_cluster_size_and_says_so() {
    let checked = check_source("s.tp", &sized("cost"));
    let plan = checked
        .plan
        .as_ref()
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics));
    let spec = checked.spec.as_ref().unwrap();
    assert_eq!(spec.cluster.world_size(), plan.cluster.world_size());
    assert_eq!(
        checked.solution.as_ref().unwrap().ranked[0].plan.parallel,
        plan.parallel
    );
    let note = checked
        .diagnostics
        .iter()
        .find(|d| d.code == "P0502")
        .expect("the holes note");
    let nodes = plan.cluster.nodes();
    assert!(
        note.message.contains(&format!("nodes = {nodes},")),
        "{}",
        note.message
    );
    let report = checked.report();
    assert_eq!(report.plan.unwrap().world_size, nodes * 8);
    assert_eq!(report.cost.unwrap().gpus, nodes * 8);
}

#[test]
fn a_list_of_nodes_is_a_hole_only_for_a_cluster_of_one_kind() {
    let text = "cluster c {
            group a { nodes = [1, 2], gpus_per_node = 8, gpu = H100_SXM_80GB }
            inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s } }
        model m { preset = \"llama3-8b\" }
        train { global_batch = 64 }
        parallel { tp = 8, pp = 1, dp = auto, micro_batch = 1 }";
    let codes: Vec<&str> = check_source("s.tp", text)
        .diagnostics
        .iter()
        .map(|d| d.code)
        .collect();
    assert!(codes.contains(&"P0213"), "{codes:?}");
}

fn explanation(text: &str) -> Vec<String> {
    let s = spec(text);
    let found = solve::solve(&s, &|_, _| {});
    assert!(found.ranked.is_empty(), "expected no valid layout");
    let e = found.explanation.expect("an explanation");
    e.conflicts.into_iter().map(|c| c.sentence).collect()
}

#[test]
fn an_infeasible_plan_names_heads_memory_and_the_fixed_pipeline() {
    let text = plan_text(
        "cluster c { nodes = 4, gpus_per_node = 8, gpu = T4
            inter_node { kind = ethernet, nics_per_node = 1, bandwidth = 100 Gb/s, latency = 20 us } }",
        "model m { preset = \"llama2-13b\", seq_len = 2048 }",
        "tp = [4, 8, 16], pp = 1, dp = auto, micro_batch = 1, zero = 1, recompute = auto",
    )
    .replace("precision = bf16", "precision = fp16");
    let conflicts = explanation(&text);
    assert!(
        conflicts.iter().any(|c| c == "tp must divide heads = 40"),
        "{conflicts:?}"
    );
    assert!(
        conflicts
            .iter()
            .any(|c| c.contains("only with tp × pp ≥ 16")),
        "{conflicts:?}"
    );
    assert!(
        conflicts.iter().any(|c| c == "`pp = 1` as written"),
        "{conflicts:?}"
    );
    assert!(
        !conflicts.iter().any(|c| c.contains("batch")),
        "only what conflicts: {conflicts:?}"
    );
}

#[test]
fn an_untileable_candidate_list_names_the_world_size() {
    let conflicts = explanation(&plan_text(
        NODE,
        "model m { preset = \"llama2-7b\" }",
        "tp = 2, pp = [3, 5], dp = auto",
    ));
    assert_eq!(conflicts.len(), 2, "{conflicts:?}");
    assert!(
        conflicts[0].contains("must equal the 8 GPUs")
            || conflicts[1].contains("must equal the 8 GPUs"),
        "{conflicts:?}"
    );
}

#[test]
fn suggestions_make_the_plan_valid() {
    let text = plan_text(
        NODE,
        "model m { preset = \"llama2-13b\" }",
        "tp = 1, pp = 1, dp = auto, recompute = none, zero = 0",
    );
    let s = spec(&text);
    let found = solve::solve(&s, &|_, _| {});
    // tp = 1, pp = 1 is written, so this is not a hole search; write it with a list.
    assert!(found.ranked.is_empty() || found.ranked.len() == 1);
    let text = text.replace("tp = 1", "tp = [1]");
    let s = spec(&text);
    let e = solve::solve(&s, &|_, _| {})
        .explanation
        .expect("infeasible");
    assert!(!e.suggestions.is_empty());
    assert!(
        e.suggestions[0].contains("let planc choose"),
        "{:?}",
        e.suggestions
    );
}

#[test]
fn holes_are_listed_in_plan_order() {
    let s = spec(&plan_text(
        NODE,
        "model m { preset = \"llama2-7b\" }",
        "tp = auto, pp = 2, dp = auto, micro_batch = [1, 2]",
    ));
    assert_eq!(
        planc_compiler::check::holes(&s),
        vec!["tp", "dp", "micro_batch"]
    );
    assert!(matches!(s.parallel.dp, Hole::Auto));
}

#[test]
fn uneven_stages_are_kept_and_pp_ranges_over_the_splits_they_allow() {
    let s = spec(&plan_text(
        FOUR_NODES,
        "model m { layers = 30, hidden = 4096, heads = 32, vocab = 128000, seq_len = 4096 }",
        "tp = auto, pp = auto, dp = auto, schedule = auto, vpp = auto, first_stage_layers = 6, last_stage_layers = 6",
    ));
    // 30 − 6 − 6 = 18 layers shared by pp − 2 stages, at least one each.
    assert_eq!(Space::of(&s).pp, vec![3, 4, 5, 8, 11, 20]);
    let found = solve::search(&s, &|_, _| {});
    assert!(!found.ranked.is_empty());
    for c in &found.ranked {
        let p = &c.plan.parallel;
        assert_eq!(
            (p.first_stage_layers, p.last_stage_layers),
            (Some(6), Some(6))
        );
        // Interleaved only where the middle stages' share splits into equal chunks.
        if p.vpp > 1 {
            let middle = p.middle_stage_layers(30);
            assert!(middle.is_multiple_of(p.vpp), "{p:?}");
        }
        assert!([4, 8].contains(&p.pp), "{p:?}");
    }
}

#[test]
fn interleaved_uneven_layouts_found_by_search_are_those_brute_force_finds() {
    // Llama 3 405B's 126 layers with one layer fewer on each end: every (pp, vpp) the
    // search keeps passes the layers rule, and every one the rule passes is kept.
    let s = spec(&plan_text(
        FOUR_NODES,
        "model m { layers = 126, hidden = 2048, heads = 16, vocab = 32000, seq_len = 2048 }",
        "tp = 8, pp = auto, dp = auto, schedule = interleaved, vpp = auto, micro_batch = 1, zero = 1, first_stage_layers = 7, last_stage_layers = 7",
    ));
    let found = solve::search(&s, &|_, _| {});
    let mut kept: Vec<(u64, u64)> = found
        .ranked
        .iter()
        .map(|c| (c.plan.parallel.pp, c.plan.parallel.vpp))
        .collect();
    kept.sort_unstable();
    let mut brute = Vec::new();
    for pp in [2, 4] {
        // 32 GPUs / tp 8: pp ∈ {1, 2, 4}; interleaving needs pp > 1.
        for vpp in 2..=8u64 {
            let p = planc_compiler::plan::Parallel {
                tp: 8,
                pp,
                dp: 4 / pp,
                vpp,
                schedule: planc_compiler::plan::Schedule::Interleaved,
                zero: 1,
                first_stage_layers: Some(7),
                last_stage_layers: Some(7),
                ..planc_compiler::plan::Parallel::neutral()
            };
            if p.split_error(126).is_none() && 64u64.is_multiple_of(p.dp) {
                brute.push((pp, vpp));
            }
        }
    }
    // pp = 2: both ends fixed, nothing between: every vpp; pp = 4: 112 / 2 = 56 per middle
    // stage, so vpp ∈ {2, 4, 7, 8}.
    assert!(
        brute.contains(&(4, 7)) && !brute.contains(&(4, 3)),
        "{brute:?}"
    );
    for kv in &kept {
        assert!(brute.contains(kv), "{kv:?} kept but refused by brute force");
    }
    // A layout the rule passes and memory admits is never lost.
    for &(pp, vpp) in &brute {
        let parallel = planc_compiler::plan::Parallel {
            tp: 8,
            pp,
            dp: 4 / pp,
            vpp,
            schedule: planc_compiler::plan::Schedule::Interleaved,
            zero: 1,
            first_stage_layers: Some(7),
            last_stage_layers: Some(7),
            ..planc_compiler::plan::Parallel::neutral()
        };
        let plan = s.plan_with(parallel);
        if memory_fraction(&plan) <= 1.0 - s.search.memory_headroom {
            assert!(kept.contains(&(pp, vpp)), "({pp}, {vpp}) fits but was lost");
        }
    }
    assert!(!kept.is_empty());
}

#[test]
fn the_layers_rule_agrees_with_its_z3_encoding() {
    use planc_compiler::plan::{Parallel, Schedule};
    use planc_compiler::solve::rules::{encode, Rule, Vars};
    use z3::ast::Int;
    let base = spec(&plan_text(
        NODE,
        "model m { layers = 126, hidden = 1024, heads = 8, vocab = 32000, seq_len = 2048 }",
        "tp = 1, pp = 1, dp = auto",
    ));
    let ends = [
        (None, None),
        (Some(7), Some(7)),
        (Some(6), None),
        (None, Some(3)),
        (Some(60), Some(66)),
        (Some(100), Some(100)),
    ];
    for (first, last) in ends {
        let mut s = base.clone();
        s.parallel.first_stage_layers = first;
        s.parallel.last_stage_layers = last;
        let v = Vars::new();
        let rule = encode(Rule::LayersByStages, &s, &v);
        for pp in 1..=40 {
            for vpp in 1..=3 {
                let solver = z3::Solver::new();
                solver.assert(&rule);
                solver.assert(v.pp.eq(Int::from_i64(pp as i64)));
                solver.assert(v.vpp.eq(Int::from_i64(vpp as i64)));
                let by_z3 = solver.check() == z3::SatResult::Sat;
                let p = Parallel {
                    pp,
                    vpp,
                    schedule: if vpp > 1 {
                        Schedule::Interleaved
                    } else {
                        Schedule::OneFOneB
                    },
                    first_stage_layers: first,
                    last_stage_layers: last,
                    ..Parallel::neutral()
                };
                let by_rule = Rule::LayersByStages.holds(&s, &p);
                assert_eq!(by_z3, by_rule, "{first:?}/{last:?} pp {pp} vpp {vpp}");
                let by_validate = !validate(&s, &p).iter().any(|d| {
                    d.is_error() && ["P0305", "P0321", "P0322", "P0323"].contains(&d.code)
                });
                assert_eq!(by_rule, by_validate, "{first:?}/{last:?} pp {pp} vpp {vpp}");
            }
        }
    }
}

#[test]
fn auto_ends_agree_with_their_z3_encoding_and_the_splits_they_enumerate() {
    use planc_compiler::plan::{Parallel, Schedule};
    use planc_compiler::solve::balance::splits;
    use planc_compiler::solve::rules::{encode, Rule, Vars};
    use z3::ast::Int;
    let base = spec(&plan_text(
        NODE,
        "model m { layers = 30, hidden = 1024, heads = 8, vocab = 32000, seq_len = 2048 }",
        "tp = 1, pp = 1, dp = auto",
    ));
    // (first, last, first auto, last auto)
    let ends = [
        (None, None, true, true),
        (None, None, true, false),
        (None, None, false, true),
        (None, Some(4), true, false),
        (Some(29), None, false, true),
    ];
    for (first, last, first_auto, last_auto) in ends {
        let mut s = base.clone();
        s.parallel.first_stage_layers = first;
        s.parallel.last_stage_layers = last;
        s.parallel.auto_first_stage_layers = first_auto;
        s.parallel.auto_last_stage_layers = last_auto;
        let v = Vars::new();
        let rule = encode(Rule::LayersByStages, &s, &v);
        for pp in 1..=32 {
            for vpp in 1..=4 {
                let solver = z3::Solver::new();
                solver.assert(&rule);
                solver.assert(v.pp.eq(Int::from_i64(pp as i64)));
                solver.assert(v.vpp.eq(Int::from_i64(vpp as i64)));
                let by_z3 = solver.check() == z3::SatResult::Sat;
                let p = Parallel {
                    pp,
                    vpp,
                    schedule: if vpp > 1 {
                        Schedule::Interleaved
                    } else {
                        Schedule::OneFOneB
                    },
                    ..Parallel::neutral()
                };
                let what =
                    format!("{first:?}/{last:?} auto {first_auto}/{last_auto} pp {pp} vpp {vpp}");
                assert_eq!(by_z3, Rule::LayersByStages.holds(&s, &p), "{what}");
                // Every split enumerated is one validate accepts, with the written end kept.
                for (f, l) in splits(&s, &p) {
                    let q = Parallel {
                        first_stage_layers: f,
                        last_stage_layers: l,
                        ..p.clone()
                    };
                    assert!(q.split_error(30).is_none(), "{what}: {f:?}/{l:?}");
                    if !first_auto && pp > 1 {
                        assert_eq!(f, first, "{what}");
                    }
                    if !last_auto && pp > 1 {
                        assert_eq!(l, last, "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn auto_ends_balance_a_mixed_pipeline() {
    // Llama 2 7B over a node of A100s and a node of V100s: the even split (16 + 16) leaves
    // the A100 stage waiting for the V100 one; `auto` moves layers to the A100s until the
    // stages' work is even, and the step shortens.
    let text = |ends: &str| {
        format!(
            "cluster c {{
                group fast {{ nodes = 1, gpus_per_node = 4, gpu = A100_SXM_80GB }}
                group slow {{ nodes = 1, gpus_per_node = 4, gpu = V100_SXM_32GB }}
                inter_node {{ kind = ethernet, nics_per_node = 1, bandwidth = 100 Gb/s, latency = 20 us }} }}
             model m {{ preset = \"llama2-7b\", seq_len = 2048 }}
             train {{ global_batch = 64, precision = fp16, optimizer = adamw }}
             parallel {{ tp = 4, pp = 2, dp = 1, micro_batch = 1, sequence_parallel = true,
                         zero = 1, recompute = selective {ends} }}"
        )
    };
    let even = check_source("s.tp", &text(""));
    let balanced = check_source("s.tp", &text(", first_stage_layers = auto"));
    let (e, b) = (even.estimate.unwrap(), balanced.estimate.unwrap());
    let plan = balanced.plan.unwrap();
    let first = plan.parallel.first_stage_layers.expect("set by the solver");
    assert!(first > 16 && first < 32, "{first}");
    assert_eq!(plan.parallel.last_stage_layers, None);
    assert!(b.step_s < 0.7 * e.step_s, "{} vs {}", b.step_s, e.step_s);
    assert!(b.stage_imbalance() < 0.1, "{}", b.stage_imbalance());
    // No other split of the same layout is faster (by the closed form the solver ranks).
    for f in 1..32 {
        let mut q = plan.clone();
        q.parallel.first_stage_layers = Some(f);
        if q.parallel.split_error(32).is_none() && memory_fraction(&q) <= 0.9 {
            assert!(
                estimate(&q).closed_form_step_s >= b.closed_form_step_s * (1.0 - 0.02),
                "{f}"
            );
        }
    }
    // The note names what the solver chose.
    assert!(
        balanced
            .diagnostics
            .iter()
            .any(|d| d.code == "P0502"
                && d.message.contains(&format!("first_stage_layers = {first}")))
    );
}

#[test]
fn auto_ends_on_a_uniform_pipeline_keep_the_even_split_when_it_is_best() {
    // A tiny vocabulary makes the ends as heavy as the middle: nothing to move, and the
    // plan keeps the even split (no uneven flags to emit).
    let s = plan_text(
        NODE,
        "model m { layers = 32, hidden = 4096, heads = 32, vocab = 128, seq_len = 2048 }",
        "tp = 1, pp = 4, dp = 2, micro_batch = 1, first_stage_layers = auto, last_stage_layers = auto",
    );
    let c = check_source("s.tp", &s);
    let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
    assert_eq!(
        (
            plan.parallel.first_stage_layers,
            plan.parallel.last_stage_layers
        ),
        (None, None)
    );
}
