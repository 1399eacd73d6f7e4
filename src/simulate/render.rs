//! `tether simulate`'s text output: the verdict on the candidate, then each placement that
//! would change with why, then how many stay.

use std::fmt::Write;

use super::{Decision, Placement, Simulation};
use crate::scheduler::explain::render::table;

pub fn text(s: &Simulation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "SchedulingProfile {} compiles and would serve schedulerName {} ({}).",
        s.profile,
        s.scheduler_name,
        match &s.live_profile {
            Some(live) => format!("now served by {live}"),
            None => "no profile serves it now".to_string(),
        }
    );
    let gated = s.pending.iter().filter(|p| p.gated).count();
    let _ = writeln!(
        out,
        "Placed {} pending pods{} and {} bound pods on {} nodes: {} would land differently.",
        s.pending.len(),
        if gated > 0 {
            format!(" ({gated} gated)")
        } else {
            String::new()
        },
        s.bound.len(),
        s.nodes,
        s.changes()
    );
    section(
        &mut out,
        "PENDING (in the order they were placed)",
        &s.pending,
    );
    section(&mut out, "BOUND (newest first)", &s.bound);
    out
}

fn section(out: &mut String, title: &str, placements: &[Placement]) {
    if placements.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}");
    let mut rows = vec![vec![
        "POD".to_string(),
        "LIVE".to_string(),
        "CANDIDATE".to_string(),
        String::new(),
    ]];
    for p in placements {
        let mut pod = p.pod.clone();
        if p.gated {
            pod.push_str(" (gated)");
        }
        if let Some(node) = &p.bound_to {
            pod.push_str(&format!(" (on {node})"));
        }
        rows.push(vec![
            pod,
            cell(&p.live),
            cell(&p.candidate),
            if p.differs { "changes" } else { "" }.to_string(),
        ]);
    }
    table(out, &rows);
    for p in placements.iter().filter(|p| p.differs) {
        let _ = writeln!(out, "  {}: why", p.pod);
        for line in &p.why {
            let _ = writeln!(out, "      {line}");
        }
    }
}

fn cell(d: &Decision) -> String {
    match (&d.node, d.total) {
        (Some(node), Some(total)) if d.tied.len() > 1 => {
            format!("{node} ({total}, tied with {})", d.tied.len() - 1)
        }
        (Some(node), Some(total)) => format!("{node} ({total})"),
        (Some(node), None) => node.clone(),
        (None, _) => "no node".to_string(),
    }
}
