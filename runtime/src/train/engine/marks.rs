//! Where the engine's work is named: the trace's spans (with `--trace`, an event at each
//! operation's start, of its kind of work) and the name of the collectives a rank queues
//! (`device::trail`, with more than one rank).

use super::{Engine, Mark, Res};
use crate::device::trail;
use crate::error::RunError;
use crate::train::spans::Span;
use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::Attention;

impl Engine {
    /// Marks where a step's work outside the passes begins (traced runs), of `kind`.
    pub fn mark_step(&mut self, kind: WorkKind, name: &str) -> Res {
        self.mark(kind, || name.to_string())
    }

    /// Marks the end of a traced step's last span.
    pub fn mark_end(&mut self) -> Res {
        self.push_mark(None, || "end".to_string())
    }

    /// Names the operation that begins here, of `kind` (what the step by kind sums it
    /// under, the cost model's kind of the same work): a span of the trace (with `--trace`)
    /// and the plan's name for the collectives it queues (`trail`, with more than one rank).
    pub(super) fn mark(&mut self, kind: WorkKind, name: impl FnOnce() -> String) -> Res {
        self.push_mark(Some(kind), name)
    }

    /// Marks where `span`, an operation's span, begins: of its operation's kind.
    pub(super) fn mark_span(&mut self, span: Span) -> Res {
        self.mark(span.kind(), || span.name())
    }

    /// The attention core's operation: the fused kernel's, or the standard core's.
    pub(super) fn core_op(&self) -> OpId {
        match self.shape.attention {
            Attention::Flash => OpId::Attention,
            Attention::Standard => OpId::AttentionCore,
        }
    }

    pub(super) fn push_mark(
        &mut self,
        kind: Option<WorkKind>,
        name: impl FnOnce() -> String,
    ) -> Res {
        if self.marks.is_none() && !trail::is_on() {
            return Ok(());
        }
        let name = name();
        if trail::is_on() {
            trail::doing(name.clone());
        }
        if self.marks.is_some() {
            let e = self.gpu.event()?;
            if let Some(m) = self.marks.as_mut() {
                m.push(Mark {
                    name,
                    kind,
                    event: e,
                });
            }
        }
        Ok(())
    }

    /// Opens a span of its own for a tensor-parallel collective inside an operation's span,
    /// so the trace and the step by kind show it as communication, not as the product or
    /// norm around it; returns the operation's name, to go on with after (`resume_span`).
    pub(super) fn collective_span(
        &mut self,
        what: &str,
    ) -> Result<Option<(String, WorkKind)>, RunError> {
        let Some((current, kind)) = self
            .marks
            .as_ref()
            .and_then(|m| m.last())
            .map(|m| (m.name.clone(), m.kind.unwrap_or(WorkKind::Linear)))
        else {
            return Ok(None);
        };
        self.mark(WorkKind::Communication, || format!("{current}: {what}"))?;
        Ok(Some((current, kind)))
    }

    pub(super) fn resume_span(&mut self, span: Option<(String, WorkKind)>) -> Res {
        match span {
            Some((name, kind)) => self.mark(kind, || name),
            None => Ok(()),
        }
    }
}
