//! `quorumlock status` of a semaphore (its permits) or of a reader-writer
//! lock (its writer and readers): what each node holds, and what a quorum
//! of them confirms, as the library's inspection found it. Never full
//! tokens.

use quorumlock::{Claim, Claimed, Inspection, ResourceKind, Stored, Verdict};

use crate::status_nodes::{Waits, held_otherwise, listed, print_nodes, unreachable};

/// The claims a quorum confirms, of the kind `what` picks.
fn confirmed(inspection: &Inspection, what: impl Fn(Claimed) -> bool) -> Vec<&Claim> {
    inspection.confirmed().filter(|c| what(c.what())).collect()
}

/// A semaphore of `permits` permits, or of as many as the nodes keep.
pub(crate) fn semaphore(inspection: &Inspection, waits: Waits<'_>, permits: Option<u32>) {
    let (quorum, nodes) = (inspection.quorum(), inspection.nodes().len());
    let count = permits.or(inspection.permit_count());
    let of = count
        .map(|c| c.to_string())
        .unwrap_or_else(|| "?".to_owned());
    println!(
        "semaphore `{}` of {of} permits (keys {}) on {nodes} nodes, quorum {quorum}",
        inspection.resource(),
        listed(&inspection.keys_for(ResourceKind::Semaphore)),
    );
    print_nodes(inspection, waits, |stored: &Stored| {
        let shown: Vec<String> = stored
            .permits()
            .iter()
            .map(|p| format!("{}:{}", p.slot(), p.holder().token()))
            .collect();
        format!(
            "{} held{}{}",
            shown.len(),
            if shown.is_empty() {
                String::new()
            } else {
                format!("  {}", shown.join(" "))
            },
            stored
                .permit_count()
                .map(|c| format!("  (count {c})"))
                .unwrap_or_default()
        )
    });
    let held = confirmed(inspection, |w| matches!(w, Claimed::Permit(_))).len();
    let unreachable = unreachable(inspection);
    match inspection.verdict() {
        Verdict::Held if held == 0 => held_otherwise(inspection),
        Verdict::Held | Verdict::Free => println!(
            "verdict: {held} of {of} permits held, each confirmed on a quorum of {quorum}{}",
            if unreachable > 0 {
                format!(" ({unreachable} nodes unreachable)")
            } else {
                String::new()
            }
        ),
        _ => println!(
            "verdict: unknown — {held} of {of} permits confirmed on a quorum of {quorum}; \
             {unreachable} of {nodes} nodes unreachable"
        ),
    }
}

/// A reader-writer lock.
pub(crate) fn rwlock(inspection: &Inspection, waits: Waits<'_>) {
    let (quorum, nodes) = (inspection.quorum(), inspection.nodes().len());
    println!(
        "reader-writer lock `{}` (keys {}) on {nodes} nodes, quorum {quorum}",
        inspection.resource(),
        listed(&inspection.keys_for(ResourceKind::RwLock)),
    );
    print_nodes(inspection, waits, |stored: &Stored| {
        let readers = stored.readers();
        format!(
            "writer {}  readers {}{}{}",
            stored
                .writer()
                .map_or("-".to_owned(), |w| w.token().to_string()),
            readers.len(),
            if readers.is_empty() {
                String::new()
            } else {
                let tokens: Vec<String> = readers.iter().map(|r| r.token().to_string()).collect();
                format!(" ({})", tokens.join(" "))
            },
            if stored.writer_waiting() {
                "  a writer waits"
            } else {
                ""
            }
        )
    });
    let writer = confirmed(inspection, |w| w == Claimed::Writer);
    let readers = confirmed(inspection, |w| w == Claimed::Reader);
    match (inspection.verdict(), writer.first()) {
        (Verdict::Held, Some(writer)) => println!(
            "verdict: written — writer {} confirmed on a quorum",
            writer.token()
        ),
        (Verdict::Held, None) if !readers.is_empty() => {
            let tokens: Vec<String> = readers.iter().map(|r| r.token().to_string()).collect();
            println!(
                "verdict: read — {} readers confirmed on a quorum ({})",
                readers.len(),
                tokens.join(" ")
            );
        }
        (Verdict::Held, None) => held_otherwise(inspection),
        (Verdict::Free, _) => println!("verdict: free — no writer or reader on a quorum"),
        _ => println!(
            "verdict: unknown — {} of {nodes} nodes unreachable; no writer or reader is \
             confirmed on a quorum of {quorum}",
            unreachable(inspection)
        ),
    }
}
