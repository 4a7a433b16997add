//! What a plan costs: GPU-hours a step, per million tokens and for the training run, and
//! money where the cluster has a price (`cluster.price`, a group's own `price`).
//!
//! A layout uses every GPU of the cluster (`tp × pp × cp × dp` is the world size), so the
//! cluster is billed whole for the step's time. The training run is `train.tokens`, else
//! `train.steps` where it is written (steps × global batch × sequence); `planc run`'s
//! default of 10 steps is a smoke test, not a run to price.

use planc_lang::units::Currency;

use crate::cost::Estimate;
use crate::plan::Plan;

/// The tokens a training run takes and the attribute they come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingRun {
    pub tokens: f64,
    /// `tokens` or `steps`.
    pub from: &'static str,
}

/// The cost of a costed plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Bill {
    pub gpus: u64,
    pub gpu_hours_per_step: f64,
    pub gpu_hours_per_million_tokens: f64,
    pub run: Option<TrainingRun>,
    pub time_to_train_s: Option<f64>,
    pub gpu_hours_to_train: Option<f64>,
    pub money: Option<Money>,
}

/// The same in money, in the cluster's currency.
#[derive(Clone, Debug, PartialEq)]
pub struct Money {
    pub currency: Currency,
    /// What one GPU costs an hour: the mean over the cluster's GPUs where groups differ.
    pub price_per_gpu_hour: f64,
    /// What the whole cluster costs an hour.
    pub per_hour: f64,
    pub per_step: f64,
    pub per_million_tokens: f64,
    pub to_train: Option<f64>,
}

/// The training run the plan describes, if it describes one.
pub fn training_run(plan: &Plan) -> Option<TrainingRun> {
    let t = &plan.train;
    if let Some(tokens) = t.tokens.filter(|x| x.is_finite() && *x > 0.0) {
        return Some(TrainingRun {
            tokens,
            from: "tokens",
        });
    }
    t.run.steps_written.then_some(TrainingRun {
        tokens: t.run.steps as f64 * t.global_batch as f64 * plan.model.seq_len as f64,
        from: "steps",
    })
}

/// The bill of a plan whose step takes `step_s` and moves `tokens_per_step` tokens.
pub fn bill_of(plan: &Plan, step_s: f64, tokens_per_step: f64) -> Bill {
    let gpus = plan.cluster.world_size();
    let hours_per_step = step_s / 3600.0;
    let gpu_hours_per_step = gpus as f64 * hours_per_step;
    let steps_per_million = 1e6 / tokens_per_step;
    let run = training_run(plan);
    let steps_to_train = run.map(|r| r.tokens / tokens_per_step);
    let money = plan
        .cluster
        .price_per_hour()
        .map(|(per_hour, currency)| Money {
            currency,
            price_per_gpu_hour: per_hour / gpus as f64,
            per_hour,
            per_step: per_hour * hours_per_step,
            per_million_tokens: per_hour * hours_per_step * steps_per_million,
            to_train: steps_to_train.map(|n| per_hour * hours_per_step * n),
        });
    Bill {
        gpus,
        gpu_hours_per_step,
        gpu_hours_per_million_tokens: gpu_hours_per_step * steps_per_million,
        run,
        time_to_train_s: steps_to_train.map(|n| n * step_s),
        gpu_hours_to_train: steps_to_train.map(|n| n * gpu_hours_per_step),
        money,
    }
}

/// The bill of a costed plan.
pub fn bill(plan: &Plan, e: &Estimate) -> Bill {
    bill_of(
        plan,
        e.step_s,
        plan.train.global_batch as f64 * plan.model.seq_len as f64,
    )
}

/// What `solve`'s `objective = cost` ranks by: money per token where the cluster has a
/// price, GPU-hours per token where it has none (the same order at one price).
pub fn cost_per_token(plan: &Plan, e: &Estimate) -> f64 {
    let b = bill(plan, e);
    b.money
        .map_or(b.gpu_hours_per_million_tokens, |m| m.per_million_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    /// 2 nodes × 8 H100s, tp 8 and dp 2, global batch 64 of 4096 tokens.
    fn plan(cluster_extra: &str, train_extra: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 2, gpus_per_node = 8, gpu = H100_SXM_80GB {cluster_extra}
                inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s }} }}
             model m {{ preset = \"llama3-8b\", seq_len = 4096 }}
             train {{ global_batch = 64 {train_extra} }}
             parallel {{ tp = 8, pp = 1, dp = 2, micro_batch = 1 }}"
        );
        let checked = check_source("p.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn gpu_hours_are_the_cluster_times_the_step() {
        // 16 GPUs for 36 s a step: 0.16 GPU-hours; 64 × 4096 = 262,144 tokens a step.
        let b = bill_of(&plan("", ""), 36.0, 262_144.0);
        assert_eq!(b.gpus, 16);
        assert!(close(b.gpu_hours_per_step, 0.16));
        assert!(close(
            b.gpu_hours_per_million_tokens,
            0.16 * 1e6 / 262_144.0
        ));
        assert_eq!(
            b.run, None,
            "no tokens and no written steps: no run to price"
        );
        assert_eq!(b.money, None, "no price: GPU-hours only");
    }

    #[test]
    fn a_price_bills_every_gpu_for_the_step_and_the_run() {
        // 1e9 tokens / 262,144 a step = 3814.7 steps of 36 s: 38.1 hours of 16 GPUs.
        let b = bill_of(
            &plan(", price = 2.5 USD/h", ", tokens = 1e9"),
            36.0,
            262_144.0,
        );
        let steps = 1e9 / 262_144.0;
        let m = b.money.clone().unwrap();
        assert_eq!(m.currency, Currency::Usd);
        assert!(close(m.price_per_gpu_hour, 2.5));
        assert!(close(m.per_hour, 40.0));
        assert!(close(m.per_step, 0.4));
        assert!(close(m.per_million_tokens, 0.4 * 1e6 / 262_144.0));
        assert!(close(m.to_train.unwrap(), 0.4 * steps));
        assert!(close(b.time_to_train_s.unwrap(), 36.0 * steps));
        assert!(close(b.gpu_hours_to_train.unwrap(), 0.16 * steps));
        assert_eq!(b.run.unwrap().from, "tokens");
    }

    #[test]
    fn written_steps_are_the_run_when_tokens_are_not() {
        let b = bill_of(&plan("", ", steps = 1000"), 36.0, 262_144.0);
        let run = b.run.unwrap();
        assert_eq!((run.tokens, run.from), (1000.0 * 262_144.0, "steps"));
        assert!(close(b.time_to_train_s.unwrap(), 36_000.0));
        // Tokens win over steps (steps may be a short run of `planc run`).
        let b = bill_of(&plan("", ", steps = 1000, tokens = 1e9"), 36.0, 262_144.0);
        assert_eq!(b.run.unwrap().from, "tokens");
    }

    /// An H100 group and an A100 group over one pipeline, the cluster at `cluster_price`
    /// and the H100 group at its own `a_price`.
    fn two_groups(cluster_price: &str, a_price: &str) -> String {
        format!(
            "cluster c {{
                price = {cluster_price}
                group a {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB, price = {a_price} }}
                group b {{ nodes = 1, gpus_per_node = 8, gpu = A100_SXM_80GB }}
                inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s }} }}
             model m {{ preset = \"llama3-8b\", seq_len = 4096 }}
             train {{ global_batch = 64 }}
             parallel {{ tp = 8, pp = 2, dp = 1, micro_batch = 1 }}"
        )
    }

    #[test]
    fn groups_are_billed_at_their_own_price_else_the_clusters() {
        let checked = check_source("p.tp", &two_groups("2 EUR/h", "3 EUR/h"));
        let plan = checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics));
        assert_eq!(plan.cluster.price_per_hour(), Some((40.0, Currency::Eur)));
        let m = bill_of(&plan, 3600.0, 1e6).money.unwrap();
        assert!(close(m.price_per_gpu_hour, 2.5));
        assert!(close(m.per_step, 40.0));
    }

    #[test]
    fn prices_in_two_currencies_and_negative_prices_are_refused() {
        let codes: Vec<&str> = check_source("p.tp", &two_groups("2 USD/h", "3 EUR/h"))
            .diagnostics
            .iter()
            .map(|d| d.code)
            .collect();
        assert!(codes.contains(&"P0208"), "{codes:?}");
        let text =
            "cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB, price = 0 - 1 USD/h }
             model m { preset = \"llama3-8b\", seq_len = 4096 }
             train { global_batch = 64 }
             parallel { tp = 8, pp = 1, dp = 1, micro_batch = 1 }";
        let codes: Vec<&str> = check_source("p.tp", text)
            .diagnostics
            .iter()
            .map(|d| d.code)
            .collect();
        assert!(
            codes.contains(&"P0212") || codes.contains(&"P0216"),
            "{codes:?}"
        );
        let text = "cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB, price = 2.49 }
             model m { preset = \"llama3-8b\", seq_len = 4096 }
             train { global_batch = 64 }
             parallel { tp = 8, pp = 1, dp = 1, micro_batch = 1 }";
        let d = check_source("p.tp", text).diagnostics;
        let price = d
            .iter()
            .find(|d| d.code == "P0208")
            .expect("a plain number is refused");
        assert_eq!(price.help.as_deref(), Some("add a unit, e.g. `2.49 USD/h`"));
    }
}
