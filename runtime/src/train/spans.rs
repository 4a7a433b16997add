//! The engine's traced spans named by the compiler's operation ids (`cost::op_id`): a
//! span's kind comes from the cost model's one table (`WorkKind::of`), so the step by kind
//! groups what the runtime measured as the cost model groups what it priced, and its name
//! in the trace is the one `planc run --trace` has always written.

use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::cost::op_id::OpId;

/// Which part of an operation's work a span covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Forward,
    Backward,
    /// Standard attention's probabilities recomputed before its backward (not kept).
    ProbabilitiesRecompute,
    /// Standard attention's backward products from the probabilities.
    BackwardProducts,
}

/// A span the engine marks: an operation of layer `l`, or of micro-batch `j` (the
/// embedding, the loss head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    Layer { l: usize, op: OpId, part: Part },
    MicroBatch { j: usize, op: OpId, part: Part },
}

impl Span {
    /// What the step by kind sums the span under: the cost model's kind of its operation.
    pub fn kind(self) -> WorkKind {
        match self {
            Span::Layer { op, .. } | Span::MicroBatch { op, .. } => WorkKind::of(op),
        }
    }

    /// The span's name in the trace.
    pub fn name(self) -> String {
        match self {
            Span::Layer { l, op, part } => format!("L{l} {}", layer_label(op, part)),
            Span::MicroBatch { j, op, part } => match (op, part) {
                (OpId::Embedding, Part::Backward) => format!("B{j} embedding backward"),
                // The loss head runs forward and backward together from its norm.
                (OpId::FinalNorm, _) => format!("F{j} loss head"),
                (op, _) => format!("F{j} {}", op.name()),
            },
        }
    }
}

/// A layer operation's words in the trace, for the part of it a span covers.
fn layer_label(op: OpId, part: Part) -> String {
    let base = match op {
        OpId::InputNorm => "attention norm",
        OpId::QkvProj => "qkv",
        OpId::QkvSplit => "attention qkv split",
        OpId::Attention | OpId::AttentionCore => "attention core",
        OpId::AttentionOutProj => "attention projection",
        OpId::MlpNorm => "mlp norm",
        OpId::MlpUpProj => "mlp up",
        OpId::MlpActivation => "mlp activation",
        OpId::MlpDownProj => "mlp down",
        other => other.name(),
    };
    match (op, part) {
        (_, Part::Forward) => base.to_string(),
        // The split's backward merges the q, k, v gradients back into the fused one.
        (OpId::QkvSplit, Part::Backward) => "attention qkv gradient merge".to_string(),
        (_, Part::Backward) => format!("{base} backward"),
        (_, Part::ProbabilitiesRecompute) => "attention probabilities recompute".to_string(),
        (_, Part::BackwardProducts) => format!("{base} backward products"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WorkKind as K;

    /// Every span the engine marks, with the name and kind the trace and the step by kind
    /// showed before the spans were named by operation id: unchanged.
    #[test]
    fn the_engines_spans_keep_their_names_and_kinds() {
        let layer = |op, part| Span::Layer { l: 3, op, part };
        let batch = |op, part| Span::MicroBatch { j: 5, op, part };
        let (f, b) = (Part::Forward, Part::Backward);
        let expected = [
            (layer(OpId::InputNorm, f), "L3 attention norm", K::Norms),
            (layer(OpId::QkvProj, f), "L3 qkv", K::Linear),
            (
                layer(OpId::QkvSplit, f),
                "L3 attention qkv split",
                K::Attention,
            ),
            (layer(OpId::Attention, f), "L3 attention core", K::Attention),
            (
                layer(OpId::AttentionCore, f),
                "L3 attention core",
                K::Attention,
            ),
            (
                layer(OpId::AttentionOutProj, f),
                "L3 attention projection",
                K::Linear,
            ),
            (layer(OpId::MlpNorm, f), "L3 mlp norm", K::Norms),
            (layer(OpId::MlpUpProj, f), "L3 mlp up", K::Linear),
            (
                layer(OpId::MlpActivation, f),
                "L3 mlp activation",
                K::Activation,
            ),
            (layer(OpId::MlpDownProj, f), "L3 mlp down", K::Linear),
            (
                layer(OpId::MlpDownProj, b),
                "L3 mlp down backward",
                K::Linear,
            ),
            (
                layer(OpId::MlpActivation, b),
                "L3 mlp activation backward",
                K::Activation,
            ),
            (layer(OpId::MlpUpProj, b), "L3 mlp up backward", K::Linear),
            (layer(OpId::MlpNorm, b), "L3 mlp norm backward", K::Norms),
            (
                layer(OpId::AttentionOutProj, b),
                "L3 attention projection backward",
                K::Linear,
            ),
            (
                layer(OpId::Attention, b),
                "L3 attention core backward",
                K::Attention,
            ),
            (
                layer(OpId::AttentionCore, b),
                "L3 attention core backward",
                K::Attention,
            ),
            (
                layer(OpId::AttentionCore, Part::ProbabilitiesRecompute),
                "L3 attention probabilities recompute",
                K::Attention,
            ),
            (
                layer(OpId::AttentionCore, Part::BackwardProducts),
                "L3 attention core backward products",
                K::Attention,
            ),
            (
                layer(OpId::QkvSplit, b),
                "L3 attention qkv gradient merge",
                K::Attention,
            ),
            (layer(OpId::QkvProj, b), "L3 qkv backward", K::Linear),
            (
                layer(OpId::InputNorm, b),
                "L3 attention norm backward",
                K::Norms,
            ),
            (batch(OpId::Embedding, f), "F5 embedding", K::Embedding),
            (
                batch(OpId::Embedding, b),
                "B5 embedding backward",
                K::Embedding,
            ),
            (batch(OpId::FinalNorm, f), "F5 loss head", K::Head),
        ];
        for (span, name, kind) in expected {
            assert_eq!(
                (span.name().as_str(), span.kind()),
                (name, kind),
                "{span:?}"
            );
        }
    }
}
