//! Collective and point-to-point times with NCCL's own cost model.
//!
//! NCCL chooses, per call, the protocol its tuner predicts fastest (`src/graph/tuning.cc`,
//! NCCL 2.18–2.21): each protocol has a launch latency, a latency per ring step that
//! depends on the hop (NVLink, PCIe, network), and a share of the bus bandwidth it carries
//! (LL moves 4 bytes in 8, LL128 120 in 128, Simple all of it but with the longest steps).
//! So small messages pay latency, large ones bandwidth, and the cross-over is NCCL's. The
//! bandwidth terms use nccl-tests' bus factors (all-reduce moves 2(n−1)/n of the buffer over
//! each link, all-gather and reduce-scatter (n−1)/n).
//!
//! The bus bandwidth itself depends on the group: eight GPUs on NVSwitch reach ~80 % of the
//! link, two reach much less (the catalog's measured `pair_bus_bandwidth`), four are
//! interpolated between. Groups that span nodes are costed as NCCL would run them: a flat
//! ring limited by each GPU's share of the NICs, hierarchically (reduce inside the node,
//! all-reduce across nodes, gather inside), or as a tree, whichever is faster.

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
    /// Bus bandwidth two GPUs of a node reach (the GPU's catalog figure), if measured.
    pub pair_bus_bandwidth: Option<f64>,
    /// Before Ampere: NCCL caps the LL protocol lower.
    pub pre_ampere: bool,
    /// Measured collectives (`cluster.profile`): where it has the operation over exactly
    /// this many GPUs of a node, its bus-bandwidth curve by size replaces the model.
    pub profile: Option<std::sync::Arc<crate::profile::Profile>>,
}

impl Fabric {
    /// Bus bandwidth of a ring over `k` GPUs of one node, on large messages. With NVLink,
    /// eight GPUs reach the link's efficiency; a pair reaches its measured figure (NCCL
    /// drives every channel to the one peer); between them, interpolated on log₂ k, the
    /// number of ring neighbours doubling with each step.
    pub fn intra_bus_bandwidth(&self, k: u64) -> f64 {
        let full = self.intra.bandwidth * link_efficiency(self.intra.kind);
        match self.pair_bus_bandwidth {
            Some(pair) if self.intra.kind == LinkKind::Nvlink && k < 8 => {
                let pair = pair.min(full);
                let f = ((k.max(2) as f64).log2() - 1.0) / 2.0;
                pair + (full - pair) * f
            }
            _ => full,
        }
    }
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

/// NCCL's protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Ll,
    Ll128,
    Simple,
}

const PROTOCOLS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

/// The kind of hop a ring step crosses, as NCCL's latency table distinguishes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hop {
    Nvlink,
    Pcie,
    Net,
}

impl Hop {
    fn of(kind: LinkKind) -> Hop {
        match kind {
            LinkKind::Nvlink => Hop::Nvlink,
            LinkKind::Pcie => Hop::Pcie,
            _ => Hop::Net,
        }
    }
}

/// NCCL's latency tables (`baseLat`, `hwLat` in tuning.cc), in seconds.
impl Protocol {
    fn base(self, tree: bool) -> f64 {
        1e-6 * match (self, tree) {
            (Protocol::Ll, false) => 6.6,
            (Protocol::Ll, true) => 6.8,
            (Protocol::Ll128, _) => 14.0,
            (Protocol::Simple, false) => 8.4,
            (Protocol::Simple, true) => 0.0,
        }
    }

    fn step(self, hop: Hop, tree: bool) -> f64 {
        1e-6 * match (hop, tree, self) {
            (Hop::Nvlink, false, Protocol::Ll) => 0.6,
            (Hop::Nvlink, false, Protocol::Ll128) => 1.9,
            (Hop::Nvlink, false, Protocol::Simple) => 3.4,
            (Hop::Pcie, false, Protocol::Ll) => 1.0,
            (Hop::Pcie, false, Protocol::Ll128) => 2.5,
            (Hop::Pcie, false, Protocol::Simple) => 5.7,
            (Hop::Net, false, Protocol::Ll) => 2.7,
            (Hop::Net, false, Protocol::Ll128) => 4.0,
            (Hop::Net, false, Protocol::Simple) => 14.0,
            (Hop::Nvlink, true, Protocol::Ll) => 0.6,
            (Hop::Nvlink, true, Protocol::Ll128) => 1.25,
            (Hop::Pcie, true, Protocol::Ll) => 1.0,
            (Hop::Pcie, true, Protocol::Ll128) => 1.9,
            (Hop::Net, true, Protocol::Ll) => 5.0,
            (Hop::Net, true, Protocol::Ll128) => 8.5,
            (_, true, Protocol::Simple) => 28.0,
        }
    }
}

/// One ring (or tree) as NCCL runs it: its Simple-protocol bus bandwidth and the hops its
/// steps cross.
struct Ring {
    ranks: u64,
    nodes: u64,
    bus_bw: f64,
    intra: Hop,
    /// The network's own latency (the plan's `inter_node.latency`), added to NCCL's per-step
    /// software latency on every step that leaves the node.
    net_latency: f64,
    /// LL128 runs only where NCCL enables it: on NVLink (Volta and newer).
    ll128: bool,
    /// NCCL's cap on LL bandwidth (`llMaxBws`): per GPU generation inside a node, per CPU
    /// across nodes.
    ll_cap: f64,
}

impl Ring {
    fn inside(fabric: &Fabric, k: u64) -> Ring {
        Ring {
            ranks: k,
            nodes: 1,
            bus_bw: fabric.intra_bus_bandwidth(k),
            intra: Hop::of(fabric.intra.kind),
            net_latency: 0.0,
            ll128: fabric.intra.kind == LinkKind::Nvlink,
            ll_cap: if fabric.pre_ampere { 39.0e9 } else { 87.7e9 },
        }
    }

    fn across(fabric: &Fabric, ranks: u64, nodes: u64, bus_bw: f64, net_latency: f64) -> Ring {
        Ring {
            ranks,
            nodes,
            bus_bw,
            intra: Hop::of(fabric.intra.kind),
            net_latency,
            ll128: fabric.intra.kind == LinkKind::Nvlink,
            ll_cap: if nodes <= 2 { 39.0e9 } else { 20.4e9 },
        }
    }

    /// Bus bandwidth protocol `p` carries.
    fn bandwidth(&self, c: Collective, p: Protocol) -> Option<f64> {
        match p {
            Protocol::Simple => Some(self.bus_bw),
            Protocol::Ll128 if self.ll128 => {
                let one_per_node = self.ranks <= self.nodes;
                Some(self.bus_bw * if one_per_node { 0.7 } else { 0.92 })
            }
            Protocol::Ll128 => None,
            Protocol::Ll => {
                let share = if self.nodes > 1 || c == Collective::AllReduce {
                    0.25
                } else {
                    1.0 / 3.0
                };
                Some((self.bus_bw * share).min(self.ll_cap))
            }
        }
    }

    /// Seconds for collective `c` over `bytes` (the full buffer): the fastest protocol.
    fn time(&self, c: Collective, bytes: f64) -> f64 {
        if self.ranks <= 1 || bytes <= 0.0 {
            return 0.0;
        }
        let n = self.ranks as f64;
        let total = steps(c, n);
        let inter = if self.nodes > 1 {
            match c {
                Collective::AllReduce => 2.0 * self.nodes as f64,
                _ => self.nodes as f64 - 1.0,
            }
            .min(total)
        } else {
            0.0
        };
        PROTOCOLS
            .iter()
            .filter_map(|&p| {
                let bw = self.bandwidth(c, p)?;
                let latency = p.base(false)
                    + (total - inter) * p.step(self.intra, false)
                    + inter * (p.step(Hop::Net, false) + self.net_latency);
                Some(latency + bus_factor(c, n) * bytes / bw)
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// Seconds for a collective over a buffer of `bytes` (the full, unsharded buffer; for an
/// all-to-all, the buffer each rank sends: see [`all_to_all_time`]).
pub fn collective_time(c: Collective, bytes: f64, g: GroupShape, fabric: &Fabric) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    if c == Collective::AllToAll {
        return all_to_all_time(bytes, g, fabric);
    }
    if g.per_node >= g.size {
        let op = match c {
            Collective::AllReduce => Some("AllReduce"),
            Collective::AllGather => Some("AllGather"),
            Collective::ReduceScatter => Some("ReduceScatter"),
            Collective::AllToAll => None,
        };
        let measured = fabric
            .profile
            .as_deref()
            .zip(op)
            .and_then(|(p, op)| p.bus_bandwidth(op, g.size as usize, bytes));
        if let Some(bus) = measured {
            return bytes * bus_factor(c, g.size as f64) / bus;
        }
        return Ring::inside(fabric, g.size).time(c, bytes);
    }
    let inter = fabric
        .inter
        .as_ref()
        .expect("validated: multi-node clusters have inter_node");
    let inter_bw = fabric.inter_per_gpu;
    let k = g.per_node.max(1);
    let nodes = g.size.div_ceil(k);
    // A flat ring is limited by its slowest hop, the NIC.
    let flat = Ring::across(fabric, g.size, nodes, inter_bw, inter.latency).time(c, bytes);
    // Hierarchical: intra-node phase on the whole buffer, inter-node on a 1/k shard.
    let local = Ring::inside(fabric, k);
    let across = Ring::across(fabric, nodes, nodes, inter_bw, inter.latency);
    let hier = match c {
        Collective::AllReduce => {
            local.time(Collective::ReduceScatter, bytes)
                + across.time(Collective::AllReduce, bytes / k as f64)
                + local.time(Collective::AllGather, bytes)
        }
        Collective::AllToAll => flat,
        _ => local.time(c, bytes) + across.time(c, bytes / k as f64),
    };
    // NCCL's tree all-reduce: log-depth latency, the same bandwidth bound across nodes at
    // 92 % (its Simple tree), reduce-scatter and all-gather inside the node around it.
    let tree = if c == Collective::AllReduce {
        let n = nodes as f64;
        let levels = n.log2().ceil();
        let shard = bytes / k as f64;
        let inside =
            local.time(Collective::ReduceScatter, bytes) + local.time(Collective::AllGather, bytes);
        PROTOCOLS
            .iter()
            .filter(|&&p| p != Protocol::Ll128 || fabric.intra.kind == LinkKind::Nvlink)
            .map(|&p| {
                let share = match p {
                    Protocol::Ll => 1.0 / 3.8,
                    Protocol::Ll128 => 120.0 / 128.0,
                    Protocol::Simple => 0.92,
                };
                let latency =
                    p.base(true) + 2.0 * levels * (p.step(Hop::Net, true) + inter.latency);
                latency + 2.0 * shard * (n - 1.0) / n / (inter_bw * share)
            })
            .fold(f64::INFINITY, f64::min)
            + inside
    } else {
        f64::INFINITY
    };
    flat.min(hier).min(tree)
}

/// Seconds for an all-to-all in which every rank of group `g` sends `bytes`, its own
/// buffer, an equal share to each rank (its own share staying put): NCCL runs it as a send
/// and a receive to every peer in one group call (`ncclSend`/`ncclRecv`), all peers at once.
/// It has no ring: the shares for the ranks in the node cross NVLink at the bus bandwidth
/// of that many GPUs, the shares for ranks in other nodes the NICs at this GPU's share of
/// them (every GPU of the node exchanging at once), and the slower of the two paths sets
/// the time. Latency: NCCL's launch and a Simple-protocol step per peer (p2p operations run
/// Simple above `NCCL_P2P_LL_THRESHOLD`, 16 KiB), plus the network's own for each peer
/// across nodes. Inside one node of eight this is nccl-tests' `alltoall_perf` model: the
/// bus bandwidth carries (n − 1)/n of the buffer.
pub fn all_to_all_time(bytes: f64, g: GroupShape, fabric: &Fabric) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = g.size as f64;
    let k = g.per_node.clamp(1, g.size);
    let share = bytes / n;
    let intra_peers = (k - 1) as f64;
    let inter_peers = (g.size - k) as f64;
    let hop = Hop::of(fabric.intra.kind);
    let simple = Protocol::Simple;
    let mut latency = simple.base(false) + intra_peers * simple.step(hop, false);
    let intra = if k > 1 {
        intra_peers * share / fabric.intra_bus_bandwidth(k)
    } else {
        0.0
    };
    let inter = if inter_peers > 0.0 {
        let link = fabric
            .inter
            .as_ref()
            .expect("validated: multi-node clusters have inter_node");
        latency += inter_peers * (simple.step(Hop::Net, false) + link.latency);
        inter_peers * share / fabric.inter_per_gpu
    } else {
        0.0
    };
    latency + intra.max(inter)
}

/// Seconds to send `bytes` from one GPU to another: one peer, so inside a node at the
/// pair's bandwidth where the catalog has it.
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
        // Measured where the profile timed send/receive between two GPUs (latency included).
        let measured = fabric
            .profile
            .as_deref()
            .and_then(|p| p.bus_bandwidth(crate::profile::SEND_RECV, 2, bytes));
        match measured {
            Some(bus) => bytes / bus,
            None => fabric.intra.latency + bytes / fabric.intra_bus_bandwidth(2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric() -> Fabric {
        Fabric {
            profile: None,
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
            pair_bus_bandwidth: None,
            pre_ampere: false,
        }
    }

    fn inside(size: u64) -> GroupShape {
        GroupShape {
            size,
            per_node: size,
        }
    }

    #[test]
    fn a_large_all_reduce_inside_a_node_runs_at_the_bus_bandwidth() {
        // 8 GPUs, 1 GB: 2·7/8 · 1e9 / (300e9·0.8) s, plus Simple's 8.4 + 14 × 3.4 µs.
        let t = collective_time(Collective::AllReduce, 1e9, inside(8), &fabric());
        let want = 1.75e9 / 240e9 + 8.4e-6 + 14.0 * 3.4e-6;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
    }

    #[test]
    fn small_messages_pay_latency_and_take_the_low_latency_protocol() {
        let f = fabric();
        // 8 bytes: LL's 6.6 + 14 × 0.6 µs, as NCCL predicts its own small all-reduce.
        let t = collective_time(Collective::AllReduce, 8.0, inside(8), &f);
        assert!((t - 15.0e-6).abs() < 1e-8, "{t}");
        // The effective bus bandwidth grows with the message: ~half the peak at a few MB.
        let busbw = |bytes: f64| {
            1.75 * bytes / collective_time(Collective::AllReduce, bytes, inside(8), &f)
        };
        assert!(busbw(1e6) < 0.5 * 240e9, "{}", busbw(1e6));
        assert!(busbw(64e6) > 0.75 * 240e9 && busbw(64e6) < 0.95 * 240e9);
        assert!(busbw(4e9) > 0.99 * 240e9);
        let sizes = [1e3, 1e5, 1e6, 1e7, 1e8, 1e9];
        assert!(sizes.windows(2).all(|w| busbw(w[0]) < busbw(w[1])));
    }

    #[test]
    fn two_gpus_reach_their_measured_pair_bandwidth_and_four_lie_between() {
        // H200 NVLink: 450 GB/s, 80 % for eight GPUs; two measured at 210 GB/s.
        let f = Fabric {
            profile: None,
            intra: Link {
                kind: LinkKind::Nvlink,
                bandwidth: 450e9,
                latency: 2e-6,
            },
            pair_bus_bandwidth: Some(210e9),
            ..fabric()
        };
        assert_eq!(f.intra_bus_bandwidth(2), 210e9);
        assert_eq!(f.intra_bus_bandwidth(8), 360e9);
        assert!((f.intra_bus_bandwidth(4) - 285e9).abs() < 1.0);
        // A 134 MB all-gather over two: 67 MB at 210 GB/s and Simple's 8.4 + 3.4 µs.
        let t = collective_time(Collective::AllGather, 134e6, inside(2), &f);
        let want = 67e6 / 210e9 + 11.8e-6;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        // Without a measured pair figure, every group size gets the link's efficiency.
        assert_eq!(fabric().intra_bus_bandwidth(2), 240e9);
        // A pipeline send goes to one peer.
        assert!((p2p_time(210e6, false, &f) - (2e-6 + 1e-3)).abs() < 1e-12);
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
        let bandwidth = 0.75e9 / 25e9;
        assert!(t > bandwidth && t < bandwidth * 1.01, "{t}");
    }

    #[test]
    fn an_all_to_all_moves_each_ranks_own_buffer_and_the_nics_carry_only_other_nodes_shares() {
        let f = fabric();
        let b = 64e6; // what each rank sends, its own share included
                      // Eight GPUs of a node: 7/8 of the buffer over NVLink at 240 GB/s, Simple's launch
                      // and a step per peer; not eight buffers' worth (an all-gather's output).
        let t = collective_time(Collective::AllToAll, b, inside(8), &f);
        let want = 8.4e-6 + 7.0 * 3.4e-6 + 7.0 / 8.0 * b / 240e9;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        // Eight ranks, two per node on four nodes: one share over NVLink, six over the NIC
        // (25 GB/s): the NIC's part sets the time.
        let g = GroupShape {
            size: 8,
            per_node: 2,
        };
        let t = collective_time(Collective::AllToAll, b, g, &f);
        let latency = 8.4e-6 + 3.4e-6 + 6.0 * 14.0e-6;
        let want = latency + 6.0 / 8.0 * b / 25e9;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        // A flat ring through the NIC would charge all seven shares.
        assert!(t < 7.0 / 8.0 * b / 25e9);
        // One rank per node: every share but its own crosses the NIC.
        let spread = GroupShape {
            size: 8,
            per_node: 1,
        };
        let t = collective_time(Collective::AllToAll, b, spread, &f);
        assert!((t - (8.4e-6 + 7.0 * 14.0e-6 + 7.0 / 8.0 * b / 25e9)).abs() < 1e-12);
    }

    #[test]
    fn hierarchy_beats_a_flat_ring_with_many_ranks_per_node() {
        let f = fabric();
        let g = GroupShape {
            size: 16,
            per_node: 8,
        };
        let t = collective_time(Collective::AllReduce, 1e9, g, &f);
        let flat = Ring::across(&f, 16, 2, 25e9, 0.0).time(Collective::AllReduce, 1e9);
        assert!(t < flat / 4.0, "{t} vs {flat}");
    }
}
