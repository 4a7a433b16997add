//! Collective and point-to-point times with an alpha-beta model.
//!
//! Bandwidth terms use the bus-bandwidth factors of nccl-tests (all-reduce moves
//! 2(n-1)/n of the buffer over each link, all-gather and reduce-scatter (n-1)/n); latency
//! terms count the algorithm's steps. Groups that span nodes are costed as NCCL would run
//! them: a flat ring limited by each GPU's share of the NICs, or hierarchically (reduce
//! inside the node, all-reduce across nodes, gather inside), whichever is faster.

use crate::plan::{Link, LinkKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

/// The fraction of a link's nominal bandwidth NCCL reaches on large messages.
pub fn link_efficiency(kind: LinkKind) -> f64 {
    match kind {
        LinkKind::Nvlink => 0.80, // ~235 of 300 GB/s all-reduce busbw on DGX A100
        LinkKind::Pcie => 0.85,   // catalog PCIe figures are already achievable rates
        LinkKind::Infiniband => 0.92, // ~23 of 25 GB/s per HDR NIC
        LinkKind::Roce => 0.85,
        LinkKind::Ethernet => 0.70,
    }
}

/// Where a group's ranks sit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupShape {
    pub size: u64,
    /// Ranks of the group in one node.
    pub per_node: u64,
}

/// The links a group can use: intra-node per GPU, and each GPU's share of the NICs.
#[derive(Clone, Debug, PartialEq)]
pub struct Fabric {
    pub intra: Link,
    pub inter: Option<Link>,
    /// Bytes/s of inter-node bandwidth per GPU when every GPU of a node sends at once.
    pub inter_per_gpu: f64,
}

fn bus_factor(c: Collective, n: f64) -> f64 {
    match c {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => (n - 1.0) / n,
    }
}

fn steps(c: Collective, n: f64) -> f64 {
    match c {
        Collective::AllReduce => 2.0 * (n - 1.0),
        _ => n - 1.0,
    }
}

fn ring(c: Collective, bytes: f64, n: u64, bw: f64, latency: f64) -> f64 {
    if n <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = n as f64;
    bus_factor(c, n) * bytes / bw + steps(c, n) * latency
}

/// Seconds for a collective over a buffer of `bytes` (the full, unsharded buffer).
pub fn collective_time(c: Collective, bytes: f64, g: GroupShape, fabric: &Fabric) -> f64 {
    if g.size <= 1 {
        return 0.0;
    }
    let intra_bw = fabric.intra.bandwidth * link_efficiency(fabric.intra.kind);
    if g.per_node >= g.size {
        return ring(c, bytes, g.size, intra_bw, fabric.intra.latency);
    }
    let inter = fabric
        .inter
        .as_ref()
        .expect("validated: multi-node clusters have inter_node");
    let inter_bw = fabric.inter_per_gpu;
    let nodes = g.size.div_ceil(g.per_node.max(1));
    // A flat ring is limited by its slowest hop, the NIC.
    let flat = ring(c, bytes, g.size, inter_bw, inter.latency);
    // Hierarchical: intra-node phase on the whole buffer, inter-node on a 1/per_node shard.
    let k = g.per_node.max(1);
    let hier = match c {
        Collective::AllReduce => {
            ring(
                Collective::ReduceScatter,
                bytes,
                k,
                intra_bw,
                fabric.intra.latency,
            ) + ring(
                Collective::AllReduce,
                bytes / k as f64,
                nodes,
                inter_bw,
                inter.latency,
            ) + ring(
                Collective::AllGather,
                bytes,
                k,
                intra_bw,
                fabric.intra.latency,
            )
        }
        Collective::AllToAll => flat,
        _ => {
            ring(c, bytes, k, intra_bw, fabric.intra.latency)
                + ring(c, bytes / k as f64, nodes, inter_bw, inter.latency)
        }
    };
    // NCCL's tree all-reduce: log-depth latency, same bandwidth bound across nodes.
    let tree = if c == Collective::AllReduce {
        let n = nodes as f64;
        2.0 * bytes / (k as f64) / inter_bw * (n - 1.0) / n
            + 2.0 * n.log2().ceil() * inter.latency
            + ring(
                Collective::ReduceScatter,
                bytes,
                k,
                intra_bw,
                fabric.intra.latency,
            )
            + ring(
                Collective::AllGather,
                bytes,
                k,
                intra_bw,
                fabric.intra.latency,
            )
    } else {
        f64::INFINITY
    };
    flat.min(hier).min(tree)
}

/// Seconds to send `bytes` from one GPU to another.
pub fn p2p_time(bytes: f64, crosses_nodes: bool, fabric: &Fabric) -> f64 {
    if bytes <= 0.0 {
        return 0.0;
    }
    if crosses_nodes {
        let inter = fabric
            .inter
            .as_ref()
            .expect("validated: multi-node clusters have inter_node");
        inter.latency + bytes / fabric.inter_per_gpu
    } else {
        fabric.intra.latency + bytes / (fabric.intra.bandwidth * link_efficiency(fabric.intra.kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric() -> Fabric {
        Fabric {
            intra: Link {
                kind: LinkKind::Nvlink,
                bandwidth: 300e9,
                latency: 0.0,
            },
            inter: Some(Link {
                kind: LinkKind::Infiniband,
                bandwidth: 25e9,
                latency: 0.0,
            }),
            inter_per_gpu: 25e9,
        }
    }

    #[test]
    fn ring_all_reduce_inside_a_node() {
        // 8 GPUs, 1 GB: 2·7/8 · 1e9 / (300e9·0.8) s.
        let t = collective_time(
            Collective::AllReduce,
            1e9,
            GroupShape {
                size: 8,
                per_node: 8,
            },
            &fabric(),
        );
        assert!((t - 1.75e9 / 240e9).abs() < 1e-12, "{t}");
    }

    #[test]
    fn across_nodes_the_nic_bounds_the_time() {
        // One GPU per node on 4 nodes: flat ring at 25 GB/s.
        let t = collective_time(
            Collective::AllGather,
            1e9,
            GroupShape {
                size: 4,
                per_node: 1,
            },
            &fabric(),
        );
        assert!((t - 0.75e9 / 25e9).abs() < 1e-9, "{t}");
    }

    #[test]
    fn hierarchy_beats_a_flat_ring_with_many_ranks_per_node() {
        let f = fabric();
        let g = GroupShape {
            size: 16,
            per_node: 8,
        };
        let t = collective_time(Collective::AllReduce, 1e9, g, &f);
        let flat = ring(Collective::AllReduce, 1e9, 16, 25e9, 0.0);
        assert!(t < flat / 4.0, "{t} vs {flat}");
    }
}
