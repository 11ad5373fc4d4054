//! What a release tells its caller: [`ReleaseSummary`], per node, with
//! the nodes it still followed when it returned and a way to wait for
//! them.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

use crate::error::{NodeError, NodeFailure};

/// Each node's answer to a release, as it comes (`None`: not yet).
pub(crate) type Answers = Vec<Option<Result<bool, NodeError>>>;

/// The outcome of [`LockGuard::release`](crate::LockGuard::release), per node: what was known when it
/// returned (a quorum's answers, at least), and a way to wait for the
/// rest ([`settled`](Self::settled)).
///
/// Its `Display` says it in a line for a log: `released on 2 of 3 nodes;
/// on its way to 127.0.0.1:7003` (a quorum answered first; the last node's
/// answer is followed in the background). Its `Debug` lists the same,
/// field by field.
#[non_exhaustive]
pub struct ReleaseSummary {
    released_on: Vec<Arc<str>>,
    asked: usize,
    failures: Vec<NodeFailure>,
    /// The nodes still answering when `release` returned.
    following: Option<Following>,
}

/// The nodes a release still followed when it returned, and where their
/// answers show.
pub(crate) struct Following {
    /// By index and label.
    pub(crate) nodes: Vec<(usize, Arc<str>)>,
    pub(crate) answers: watch::Receiver<Answers>,
}

impl ReleaseSummary {
    /// What `release` knew when it returned: the nodes that deleted the
    /// token, how many were asked, the failed ones, and the nodes it still
    /// followed.
    pub(crate) fn new(
        released_on: Vec<Arc<str>>,
        asked: usize,
        failures: Vec<NodeFailure>,
        following: Option<Following>,
    ) -> Self {
        Self {
            released_on,
            asked,
            failures,
            following,
        }
    }

    /// How many nodes held the token and deleted it.
    pub fn released(&self) -> usize {
        self.released_on.len()
    }

    /// The nodes that held the token and deleted it.
    pub fn released_on(&self) -> impl ExactSizeIterator<Item = &str> {
        self.released_on.iter().map(|n| &**n)
    }

    /// How many nodes were asked: every node of the manager. Those neither
    /// in [`released_on`](Self::released_on), nor in
    /// [`failures`](Self::failures), nor [`pending`](Self::pending)
    /// answered that they did not hold the token.
    pub fn asked(&self) -> usize {
        self.asked
    }

    /// How many nodes had not answered yet when the release returned (it
    /// returns once the outcome is decided). Their releases are followed in
    /// the background, each within the node timeout;
    /// [`settled`](Self::settled) waits for them.
    pub fn pending(&self) -> usize {
        self.following.as_ref().map_or(0, |f| f.nodes.len())
    }

    /// The nodes that had not answered yet when the release returned (see
    /// [`pending`](Self::pending)).
    pub fn pending_on(&self) -> impl ExactSizeIterator<Item = &str> {
        self.following
            .as_ref()
            .map_or(&[][..], |f| &f.nodes[..])
            .iter()
            .map(|(_, label)| &**label)
    }

    /// The nodes that answered that they did not hold the token (its key
    /// had expired there, or never landed).
    pub fn not_held(&self) -> usize {
        self.asked
            .saturating_sub(self.released() + self.pending() + self.failures.len())
    }

    /// The nodes that did not answer, with their errors. Their keys, if
    /// any, expire after the ttl.
    pub fn failures(&self) -> &[NodeFailure] {
        &self.failures
    }

    /// Waits for every node's answer — each bounded by the node timeout —
    /// and returns the whole summary, with nothing [`pending`](Self::pending).
    ///
    /// `release` returns once the outcome is decided; this is for those
    /// who want to know every node's answer too (an audit log, a test).
    /// With a node frozen it takes the node timeout.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes. The releases go on in
    /// the background whether or not anybody waits for them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("reports:daily", Duration::from_secs(10)).await?;
    /// let summary = guard.release().await?; // decided: a quorum released
    /// let summary = summary.settled().await; // every node has answered
    /// assert_eq!(summary.pending(), 0);
    /// for failure in summary.failures() {
    ///     eprintln!("{} kept its key until the ttl: {}", failure.node, failure.error);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn settled(mut self) -> ReleaseSummary {
        let Some(Following { nodes, mut answers }) = self.following.take() else {
            return self;
        };
        let answered = |answers: &Answers| {
            nodes
                .iter()
                .all(|(node, _)| answers.get(*node).is_some_and(Option::is_some))
        };
        // An error means the follower is gone (the runtime is shutting
        // down): what it did not report stays unanswered.
        let _ = answers.wait_for(answered).await;
        let answers = answers.borrow();
        // A node not waited for (unresponsive) is listed as failed already:
        // its answer replaces that.
        self.failures
            .retain(|failure| nodes.iter().all(|(_, label)| *label != failure.node));
        for (node, label) in nodes {
            match answers.get(node).cloned().flatten() {
                Some(Ok(true)) => self.released_on.push(label),
                Some(Ok(false)) => {}
                Some(Err(error)) => self.failures.push(NodeFailure { node: label, error }),
                None => self.failures.push(NodeFailure {
                    node: label,
                    error: NodeError::UnexpectedReply(
                        "not followed: the runtime is shutting down".to_owned(),
                    ),
                }),
            }
        }
        drop(answers);
        self
    }
}

impl fmt::Display for ReleaseSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes = if self.asked == 1 { "node" } else { "nodes" };
        write!(
            f,
            "released on {} of {} {nodes}",
            self.released(),
            self.asked
        )?;
        if self.pending() > 0 {
            // The common case on healthy nodes: a quorum answered first.
            let pending: Vec<&str> = self.pending_on().collect();
            write!(f, "; on its way to {}", pending.join(", "))?;
        }
        if !self.failures.is_empty() {
            let failures: Vec<String> = self.failures.iter().map(ToString::to_string).collect();
            write!(
                f,
                "; {} failed ({}): owed the release, delivered once they answer",
                failures.len(),
                failures.join("; ")
            )?;
        }
        if self.not_held() > 0 {
            write!(f, "; {} did not hold the token", self.not_held())?;
        }
        Ok(())
    }
}

impl fmt::Debug for ReleaseSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseSummary")
            .field("released_on", &self.released_on)
            .field("asked", &self.asked)
            .field("failures", &self.failures)
            .field("pending_on", &self.pending_on().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn summary(released: &[&str], failed: &[&str], pending: &[&str]) -> ReleaseSummary {
        let (_tx, answers) = watch::channel(Answers::new());
        ReleaseSummary {
            released_on: released.iter().map(|&n| Arc::from(n)).collect(),
            asked: 3,
            failures: failed
                .iter()
                .map(|&n| NodeFailure {
                    node: Arc::from(n),
                    error: NodeError::Timeout(Duration::from_millis(250)),
                })
                .collect(),
            following: (!pending.is_empty()).then(|| Following {
                nodes: pending
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (i, Arc::from(n)))
                    .collect(),
                answers,
            }),
        }
    }

    #[test]
    fn a_summary_says_what_happened_on_each_node() {
        let all = summary(&["a:1", "b:2", "c:3"], &[], &[]);
        assert_eq!(all.to_string(), "released on 3 of 3 nodes");
        let following = summary(&["a:1", "b:2"], &[], &["c:3"]);
        assert_eq!(
            following.to_string(),
            "released on 2 of 3 nodes; on its way to c:3"
        );
        assert_eq!(following.pending_on().collect::<Vec<_>>(), ["c:3"]);
        assert_eq!(following.not_held(), 0);
        let mixed = summary(&["a:1"], &["b:2"], &[]);
        assert_eq!(mixed.not_held(), 1);
        let text = mixed.to_string();
        assert!(
            text.starts_with("released on 1 of 3 nodes; 1 failed (b:2: "),
            "{text}"
        );
        assert!(
            text.contains("owed the release, delivered once they answer"),
            "{text}"
        );
        assert!(text.ends_with("; 1 did not hold the token"), "{text}");
        // Debug shows the nodes, not the channel the followers answer on.
        let debug = format!("{following:?}");
        assert!(debug.contains("pending_on: [\"c:3\"]"), "{debug}");
        assert!(!debug.contains("Receiver"), "{debug}");
    }
}
