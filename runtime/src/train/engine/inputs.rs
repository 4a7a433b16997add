//! A micro-batch's inputs: its tokens, targets and the embedding gradient's token order,
//! prepared on the host (`host_batch`, while the GPU runs the step before), fed into an
//! activation set from the host or from the copies staged in device memory for a replayed
//! step (`stage`).

use super::{Engine, Res};
use crate::device::cuda::Buf;

impl Engine {
    /// A micro-batch's tokens and targets as `forward` copies them to the GPU, with the
    /// embedding gradient's token order. Host work: the step loop prepares the next step's
    /// first micro-batch while the GPU still runs this one, so a step does not start with
    /// the GPU waiting for the host.
    pub fn host_batch(&self, chunk: usize, inputs: &[u32], targets: &[u32]) -> HostBatch {
        let d = &self.shape.dims;
        let (first, last) = self.ends(chunk);
        let as_i32 = |x: &[u32]| x.iter().map(|&t| t as i32).collect::<Vec<i32>>();
        // The embedding gradient sums each token's positions in a fixed order; a
        // tensor-parallel rank sums the tokens of its rows of the table only: tokens
        // [v0, v0 + vocab) (vocabulary-parallel under tensor parallelism).
        let (uniq, start, pos) = if first {
            token_order(
                &inputs[..self.rows()],
                self.shape.tp_rank * d.vocab,
                d.vocab,
            )
        } else {
            Default::default()
        };
        HostBatch {
            tokens: if first { as_i32(inputs) } else { Vec::new() },
            targets: if last { as_i32(targets) } else { Vec::new() },
            uniq,
            start,
            pos,
        }
    }

    /// Copies the step's micro-batches (`(j, batch)`: micro-batch `j`'s) into device
    /// memory of their own, in one upload, for a step whose forwards read them with
    /// `Input::Staged` (a replayed CUDA graph cannot read the host). Allocates on first
    /// use: call it outside a graph capture.
    pub fn stage(&mut self, batches: &[(usize, HostBatch)]) -> Res {
        let n = self.rows();
        // Each micro-batch's tokens, token order (uniq, start, pos) and targets, in a row.
        let lens = [n, n, n + 1, n, n];
        let per: usize = lens.iter().sum();
        let count = batches.iter().map(|(j, _)| j + 1).max().unwrap_or(0);
        if self.staged.len() < count {
            let all = self.gpu.alloc(count * per * 4)?;
            self.memory.scratch += all.bytes;
            self.staged = (0..count)
                .map(|j| {
                    let mut at = j * per;
                    let mut next = |len: usize| {
                        let b = Buf {
                            bytes: len * 4,
                            ..all.at(at, 4)
                        };
                        at += len;
                        b
                    };
                    Staged {
                        tokens: next(lens[0]),
                        uniq: next(lens[1]),
                        start: next(lens[2]),
                        pos: next(lens[3]),
                        targets: next(lens[4]),
                    }
                })
                .collect();
        }
        let mut host = vec![0i32; count * per];
        for (j, b) in batches {
            let mut at = j * per;
            for (part, len) in [&b.tokens, &b.uniq, &b.start, &b.pos, &b.targets]
                .into_iter()
                .zip(lens)
            {
                host[at..at + part.len()].copy_from_slice(part);
                at += len;
            }
        }
        let first = self.staged[0].tokens;
        self.gpu.upload(
            Buf {
                bytes: count * per * 4,
                ..first
            },
            &host,
        )
    }

    /// Micro-batch `j`'s tokens and token order into activation set `set`, and its targets
    /// where this chunk ends in the loss head: uploaded from the host, or copied from where
    /// `stage` put them.
    pub(super) fn feed(
        &mut self,
        set: usize,
        j: usize,
        (first, last): (bool, bool),
        input: Input,
    ) -> Res {
        let st = &self.sets[set];
        let mut pairs = Vec::new();
        if first {
            pairs.extend([(st.tokens, 0), (st.uniq, 1), (st.start, 2), (st.pos, 3)]);
        }
        if last {
            pairs.push((self.s.targets, 4));
        }
        match input {
            Input::Host(batch) => {
                let host = [
                    &batch.tokens[..],
                    &batch.uniq[..],
                    &batch.start[..],
                    &batch.pos[..],
                    &batch.targets[..],
                ];
                let copies: Vec<(Buf, &[i32])> = pairs.iter().map(|&(b, k)| (b, host[k])).collect();
                self.gpu.upload_all(&copies)
            }
            Input::Staged => {
                let sg = self.staged[j];
                let dev = [sg.tokens, sg.uniq, sg.start, sg.pos, sg.targets];
                for (b, k) in pairs {
                    self.gpu.copy(b, dev[k], b.bytes.min(dev[k].bytes))?;
                }
                Ok(())
            }
        }
    }
}

/// Where a forward pass takes its micro-batch from: the host (uploaded as the pass is
/// queued) or the device copy `Engine::stage` made before a replayed step.
#[derive(Clone, Copy)]
pub enum Input<'a> {
    Host(&'a HostBatch),
    Staged,
}

/// A micro-batch's inputs staged in device memory (`Engine::stage`), each buffer the size
/// of its activation set's.
#[derive(Clone, Copy)]
pub(super) struct Staged {
    tokens: Buf,
    uniq: Buf,
    start: Buf,
    pos: Buf,
    targets: Buf,
}

/// A micro-batch prepared on the host for `Engine::forward` (`Engine::host_batch`): the
/// tokens (first stage), the targets (last stage) and the embedding gradient's token order.
#[derive(Debug, Default)]
pub struct HostBatch {
    tokens: Vec<i32>,
    targets: Vec<i32>,
    uniq: Vec<i32>,
    start: Vec<i32>,
    pos: Vec<i32>,
}

/// The positions of each token of this rank's vocabulary rows `[v0, v0 + vocab)`, grouped
/// by token in token order, positions ascending within a token: the rows that occur
/// (`uniq`, relative to v0), where each one's positions start in `pos` (`start`, one more
/// at the end), and the positions. A counting sort: the host prepares this while the GPU
/// waits at the start of a step, and a comparison sort of a micro-batch's tokens took
/// most of that wait.
///
/// `uniq` and `start` are padded to one entry per input (and one more), the padding an
/// empty range at the end: the embedding gradient takes a block per input whatever the
/// number of distinct tokens, so its grid is the same for every batch (a replayed CUDA
/// graph fixes it), and its blocks past the distinct tokens do nothing.
pub fn token_order(inputs: &[u32], v0: usize, vocab: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut count = vec![0u32; vocab + 1];
    for &t in inputs {
        let t = t as usize;
        if (v0..v0 + vocab).contains(&t) {
            count[t - v0 + 1] += 1;
        }
    }
    for r in 0..vocab {
        count[r + 1] += count[r];
    }
    let mut pos = vec![0i32; count[vocab] as usize];
    let mut next = count.clone();
    for (i, &t) in inputs.iter().enumerate() {
        let t = t as usize;
        if (v0..v0 + vocab).contains(&t) {
            pos[next[t - v0] as usize] = i as i32;
            next[t - v0] += 1;
        }
    }
    let (mut uniq, mut start) = (Vec::new(), Vec::new());
    for r in 0..vocab {
        if count[r + 1] > count[r] {
            uniq.push(r as i32);
            start.push(count[r] as i32);
        }
    }
    start.push(pos.len() as i32);
    uniq.resize(inputs.len(), 0);
    start.resize(inputs.len() + 1, pos.len() as i32);
    (uniq, start, pos)
}

#[cfg(test)]
mod tests {
    use super::token_order;

    #[test]
    fn token_order_groups_positions_by_token_as_a_sort_would() {
        let inputs: Vec<u32> = (0..5000u32).map(|i| (i * 7919 + i / 3) % 613).collect();
        for (v0, vocab) in [(0usize, 613usize), (200, 200), (0, 100)] {
            let (uniq, start, pos) = token_order(&inputs, v0, vocab);
            // The comparison sort it replaces.
            let mut order: Vec<u32> = (0..inputs.len() as u32)
                .filter(|&i| (v0..v0 + vocab).contains(&(inputs[i as usize] as usize)))
                .collect();
            order.sort_by_key(|&i| (inputs[i as usize], i));
            let want: Vec<i32> = order.iter().map(|&i| i as i32).collect();
            assert_eq!(pos, want);
            assert_eq!(uniq.len(), inputs.len());
            assert_eq!(start.len(), uniq.len() + 1);
            // Every distinct token's range, then empty ranges only (the padding).
            let distinct = start.windows(2).take_while(|w| w[1] > w[0]).count();
            let mut rows: Vec<u32> = inputs[..].to_vec();
            rows.retain(|&t| (v0..v0 + vocab).contains(&(t as usize)));
            rows.sort();
            rows.dedup();
            assert_eq!(distinct, rows.len(), "v0 {v0} vocab {vocab}");
            assert!(start[distinct..].iter().all(|&s| s == pos.len() as i32));
            for (k, &row) in uniq[..distinct].iter().enumerate() {
                for &p in &pos[start[k] as usize..start[k + 1] as usize] {
                    assert_eq!(inputs[p as usize] as usize, row as usize + v0);
                }
            }
        }
    }
}
