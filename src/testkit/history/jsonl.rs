//! The history file: JSON Lines, one record a line, each with a `"type"`
//! (`meta`, `grant`, `op`, `outage`, `loss`, `fault`, `down`, `key_loss`,
//! `wipe`, `stall`, `starved`, `leftover`, `counter`, `verdict`); times in nanoseconds from the recorder's origin
//! (fields ending in `_ns`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use super::{Down, Fault, Grant, History, KeyLoss, Leftover, Loss, Op, Outage, Span, Wipe, check};

/// The version of the history file's format, written in its `meta` record.
/// [`History::read_jsonl`] reads this version and the earlier ones (version
/// 2 added the `down` and `key_loss` records and the node count, version 3
/// the `leftover` record, version 4 the `wipe` record).
pub const FORMAT_VERSION: u32 = 4;

/// What went wrong writing or reading a history file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// Reading or writing failed.
    #[error("history file i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not a record of the format.
    #[error("history line {line}: {source}")]
    Malformed {
        /// The line, counting from 1.
        line: usize,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The file is of a version of the format this checker does not read.
    #[error(
        "history line {line}: format version {version}, but this checker reads versions 1 to {FORMAT_VERSION}"
    )]
    Version {
        /// The line of the `meta` record.
        line: usize,
        /// The version it names.
        version: u32,
    },
}

/// One line of the file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Record {
    Meta {
        version: u32,
        #[serde(default)]
        seed: Option<u64>,
        #[serde(default)]
        failure_bound_ns: Option<u64>,
        #[serde(default)]
        nodes: Option<usize>,
    },
    Grant(Grant),
    Op(Op),
    Outage(Outage),
    Loss(Loss),
    Fault(Fault),
    Down(Down),
    KeyLoss(KeyLoss),
    Wipe(Wipe),
    Stall(Span),
    Starved(Span),
    Leftover(Leftover),
    Counter {
        resource: String,
        value: u64,
    },
    /// The verdict when the file was written, for a person reading it:
    /// reading the file checks the history again instead.
    Verdict {
        ok: bool,
        violations: Vec<String>,
        preempted: usize,
        losses_after_stalls: usize,
        #[serde(default)]
        losses_without_keys: usize,
        #[serde(default)]
        failures_after_stalls: usize,
        #[serde(default)]
        excused_overlaps: usize,
        #[serde(default)]
        losses_after_wipes: usize,
    },
}

impl History {
    /// Writes the history as JSON Lines: a `meta` record (format version,
    /// seed, failure bound), every record, and last the verdict of
    /// [`check`] (for a person reading the file; [`History::read_jsonl`]
    /// does not trust it).
    ///
    /// # Errors
    ///
    /// [`HistoryError::Io`] when writing fails.
    pub fn write_jsonl(&self, mut out: impl Write) -> Result<(), HistoryError> {
        let verdict = check(self);
        let records = std::iter::once(Record::Meta {
            version: FORMAT_VERSION,
            seed: self.seed,
            failure_bound_ns: self
                .failure_bound
                .map(|b| u64::try_from(b.as_nanos()).unwrap_or(u64::MAX)),
            nodes: self.nodes,
        })
        .chain(self.grants.iter().cloned().map(Record::Grant))
        .chain(self.ops.iter().cloned().map(Record::Op))
        .chain(self.outages.iter().copied().map(Record::Outage))
        .chain(self.losses.iter().cloned().map(Record::Loss))
        .chain(self.faults.iter().cloned().map(Record::Fault))
        .chain(self.down.iter().copied().map(Record::Down))
        .chain(self.key_losses.iter().cloned().map(Record::KeyLoss))
        .chain(self.wipes.iter().cloned().map(Record::Wipe))
        .chain(self.stalls.iter().copied().map(Record::Stall))
        .chain(self.starved.iter().copied().map(Record::Starved))
        .chain(self.leftovers.iter().cloned().map(Record::Leftover))
        .chain(
            self.counters
                .iter()
                .map(|(resource, &value)| Record::Counter {
                    resource: resource.clone(),
                    value,
                }),
        )
        .chain(std::iter::once(Record::Verdict {
            ok: verdict.is_ok(),
            violations: verdict.violations.iter().map(|v| v.to_string()).collect(),
            preempted: verdict.preempted,
            losses_after_stalls: verdict.losses_after_stalls,
            losses_without_keys: verdict.losses_without_keys,
            failures_after_stalls: verdict.failures_after_stalls,
            excused_overlaps: verdict.excused_overlaps.len(),
            losses_after_wipes: verdict.losses_after_wipes,
        }));
        for record in records {
            serde_json::to_writer(&mut out, &record).map_err(std::io::Error::from)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Reads a history written by [`History::write_jsonl`]. Blank lines are
    /// skipped; the `verdict` record is not trusted (check the history
    /// again with [`check`]).
    ///
    /// # Errors
    ///
    /// [`HistoryError::Malformed`] naming the first line that is not a
    /// record, [`HistoryError::Version`] for another format version, and
    /// [`HistoryError::Io`] when reading fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use quorumlock::testkit::history::{Grant, History, HistoryError, check};
    /// use std::time::Duration;
    ///
    /// let mut history = History::default();
    /// history.grants.push(Grant::new(0, "jobs:a", Duration::ZERO, Duration::from_millis(100)));
    /// let mut file = Vec::new();
    /// history.write_jsonl(&mut file)?;
    /// let read = History::read_jsonl(&file[..])?;
    /// assert_eq!(read, history);
    /// assert!(check(&read).is_ok());
    ///
    /// let broken = History::read_jsonl(&b"{\"type\":\"meta\",\"version\":1}\n{\"type\":\"grant\"\n"[..]);
    /// assert!(matches!(broken, Err(HistoryError::Malformed { line: 2, .. })));
    /// # Ok::<(), HistoryError>(())
    /// ```
    pub fn read_jsonl(input: impl BufRead) -> Result<History, HistoryError> {
        let mut history = History::default();
        for (i, line) in input.lines().enumerate() {
            let line_no = i + 1;
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let record: Record =
                serde_json::from_str(&line).map_err(|source| HistoryError::Malformed {
                    line: line_no,
                    source,
                })?;
            match record {
                Record::Meta {
                    version,
                    seed,
                    failure_bound_ns,
                    nodes,
                } => {
                    if !(1..=FORMAT_VERSION).contains(&version) {
                        return Err(HistoryError::Version {
                            line: line_no,
                            version,
                        });
                    }
                    history.seed = seed;
                    history.failure_bound = failure_bound_ns.map(std::time::Duration::from_nanos);
                    history.nodes = nodes;
                }
                Record::Grant(grant) => history.grants.push(grant),
                Record::Op(op) => history.ops.push(op),
                Record::Outage(outage) => history.outages.push(outage),
                Record::Loss(loss) => history.losses.push(loss),
                Record::Fault(fault) => history.faults.push(fault),
                Record::Down(down) => history.down.push(down),
                Record::KeyLoss(loss) => history.key_losses.push(loss),
                Record::Wipe(wipe) => history.wipes.push(wipe),
                Record::Stall(span) => history.stalls.push(span),
                Record::Starved(span) => history.starved.push(span),
                Record::Leftover(leftover) => history.leftovers.push(leftover),
                Record::Counter { resource, value } => {
                    history.counters.insert(resource, value);
                }
                Record::Verdict { .. } => {}
            }
        }
        Ok(history)
    }
}
