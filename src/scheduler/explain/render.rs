//! `tether explain`'s text output: the decision first (winner, runner-up, margin; or what
//! blocks the pod), then the scores of the best nodes per plugin, then every rejection.

use std::fmt::Write;

use super::Explanation;

/// How many nodes' scores are shown side by side (JSON has them all).
pub const SCORE_COLUMNS: usize = 4;
/// How many node names a reason lists before "and N more".
const NAMES_SHOWN: usize = 8;

/// The explanation as text for a terminal.
/// The rejected nodes the FILTER table lists at most, unless [`View::wide`]: at 5,000 nodes
/// the table would be thousands of lines; BLOCKED BY counts them all.
pub const FILTER_NODES_SHOWN: usize = 20;

/// How much of an explanation the text shows.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Every rejected node in the FILTER table (`-o wide`).
    pub wide: bool,
    /// One node's verdicts and scores instead of the tables (`--node NAME`).
    pub node: Option<String>,
}

/// The explanation as text, as `tether explain` prints it by default.
pub fn text(e: &Explanation) -> String {
    text_with(e, &View::default())
}

/// The explanation as text, as much of it as `view` asks for.
pub fn text_with(e: &Explanation, view: &View) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Pod {} (schedulerName {}, {})",
        e.pod, e.scheduler_name, e.profile
    );
    if let Some(node) = &e.bound_to {
        let _ = writeln!(
            out,
            "Bound to {node}; explained as it was before its bind, on the cluster as it is now."
        );
    }
    if let Some(error) = &e.error {
        let _ = writeln!(out, "Error: {error}");
    }
    admission(&mut out, e);
    decision(&mut out, e);
    if let Some(node) = &view.node {
        one_node(&mut out, e, node);
        return out;
    }
    scores(&mut out, e);
    blocked(&mut out, e);
    held(&mut out, e);
    group(&mut out, e);
    hierarchy(&mut out, e);
    preemption(&mut out, e);
    rejections(&mut out, e, view.wide);
    out
}

/// One node: every Filter verdict on it, and its scores and rank when it was scored.
fn one_node(out: &mut String, e: &Explanation, name: &str) {
    let Some(filters) = e.filters.iter().find(|n| n.node == name) else {
        let _ = writeln!(
            out,
            "
NODE {name}: not among the {} nodes explained (a node of another name, or one the pod's placement leaves out)",
            e.nodes
        );
        return;
    };
    if let Some(v) = e.pre_filter.as_ref() {
        let _ = writeln!(
            out,
            "
NODE {name}: PreFilter {} rejected the pod on every node ({}): {}",
            v.plugin,
            v.code,
            v.reasons.join(", ")
        );
        return;
    }
    let verdict = if filters.left_out_by_pre_filter {
        "left out: PreFilter narrowed the search to other nodes"
    } else if filters.feasible {
        "feasible"
    } else {
        "rejected"
    };
    let _ = writeln!(
        out,
        "
NODE {name}: {verdict}"
    );
    if !filters.verdicts.is_empty() {
        let mut rows = vec![vec![
            "PLUGIN".to_string(),
            "VERDICT".to_string(),
            "REASON".to_string(),
        ]];
        for v in &filters.verdicts {
            rows.push(verdict_cells(v).to_vec());
        }
        table(out, &rows);
    }
    let Some(rank) = e.scores.iter().position(|s| s.node == name) else {
        return;
    };
    let scored = &e.scores[rank];
    let best = e.scores.first().map_or(scored.total, |s| s.total);
    let _ = writeln!(
        out,
        "
SCORE {name}: total {}, {} of {} feasible{}",
        scored.total,
        ordinal(rank + 1),
        e.scores.len(),
        if rank == 0 {
            String::new()
        } else {
            format!(", {} behind the best", best.saturating_sub(scored.total))
        }
    );
    let mut rows = vec![vec![
        "PLUGIN".to_string(),
        "WEIGHT".to_string(),
        "NORMALIZED (RAW)".to_string(),
    ]];
    for p in &scored.plugins {
        rows.push(vec![
            p.plugin.clone(),
            p.weight.to_string(),
            format!("{} ({})", p.normalized, p.raw),
        ]);
    }
    table(out, &rows);
}

/// 1st, 2nd, 3rd, 4th… 11th, 12th, 13th, 21st.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A gated pod: the scheduler does not try it until its gates go; what Kueue says of it.
fn admission(out: &mut String, e: &Explanation) {
    let Some(a) = &e.admission else {
        return;
    };
    let _ = writeln!(
        out,
        "Gated by {}: not tried until the gates are removed; below is what the scheduler would do then.",
        a.gates.join(", ")
    );
    if let Some(lq) = &a.local_queue {
        let cq = a
            .cluster_queue
            .as_deref()
            .map(|c| format!(" -> ClusterQueue {c}"))
            .unwrap_or_default();
        let _ = writeln!(out, "  Kueue: LocalQueue {lq}{cq}");
    }
    if let Some(w) = &a.workload {
        let _ = writeln!(out, "  Workload {w}");
    }
    for c in &a.conditions {
        let _ = writeln!(out, "    {c}");
    }
    for q in &a.quota {
        let _ = writeln!(out, "  quota {q}");
    }
    if let Some(n) = a.pending_workloads {
        let _ = writeln!(out, "  {n} workload(s) pending in the queue");
    }
    if let Some(p) = a.position_in_cluster_queue {
        let local = a
            .position_in_local_queue
            .map(|l| format!(", {l} in its LocalQueue"))
            .unwrap_or_default();
        let next = if p == 0 { " (admitted next)" } else { "" };
        let _ = writeln!(
            out,
            "  position {p} in the ClusterQueue{local}, counted from 0{next}"
        );
    }
    for u in &a.unread {
        let _ = writeln!(out, "  not shown: {u}");
    }
}

/// A gang's members tried whole: where each fits, or why not.
fn group(out: &mut String, e: &Explanation) {
    let Some(g) = &e.group else {
        return;
    };
    let _ = writeln!(out, "\nGANG {} ({})", g.pod_group, g.verdict);
    if !g.domains.is_empty() {
        let rows: Vec<Vec<String>> = std::iter::once(vec![
            "DOMAIN".into(),
            "NODES".into(),
            "SCORE".into(),
            "VERDICT".into(),
        ])
        .chain(g.domains.iter().map(|d| {
            vec![
                if d.chosen {
                    format!("{} (chosen)", d.domain)
                } else {
                    d.domain.clone()
                },
                d.nodes.to_string(),
                d.score.map_or_else(|| "-".into(), |s| s.to_string()),
                d.verdict.clone(),
            ]
        }))
        .collect();
        table(out, &rows);
    }
    let rows: Vec<Vec<String>> =
        std::iter::once(vec!["MEMBER".into(), "NODE".into(), "WHY NOT".into()])
            .chain(g.members.iter().map(|m| {
                vec![
                    m.pod.clone(),
                    m.node.clone().unwrap_or_else(|| "-".into()),
                    m.reason.clone().unwrap_or_default(),
                ]
            }))
            .collect();
    table(out, &rows);
}

/// A hierarchy's groups: what each needs and has, and what the last cycle said.
fn hierarchy(out: &mut String, e: &Explanation) {
    let Some(h) = &e.hierarchy else {
        return;
    };
    let state = if h.ready {
        "ready: tried whole"
    } else {
        "waiting: not every group it needs is ready"
    };
    let _ = writeln!(out, "\nHIERARCHY {} ({state})", h.root);
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "GROUP".into(),
        "NEEDS".into(),
        "HAS".into(),
        "KEY".into(),
        "LAST".into(),
    ])
    .chain(h.groups.iter().map(|g| {
        vec![
            format!("{}{}", "  ".repeat(g.depth.saturating_sub(1)), g.group),
            g.needs.to_string(),
            g.has.to_string(),
            g.topology_key.clone().unwrap_or_else(|| "-".into()),
            g.last.clone().unwrap_or_else(|| "-".into()),
        ]
    }))
    .collect();
    table(out, &rows);
}

/// The victims the group's last preemption chose, each unit and why.
fn preemption(out: &mut String, e: &Explanation) {
    let Some(p) = &e.preemption else {
        return;
    };
    let _ = writeln!(out, "\nLAST PREEMPTION by {} at {}", p.preemptor, p.at);
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "VICTIM".into(),
        "PODS".into(),
        "PRIORITY".into(),
        "WHY".into(),
    ])
    .chain(p.victims.iter().map(|v| {
        vec![
            v.unit.clone(),
            v.pods.len().to_string(),
            v.priority.to_string(),
            v.why.clone(),
        ]
    }))
    .collect();
    table(out, &rows);
}

/// The room held for workloads that are away, which pods of lower or equal priority count as
/// taken.
fn held(out: &mut String, e: &Explanation) {
    if e.held.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nROOM HELD (counted as taken for pods of lower or equal priority)"
    );
    for h in &e.held {
        let _ = writeln!(
            out,
            "  {} on {}: {} until {}",
            h.workload, h.node, h.requests, h.until
        );
    }
}

fn decision(out: &mut String, e: &Explanation) {
    let total = |node: &str| e.scores.iter().find(|s| s.node == node).map(|s| s.total);
    match (&e.winner, &e.runner_up) {
        (Some(winner), Some(second)) => {
            let _ = writeln!(
                out,
                "\nWinner: {winner} (total {}), runner-up {second} (total {}), margin {}.",
                total(winner).unwrap_or_default(),
                total(second).unwrap_or_default(),
                e.margin.unwrap_or_default()
            );
            if e.tied.len() > 1 {
                let _ = writeln!(
                    out,
                    "Tied at the best total: {} (the scheduler picks one of them at random).",
                    e.tied.join(", ")
                );
            }
        }
        (Some(winner), None) => {
            let _ = writeln!(
                out,
                "\nWinner: {winner} (total {}), the only feasible node.",
                total(winner).unwrap_or_default()
            );
        }
        _ => {}
    }
    if e.nominated
        && let Some(winner) = &e.winner
    {
        let _ = writeln!(
            out,
            "{winner} is the node the pod is nominated to (preemption made room there): the scheduler tries it first and takes it when it fits."
        );
    }
    if let Some(bound) = &e.bound_to
        && e.winner.as_ref().is_some_and(|w| w != bound)
    {
        let _ = writeln!(
            out,
            "The cluster changed since the bind: {bound} would not win now."
        );
    }
    if let Some(message) = &e.message {
        let _ = writeln!(out, "\nNo node fits: {message}");
    }
}

fn scores(out: &mut String, e: &Explanation) {
    if e.scores.is_empty() {
        return;
    }
    let shown: Vec<_> = e.scores.iter().take(SCORE_COLUMNS).collect();
    let _ = writeln!(
        out,
        "\nSCORES ({} feasible of {} nodes{}; each cell: normalized (raw), total = Σ normalized × weight)",
        e.scores.len(),
        e.nodes,
        if e.scores.len() > shown.len() {
            format!(", the best {} shown", shown.len())
        } else {
            String::new()
        }
    );
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["PLUGIN".to_string(), "WEIGHT".to_string()];
    header.extend(shown.iter().map(|s| s.node.clone()));
    rows.push(header);
    let plugins = shown.first().map(|s| s.plugins.len()).unwrap_or_default();
    for i in 0..plugins {
        let Some(first) = shown[0].plugins.get(i) else {
            continue;
        };
        let mut row = vec![first.plugin.clone(), first.weight.to_string()];
        for s in &shown {
            row.push(
                s.plugins
                    .get(i)
                    .map(|p| format!("{} ({})", p.normalized, p.raw))
                    .unwrap_or_default(),
            );
        }
        rows.push(row);
    }
    let mut total = vec!["TOTAL".to_string(), String::new()];
    total.extend(shown.iter().map(|s| s.total.to_string()));
    rows.push(total);
    table(out, &rows);
}

fn blocked(out: &mut String, e: &Explanation) {
    if e.blocked.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nBLOCKED BY");
    for b in &e.blocked {
        let _ = writeln!(
            out,
            "  {} {}  [{}]  {}",
            b.count,
            b.reason,
            b.plugin,
            names(&b.nodes)
        );
        for remedy in b.remedies.iter().take(NAMES_SHOWN) {
            let _ = writeln!(out, "      to change: {remedy}");
        }
        if b.remedies.len() > NAMES_SHOWN {
            let _ = writeln!(
                out,
                "      and {} more (-o json lists them all)",
                b.remedies.len() - NAMES_SHOWN
            );
        }
    }
}

fn rejections(out: &mut String, e: &Explanation, wide: bool) {
    if let Some(v) = &e.pre_filter {
        let _ = writeln!(
            out,
            "\nPreFilter {} rejected the pod on every node ({}): {}",
            v.plugin,
            v.code,
            v.reasons.join(", ")
        );
        return;
    }
    if e.rejected_omitted > 0 || e.scores_omitted > 0 {
        let _ = writeln!(
            out,
            "\n({} rejected nodes and {} scores left out of this answer to keep it small; --token-file asks the leader for all of them)",
            e.rejected_omitted, e.scores_omitted
        );
    }
    let rejected: Vec<_> = e.filters.iter().filter(|n| !n.feasible).collect();
    if rejected.is_empty() {
        if !e.filters.is_empty() || e.passing_omitted > 0 {
            let _ = writeln!(out, "\nEvery node passed every filter.");
        }
        return;
    }
    let _ = writeln!(
        out,
        "\nFILTER ({} of {} nodes rejected; * marks the reason the failure message counts)",
        rejected.len().saturating_add(e.rejected_omitted),
        e.filters
            .len()
            .saturating_add(e.passing_omitted)
            .saturating_add(e.rejected_omitted)
    );
    let mut rows = vec![vec![
        "NODE".to_string(),
        "PLUGIN".to_string(),
        "VERDICT".to_string(),
        "REASON".to_string(),
    ]];
    let shown = if wide {
        rejected.len()
    } else {
        FILTER_NODES_SHOWN
    };
    let more = rejected
        .len()
        .saturating_add(e.rejected_omitted)
        .saturating_sub(shown);
    for node in rejected.into_iter().take(shown) {
        if node.left_out_by_pre_filter {
            rows.push(vec![
                node.node.clone(),
                "PreFilter".into(),
                "left out".into(),
                "PreFilter narrowed the search to other nodes".into(),
            ]);
            continue;
        }
        let mut first = true;
        for v in node
            .verdicts
            .iter()
            .filter(|v| v.code != "Success" && v.code != "Skip")
        {
            let mut row = vec![if first {
                node.node.clone()
            } else {
                String::new()
            }];
            row.extend(verdict_cells(v));
            rows.push(row);
            first = false;
        }
    }
    table(out, &rows);
    if more > 0 {
        let counted = if e.blocked.is_empty() {
            ""
        } else {
            "BLOCKED BY counts them all; "
        };
        let _ = writeln!(
            out,
            "  and {more} more rejected nodes ({counted}-o wide lists them, --node NAME shows one)"
        );
    }
}

/// A Filter verdict's cells: the plugin (`*` when the failure message counts it), the code,
/// and the reasons with what would have to change.
fn verdict_cells(v: &super::FilterVerdict) -> [String; 3] {
    let mut reason = v.reasons.join(", ");
    if let Some(remedy) = &v.remedy {
        reason.push_str(&format!(" → {remedy}"));
    }
    [
        format!("{}{}", v.plugin, if v.counted { "*" } else { "" }),
        v.code.clone(),
        reason,
    ]
}

/// Names, the first few of them.
fn names(nodes: &[String]) -> String {
    if nodes.len() <= NAMES_SHOWN {
        nodes.join(", ")
    } else {
        format!(
            "{}, and {} more",
            nodes[..NAMES_SHOWN].join(", "),
            nodes.len() - NAMES_SHOWN
        )
    }
}

/// Columns padded to their widest cell; the last column is not padded.
pub fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        let _ = writeln!(out, "  {}", line.trim_end());
    }
}
