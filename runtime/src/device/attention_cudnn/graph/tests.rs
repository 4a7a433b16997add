use super::*;

const BIG: Shape = Shape {
    b: 4,
    h: 32,
    g: 32,
    t: 4096,
    d: 128,
    x: Dtype::Bf16,
};

fn heads_grads(s: &Shape) -> (i64, i64, i64) {
    (s.h * s.t * s.d, s.t * s.d, s.d)
}

fn writes(op: &Op) -> Uid {
    match *op {
        Op::Matmul { c, .. } => c,
        Op::Pointwise { y, .. } | Op::Reduction { y, .. } | Op::Reshape { y, .. } => y,
    }
}

fn reads(op: &Op) -> Vec<Uid> {
    match *op {
        Op::Matmul { a, b, .. } => vec![a, b],
        Op::Pointwise { x, b, t, .. } => [Some(x), b, t].into_iter().flatten().collect(),
        Op::Reduction { x, .. } | Op::Reshape { x, .. } => vec![x],
    }
}

/// Every virtual tensor is written by one op and read by another; every tensor in memory
/// is either an input (never written) or an output (written once); scalars are inputs.
fn assert_dataflow(g: &Graph, outputs: &[Uid]) {
    for t in &g.tensors {
        let w = g.ops.iter().filter(|o| writes(o) == t.uid).count();
        let r = g.ops.iter().filter(|o| reads(o).contains(&t.uid)).count();
        if t.is_virtual {
            assert_eq!((w, r > 0), (1, true), "{}: written {w}×, read {r}×", t.name);
        } else if outputs.contains(&t.uid) {
            assert_eq!(w, 1, "{} is written {w}×", t.name);
        } else {
            assert_eq!((w, r > 0), (0, true), "{}: written {w}×, read {r}×", t.name);
        }
    }
    for t in &g.tensors {
        assert_eq!(t.is_virtual, t.uid >= FIRST_VIRTUAL, "{}", t.name);
    }
}

fn dims_of(g: &Graph, u: Uid) -> ([i64; 4], [i64; 4], Dtype) {
    let t = g.tensor(u).unwrap();
    (t.dims, t.strides, t.dtype)
}

#[test]
fn forward_reads_planc_buffers_where_they_are_and_writes_the_statistics() {
    let s = BIG;
    let l = Layout::planc(&s, heads_grads(&s));
    let g = forward(&s, &l, Flavor::Frontend);
    g.check().unwrap();
    assert_dataflow(&g, &[uid::O, uid::STATS]);
    let mut supplied = g.supplied();
    supplied.sort();
    assert_eq!(
        supplied,
        [
            uid::Q,
            uid::K,
            uid::V,
            uid::O,
            uid::STATS,
            uid::SCALE,
            uid::NEG_INF
        ]
    );
    let (h, t, d) = (32, 4096, 128);
    assert_eq!(
        dims_of(&g, uid::Q),
        ([4, h, t, d], [h * t * d, t * d, d, 1], Dtype::Bf16)
    );
    // K is given as Kᵀ: the last two dimensions and strides swapped.
    assert_eq!(
        dims_of(&g, uid::K),
        ([4, h, d, t], [h * t * d, t * d, 1, d], Dtype::Bf16)
    );
    // O straight into the merged [b, t, h·d] layout the projection reads.
    assert_eq!(
        dims_of(&g, uid::O),
        ([4, h, t, d], [t * h * d, d, h * d, 1], Dtype::Bf16)
    );
    assert_eq!(
        dims_of(&g, uid::STATS),
        ([4, h, t, 1], [h * t, t, 1, 1], Dtype::F32)
    );
    let matmuls: Vec<&Op> = g
        .ops
        .iter()
        .filter(|o| matches!(o, Op::Matmul { .. }))
        .collect();
    assert_eq!(matmuls.len(), 2);
    assert_eq!(
        *matmuls[0],
        Op::Matmul {
            a: uid::Q,
            b: uid::K,
            c: 100
        }
    );
    let Op::Matmul { a: p, b: v, c: o } = *matmuls[1] else {
        unreachable!()
    };
    assert_eq!((v, o), (uid::V, uid::O));
    // The probabilities reach the second product in the storage type.
    assert_eq!(g.tensor(p).unwrap().dtype, Dtype::Bf16);
    assert_eq!(g.ops.last(), Some(matmuls[1]));
}

#[test]
fn the_causal_mask_keeps_scores_whose_row_is_at_least_their_column() {
    let s = Shape { t: 128, ..BIG };
    let g = forward(&s, &Layout::planc(&s, heads_grads(&s)), Flavor::Frontend);
    let index = |axis| {
        g.ops.iter().find_map(|o| match *o {
            Op::Pointwise {
                mode: Pw::GenIndex(a),
                y,
                ..
            } if a == axis => Some(y),
            _ => None,
        })
    };
    let (row, col) = (index(2).unwrap(), index(3).unwrap());
    assert_eq!(g.tensor(row).unwrap().dtype, Dtype::I32);
    let keep = g
        .ops
        .iter()
        .find_map(|o| match *o {
            Op::Pointwise {
                mode: Pw::CmpGe,
                prec,
                x,
                b,
                y,
                ..
            } => {
                assert_eq!((x, b, prec), (row, Some(col), Dtype::Bool));
                Some(y)
            }
            _ => None,
        })
        .unwrap();
    let select = g.ops.iter().find(|o| {
        matches!(
            o,
            Op::Pointwise {
                mode: Pw::BinarySelect,
                ..
            }
        )
    });
    let Some(&Op::Pointwise { b, t, .. }) = select else {
        panic!("no select")
    };
    assert_eq!((b, t), (Some(uid::NEG_INF), Some(keep)));
}

#[test]
fn grouped_heads_are_read_once_through_strides_that_skip_their_copies() {
    // Llama 3.2 1B: 32 query heads, 8 key/value heads of 64.
    let s = Shape {
        b: 4,
        h: 32,
        g: 8,
        t: 2048,
        d: 64,
        x: Dtype::Bf16,
    };
    let l = Layout::planc(&s, heads_grads(&s));
    let (h, t, d) = (32, 2048, 64);
    assert_eq!(l.k, [h * t * d, 4 * t * d, d, 1]);
    assert_eq!(l.dk, [h * t * d, 4 * t * d, d, 1]);
    assert_eq!(l.dq, [h * t * d, t * d, d, 1]);
    let f = forward(&s, &l, Flavor::Frontend);
    f.check().unwrap();
    assert_eq!(
        dims_of(&f, uid::V),
        ([4, 8, t, d], [h * t * d, 4 * t * d, d, 1], Dtype::Bf16)
    );
    let b = backward(&s, &l, true, Flavor::Frontend);
    b.check().unwrap();
    assert_dataflow(&b, &[uid::DQ, uid::DK, uid::DV, uid::SOFTMAX_SUM]);
    // dK and dV: every query head's product, then its sum over the group of 4.
    for out in [uid::DK, uid::DV] {
        let red = b
            .ops
            .iter()
            .find_map(|o| match *o {
                Op::Reduction {
                    mode: Red::Add,
                    x,
                    y,
                } if y == out => Some(x),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no reduction into {out}"));
        let full = b.tensor(red).unwrap();
        assert_eq!((full.dims, full.is_virtual), ([4, 32, t, d], true));
        assert_eq!(dims_of(&b, out).0, [4, 8, t, d]);
    }
}

#[test]
fn multi_head_backward_writes_the_gradients_with_products_alone() {
    let s = Shape { t: 256, ..BIG };
    // The merged qkv gradient [b, t, 3·h·d]: what `Grads::qkv` writes into.
    let w = s.h * s.d;
    let l = Layout::planc(&s, (s.t * 3 * w, s.d, 3 * w));
    assert_eq!(l.dk, [s.t * 3 * w, s.d, 3 * w, 1]);
    let g = backward(&s, &l, true, Flavor::Frontend);
    g.check().unwrap();
    assert!(!g
        .ops
        .iter()
        .any(|o| matches!(o, Op::Reduction { y, .. } if *y == uid::DK || *y == uid::DV)));
    for out in [uid::DQ, uid::DK, uid::DV] {
        assert!(
            g.ops
                .iter()
                .any(|o| matches!(o, Op::Matmul { c, .. } if *c == out)),
            "{out}"
        );
    }
    assert_eq!(
        dims_of(&g, uid::SOFTMAX_SUM),
        ([4, 32, 256, 1], [32 * 256, 256, 1, 1], Dtype::F32)
    );
}

#[test]
fn only_the_nondeterministic_backward_accumulates_dq_in_fp32() {
    let s = Shape { t: 512, ..BIG };
    let l = Layout::planc(&s, heads_grads(&s));
    let det = backward(&s, &l, true, Flavor::Frontend);
    assert!(det.tensor(uid::DQ_ACCUM).is_none());
    assert!(det
        .ops
        .iter()
        .any(|o| matches!(o, Op::Matmul { c, .. } if *c == uid::DQ)));
    let fast = backward(&s, &l, false, Flavor::Frontend);
    fast.check().unwrap();
    assert_dataflow(
        &fast,
        &[uid::DQ, uid::DK, uid::DV, uid::SOFTMAX_SUM, uid::DQ_ACCUM],
    );
    let acc = fast.tensor(uid::DQ_ACCUM).unwrap();
    assert_eq!((acc.dtype, acc.is_virtual), (Dtype::F32, false));
    assert!(fast.ops.contains(&Op::Pointwise {
        mode: Pw::Identity,
        prec: Dtype::F32,
        x: uid::DQ_ACCUM,
        b: None,
        t: None,
        y: uid::DQ,
    }));
    let mut supplied = fast.supplied();
    supplied.sort();
    assert_eq!(supplied, (1..=14).collect::<Vec<Uid>>());
}

#[test]
fn the_check_names_the_operation_whose_shapes_disagree() {
    let s = Shape { t: 64, ..BIG };
    let mut g = forward(&s, &Layout::planc(&s, heads_grads(&s)), Flavor::Frontend);
    g.tensors.iter_mut().find(|t| t.uid == uid::V).unwrap().dims[2] = 65;
    let e = g.check().unwrap_err();
    assert!(e.contains("matmul") && e.contains("V#3"), "{e}");
    let mut g = forward(&s, &Layout::planc(&s, heads_grads(&s)), Flavor::Frontend);
    g.tensors.push(g.tensors[0].clone());
    assert!(g.check().unwrap_err().contains("twice"));
}

#[test]
fn the_printed_graph_lists_every_tensor_and_operation() {
    let s = Shape { t: 64, ..BIG };
    let g = backward(
        &s,
        &Layout::planc(&s, heads_grads(&s)),
        true,
        Flavor::Frontend,
    );
    let text = g.to_string();
    assert_eq!(text.lines().count(), g.tensors.len() + g.ops.len());
    assert!(text.contains("tensor   2 K (as Kᵀ)"), "{text}");
    assert!(
        text.contains("dims [4, 32, 128, 64] strides [262144, 8192, 1, 128] bf16 memory"),
        "{text}"
    );
    assert!(
        text.contains("op  0 pointwise Mul (dO#6, O#4) in f32"),
        "{text}"
    );
}

#[test]
fn the_samples_spelling_differs_only_in_the_types_and_strides_of_three_virtual_tensors() {
    let s = Shape {
        b: 2,
        h: 8,
        g: 2,
        t: 128,
        d: 64,
        x: Dtype::Bf16,
    };
    let l = Layout::planc(&s, heads_grads(&s));
    for det in [true, false] {
        let (a, b) = (
            backward(&s, &l, det, Flavor::Frontend),
            backward(&s, &l, det, Flavor::Sample),
        );
        b.check().unwrap();
        assert_eq!(a.ops, b.ops);
        let differ: Vec<&str> = a
            .tensors
            .iter()
            .zip(&b.tensors)
            .filter(|(x, y)| x != y)
            .map(|(x, y)| {
                assert_eq!((x.uid, x.dims, x.is_virtual), (y.uid, y.dims, true));
                x.name
            })
            .collect();
        assert_eq!(differ, ["dO·O", "row index", "column index", "K"]);
        let k = |g: &Graph| g.tensors.iter().find(|t| t.name == "K").unwrap().dtype;
        assert_eq!((k(&a), k(&b)), (Dtype::F32, Dtype::Bf16));
    }
    let (a, b) = (
        forward(&s, &l, Flavor::Frontend),
        forward(&s, &l, Flavor::Sample),
    );
    let index = |g: &Graph| {
        g.tensors
            .iter()
            .find(|t| t.name == "row index")
            .unwrap()
            .dtype
    };
    assert_eq!((index(&a), index(&b)), (Dtype::I32, Dtype::F32));
}
